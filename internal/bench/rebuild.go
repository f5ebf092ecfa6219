package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

const (
	rebuildEvents  = 60_000 // created events the rebuild replays, one per stream (3 rounds stay under a minute at ~8k/s)
	rebuildTenants = 100    // tenants they are spread over, round robin
	rebuildBatch   = 2000   // events per transaction: RebuildOptions' default
	rebuildEntity  = "rebuild_item"
	rebuildProj    = "rebuild_counts"
	rebuildPayload = `{"title":"write the benchmark"}`
	rebuildTarget  = 60_000 // events/s the rebuild should reach
)

// rebuildFeature is one entity and the simplest inline projection on it: a
// per-tenant count of created items, one upsert per event.
var rebuildFeature = feature.Define("benchrebuild", func(r *feature.Registrar) {
	r.Entity(rebuildEntity, feature.Fields{
		"title": feature.Text().Required().MaxLen(200),
	})
	r.Crud(rebuildEntity, feature.Access{Write: feature.Roles("Admin", "User"), Read: feature.AnyUser()})
	r.Projection(rebuildProj, feature.InlineProjection{
		Source: rebuildEntity,
		Table:  rebuildCountsTable(rebuildProj),
		Apply: map[string]feature.ProjectionApplyFunc{
			registry.VerbCreate.EventType(rebuildEntity): func(ctx feature.ProjectionContext, _ feature.Event) error {
				_, err := ctx.DB().Exec(ctx.Context(), countUpsert(ctx.Table()), ctx.Tenant())
				return err
			},
		},
	})
})

// rebuildCountsTable is the projection's table under name.
func rebuildCountsTable(name string) feature.TableDef {
	return feature.TableDef{
		Name: name,
		Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "created", Type: "bigint", NotNull: true},
		},
		PrimaryKey: []string{"tenant_id"},
	}
}

// countUpsert is the projection's one statement on table ($1 the tenant).
func countUpsert(table string) string {
	return `INSERT INTO ` + table + ` AS t (tenant_id, created) VALUES ($1, 1)
ON CONFLICT (tenant_id) DO UPDATE SET created = t.created + 1`
}

// rebuildRows measures RebuildProjection of rebuildFeature's projection over
// a rebuildEvents-event store (no concurrent writers) against two hand-written
// baselines on the same events: the raw cursor read alone (SELECT … WHERE
// id > $1 ORDER BY id LIMIT 2000 in a loop, scanned into eventstore.Event),
// the ceiling of any replay; and that read plus the projection's upserts by
// hand, sent as one pipelined batch per transaction of 2000 events, into a
// table of the same shape: the same work a rebuild does, without the
// framework. Each side runs once per round,
// in alternating order.
func (b *bench) rebuildRows(ctx context.Context) ([]row, error) {
	schema := b.store.Schema() + "_rebuild"
	fmt.Fprintf(os.Stderr, "  seeding %s events into schema %s with COPY …\n", formatValue(float64(b.n.rebuild), ""), schema)
	reg, err := registry.Build(rebuildFeature)
	if err != nil {
		return nil, err
	}
	store, err := eventstore.New(b.pool, eventstore.Config{Schema: schema, Upcaster: reg})
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema) // nothing appended through store: nothing to wait for
	if err := migrateAll(ctx, store); err != nil {
		return nil, err
	}
	d, err := pipeline.New(reg, store, pipeline.Config{})
	if err != nil {
		return nil, err
	}
	if err := d.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	if err := b.seedRebuild(ctx, reg, schema); err != nil {
		return nil, err
	}

	events := pgx.Identifier{schema, "kumiko_events"}.Sanitize()
	rawTable := pgx.Identifier{schema, "raw_" + rebuildProj}.Sanitize()
	if _, err := b.pool.Exec(ctx, `CREATE TABLE `+rawTable+` (tenant_id uuid NOT NULL PRIMARY KEY, created bigint NOT NULL)`); err != nil {
		return nil, err
	}
	read := `SELECT ` + eventColumns + ` FROM ` + events + ` WHERE id > $1 ORDER BY id LIMIT $2`
	upsert := countUpsert(rawTable)

	type side func(ctx context.Context) (int64, error)
	rebuild := func(ctx context.Context) (int64, error) {
		res, err := d.RebuildProjection(ctx, rebuildProj, pipeline.RebuildOptions{})
		return res.Applied, err
	}
	rawRead := func(ctx context.Context) (int64, error) {
		var n, cursor int64
		for {
			rows, err := b.pool.Query(ctx, read, cursor, rebuildBatch)
			if err != nil {
				return n, err
			}
			evs, err := scanEvents(rows)
			if err != nil {
				return n, err
			}
			if len(evs) == 0 {
				return n, nil
			}
			n += int64(len(evs))
			cursor = evs[len(evs)-1].ID
		}
	}
	rawApply := func(ctx context.Context) (int64, error) {
		if _, err := b.pool.Exec(ctx, `TRUNCATE `+rawTable); err != nil {
			return 0, err
		}
		var n, cursor int64
		for {
			var batch int
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, read, cursor, rebuildBatch)
				if err != nil {
					return err
				}
				evs, err := scanEvents(rows)
				if err != nil {
					return err
				}
				var upserts pgx.Batch
				for _, ev := range evs {
					upserts.Queue(upsert, [16]byte(ev.TenantID))
				}
				if err := tx.SendBatch(ctx, &upserts).Close(); err != nil {
					return err
				}
				if batch = len(evs); batch > 0 {
					cursor = evs[batch-1].ID
				}
				return nil
			})
			if err != nil || batch == 0 {
				return n, err
			}
			n += int64(batch)
		}
	}

	readAll := func(ctx context.Context) (int64, error) {
		var n int64
		for _, err := range store.ReadAll(ctx, 0, eventstore.ReadFilter{PageSize: rebuildBatch}) {
			if err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}

	name := fmt.Sprintf("rebuild %s events, per-tenant counter", formatValue(float64(b.n.rebuild), ""))
	sides := []side{rebuild, rawRead, rawApply, readAll}
	sideNames := []string{"rebuild", "raw cursor read", "raw read + pipelined upserts", "ReadAll"}
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	if b.cfg.warmup > 0 { // one unmeasured read: the events in the buffer cache
		if _, err := rawRead(ctx); err != nil {
			return nil, fmt.Errorf("%s: warm-up: %w", name, err)
		}
	}
	total := make([]measured, len(sides))
	for round := range b.cfg.rounds {
		for i := range sides {
			s := (i + round) % len(sides)
			start := time.Now()
			n, err := sides[s](ctx)
			elapsed := time.Since(start)
			if err == nil && n != int64(b.n.rebuild) {
				err = fmt.Errorf("%d events, want %d", n, b.n.rebuild)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, sideNames[s], err)
			}
			total[s].units += n
			total[s].elapsed += elapsed
		}
	}
	if err := checkCounts(ctx, b, d, schema, rawTable); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	target := goal{
		text: "≥ " + formatValue(rebuildTarget, "") + "/s",
		met:  func(fw, _ float64) bool { return fw >= rebuildTarget },
	}
	return []row{
		{name: name + " vs raw cursor read (ceiling)", unit: "events/s", fw: total[0].rate(), raw: total[1].rate(), goal: target},
		{name: name + " vs raw read + upserts in one batch per tx of 2000 (same work)", unit: "events/s", fw: total[0].rate(), raw: total[2].rate()},
		{name: fmt.Sprintf("ReadAll %s events, pages of %d, vs raw cursor read", formatValue(float64(b.n.rebuild), ""), rebuildBatch),
			unit: "events/s", fw: total[3].rate(), raw: total[1].rate(), goal: atLeastOfRaw(0.75)},
	}, nil
}

