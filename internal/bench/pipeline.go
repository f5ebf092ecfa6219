package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// createPayload is the payload of every create the dispatcher rows send; the
// decoded, defaulted fields are what both sides store.
const createPayload = `{"title":"write the benchmark","priority":"high"}`

// benchFeature is the smallest CRUD feature: one entity of three fields and no
// inline projection, so its rows isolate what the dispatcher itself costs.
var benchFeature = feature.Define("bench", func(r *feature.Registrar) {
	r.Entity("bench_item", feature.Fields{
		"title":    feature.Text().Required().MaxLen(200),
		"done":     feature.Bool().Default(false),
		"priority": feature.Enum("low", "normal", "high").Default("normal"),
	})
	r.Crud("bench_item", feature.Access{Write: feature.Roles("Admin", "User"), Read: feature.AnyUser()})
	// A page of rows as maps and the same page into structs.
	page := feature.ProjectionFilter{Limit: rowsPage}
	feature.HandleQuery(r, "bench_item.rows", feature.AnyUser(), func(ctx feature.CommandContext, _ struct{}) (any, error) {
		return ctx.QueryProjection("bench_item").Rows(page)
	})
	feature.HandleQuery(r, "bench_item.typed_rows", feature.AnyUser(), func(ctx feature.CommandContext, _ struct{}) (any, error) {
		return feature.RowsAs[benchRow](ctx.QueryProjection("bench_item"), page)
	})
})

// rowsPage is the page the typed-rows comparison reads.
const rowsPage = 200