// checkCounts verifies that the rebuilt projection and the raw table both
// hold one count per tenant adding up to rebuildEvents.
func checkCounts(ctx context.Context, b *bench, d *pipeline.Executor, schema, rawTable string) error {
	for _, table := range []string{pgx.Identifier{schema, rebuildProj}.Sanitize(), rawTable} {
		var tenants, sum int64
		if err := b.pool.QueryRow(ctx, `SELECT count(*), COALESCE(sum(created), 0) FROM `+table).Scan(&tenants, &sum); err != nil {
			return err
		}
		if tenants != rebuildTenants || sum != int64(b.n.rebuild) {
			return fmt.Errorf("%s holds %d tenants and %d events, want %d and %d", table, tenants, sum, rebuildTenants, b.n.rebuild)
		}
	}
	statuses, err := d.ProjectionStatuses(ctx)
	if err != nil {
		return err
	}
	for _, s := range statuses {
		if s.Name == rebuildProj && (s.Status != pipeline.ProjectionReady || s.Lag != 0) {
			return fmt.Errorf("projection %s is %s with lag %d after the rebuilds", s.Name, s.Status, s.Lag)
		}
	}
	return nil
}

// seedRebuild writes rebuildEvents created events of rebuildEntity, each to
// a stream of its own and spread over rebuildTenants tenants, into schema's
// kumiko_events with one COPY, then vacuums and analyses the table. Only the
// events are written: the rebuild needs no read rows.
func (b *bench) seedRebuild(ctx context.Context, reg *registry.Registry, schema string) error {
	evType := registry.VerbCreate.EventType(rebuildEntity)
	et, ok := reg.Event(evType)
	if !ok {
		return fmt.Errorf("no event type %s", evType)
	}
	evVersion := int32(max(et.Version, 1))
	tenants := make([][16]byte, rebuildTenants)
	for i := range tenants {
		tenants[i] = [16]byte(uuid.Must(uuid.NewV7()))
	}
	table := pgx.Identifier{schema, "kumiko_events"}
	meta := benchMetadata()
	i := 0
	copied, err := b.pool.CopyFrom(ctx, table,
		[]string{"aggregate_id", "aggregate_type", "tenant_id", "version", "type", "event_version", "payload", "metadata", "created_by"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == b.n.rebuild {
				return nil, nil
			}
			i++
			return []any{[16]byte(uuid.Must(uuid.NewV7())), rebuildEntity, tenants[i%rebuildTenants], int32(1), evType, evVersion, rebuildPayload, meta, benchUser}, nil
		}))
	if err != nil {
		return fmt.Errorf("seed %s: %w", table.Sanitize(), err)
	}
	if copied != int64(b.n.rebuild) {
		return errors.New("seed " + table.Sanitize() + ": short copy")
	}
	_, err = b.pool.Exec(ctx, "VACUUM (ANALYZE) "+table.Sanitize())
	return err
}