// benchRow is a bench_item row read with feature.RowsAs.
type benchRow struct {
	ID        uuid.UUID `json:"id"`
	Version   int       `json:"version"`
	Title     string    `json:"title"`
	Done      bool      `json:"done"`
	Priority  string    `json:"priority"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// createVariant is one CRUD create measured through the dispatcher and raw.
type createVariant struct {
	name   string
	entity string
	// rowSQL inserts the read row into the raw schema's table: $1 id, $2
	// tenant, $3 version, then the values of fields in order.
	rowSQL string
	fields []string
	// byMonth: the raw transaction also does the tasks_by_month upsert the
	// sample's inline projection runs on task.created.
	byMonth bool
}

// pipelineRows compares Dispatcher.Write of a CRUD create (validation, the
// event, the read row and inline projections in one transaction) with one
// raw transaction doing the same inserts, for the tasks sample as users get it
// and for benchFeature, at 1 and 16 writers. Both sides work in schemas of
// their own, set up identically by a dispatcher's EnsureSchema; the raw side
// writes SQL into its tables.
func (b *bench) pipelineRows(ctx context.Context) ([]row, error) {
	fwSchema := b.store.Schema() + "_pipe"
	rawSchema := fwSchema + "_raw"
	fmt.Fprintf(os.Stderr, "  setting up the dispatcher in schemas %s and %s …\n", fwSchema, rawSchema)
	reg, err := registry.Build(tasks.Feature, benchFeature)
	if err != nil {
		return nil, err
	}
	fwStore, err := eventstore.New(b.pool, eventstore.Config{Schema: fwSchema, Upcaster: reg})
	if err != nil {
		return nil, err
	}
	rawStore, err := eventstore.New(b.pool, eventstore.Config{Schema: rawSchema, Upcaster: reg})
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, fwStore, fwSchema, rawSchema) // rawStore never appends: nothing to wait for
	var d *pipeline.Executor
	for _, s := range []*eventstore.Store{fwStore, rawStore} {
		if err := migrateAll(ctx, s); err != nil {
			return nil, err
		}
		sd, err := pipeline.New(reg, s, pipeline.Config{})
		if err != nil {
			return nil, err
		}
		if err := sd.EnsureSchema(ctx); err != nil {
			return nil, err
		}
		if s == fwStore {
			d = sd
		}
	}

	caller := pipeline.Caller{
		User:          feature.User{ID: benchUser, TenantID: b.tenant, Roles: []string{"User"}, Authenticated: true},
		RequestID:     "req-0001",
		CorrelationID: "corr-0001",
	}
	meta := benchMetadata() // the same user, request and correlation ids
	rawTable := func(name string) string { return pgx.Identifier{rawSchema, name}.Sanitize() }
	insertEvent := `INSERT INTO ` + pgx.Identifier{rawSchema, "kumiko_events"}.Sanitize() + ` (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	// The statement of the sample's countMonth, on the raw schema's table.
	upsertMonth := `
INSERT INTO ` + rawTable("tasks_by_month") + ` AS t (tenant_id, month, created, completed) VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id, month) DO UPDATE
	SET created = t.created + EXCLUDED.created, completed = t.completed + EXCLUDED.completed`

	variants := []createVariant{
		{
			name:   "dispatcher create, tasks sample (+ tasks_by_month)",
			entity: "task",
			rowSQL: `INSERT INTO ` + rawTable("read_task") + ` (id, tenant_id, version, done, due_at, notes, priority, title, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), now())`,
			fields:  []string{"done", "dueAt", "notes", "priority", "title"},
			byMonth: true,
		},
		{
			name:   "dispatcher create, 3-field entity",
			entity: "bench_item",
			rowSQL: `INSERT INTO ` + rawTable("read_bench_item") + ` (id, tenant_id, version, done, priority, title, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, now(), now())`,
			fields: []string{"done", "priority", "title"},
		},
	}

	var rows []row
	for _, v := range variants {
		req := pipeline.Request{Type: registry.VerbCreate.HandlerName(v.entity), Payload: json.RawMessage(createPayload)}
		// What the dispatcher stores for req: the decoded fields with their
		// defaults, as the event payload and as the row's columns.
		in, err := reg.DecodePayload(req.Type, req.Payload)
		if err != nil {
			return rows, err
		}
		fields := in.(registry.CreateInput).Fields
		payload, err := json.Marshal(fields)
		if err != nil {
			return rows, err
		}
		evType := registry.VerbCreate.EventType(v.entity)
		et, _ := reg.Event(evType)
		evVersion := max(et.Version, 1)

		for _, workers := range []int{1, 16} {
			p := pair{
				name:    v.name + ", " + writers(workers),
				unit:    "writes/s",
				workers: workers,
				goal:    atLeastOfRaw(0.70), // the dispatcher issue's target
				fw: func(ctx context.Context, _ int) (int, error) {
					_, err := d.Write(ctx, caller, req)
					return 1, err
				},
				raw: func(ctx context.Context, _ int) (int, error) {
					return 1, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
						id, tenant := [16]byte(uuid.Must(uuid.NewV7())), [16]byte(b.tenant)
						if _, err := tx.Exec(ctx, insertEvent, id, v.entity, tenant, 1, evType, evVersion, string(payload), meta, benchUser); err != nil {
							return err
						}
						args := []any{id, tenant, 1}
						for _, f := range v.fields {
							args = append(args, fields[f])
						}
						if _, err := tx.Exec(ctx, v.rowSQL, args...); err != nil {
							return err
						}
						if v.byMonth {
							if _, err := tx.Exec(ctx, upsertMonth, tenant, time.Now().UTC().Format("2006-01"), 1, 0); err != nil {
								return err
							}
						}
						return nil
					})
				},
			}
			r, err := b.compare(ctx, p)
			if err != nil {
				return rows, err
			}
			rows = append(rows, r)
		}
	}

	// Typed rows against map rows: the same query of a 200-row page, once
	// answered as maps and once read into structs (feature.RowsAs).
	create := pipeline.Request{Type: registry.VerbCreate.HandlerName("bench_item"), Payload: json.RawMessage(createPayload)}
	for range rowsPage {
		if _, err := d.Write(ctx, caller, create); err != nil {
			return rows, err
		}
	}
	query := func(handler string) opFunc {
		req := pipeline.Request{Type: handler, Payload: json.RawMessage(`{}`)}
		return func(ctx context.Context, _ int) (int, error) {
			_, err := d.Query(ctx, caller, req)
			return 1, err
		}
	}
	r, err := b.compare(ctx, pair{
		name: fmt.Sprintf("query %d rows into structs (RowsAs) vs as maps (Rows)", rowsPage), unit: "queries/s", workers: 1,
		goal: atLeastOfRaw(0.95), fw: query("bench_item.typed_rows"), raw: query("bench_item.rows"),
	})
	return append(rows, r), err
}
