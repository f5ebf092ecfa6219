package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
)

// insertBacklog is the number of events the INSERT-per-event drain reads.
const insertBacklog = 20_000

// insertDrainRows compares the drain of a backlog by a pipelined consumer
// (as multi-stream projections run) whose handler INSERTs one row per event
// with the raw pass sending the same INSERTs as one pgx.Batch per pass,
// each from a fresh cursor and an empty table in every round.
func (b *bench) insertDrainRows(ctx context.Context) ([]row, error) {
	schema := b.store.Schema() + "_inserts"
	fmt.Fprintf(os.Stderr, "  seeding %s events into schema %s …\n", formatValue(float64(b.n.insert), ""), schema)
	store, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema)
	last, err := b.seedBacklog(ctx, schema, b.n.insert)
	if err != nil {
		return nil, err
	}
	tables := [2]string{pgx.Identifier{schema, "fw_rows"}.Sanitize(), pgx.Identifier{schema, "raw_rows"}.Sanitize()}
	for _, t := range tables {
		if _, err := b.pool.Exec(ctx, `CREATE TABLE `+t+` (event_id bigint PRIMARY KEY, tenant_id uuid NOT NULL)`); err != nil {
			return nil, err
		}
	}
	insert := func(table string) string { return `INSERT INTO ` + table + ` (event_id, tenant_id) VALUES ($1, $2)` }

	raw := newRawPasser(b.pool, schema)
	sides := [2]func(ctx context.Context, name string) (passFunc, error){
		func(ctx context.Context, name string) (passFunc, error) {
			return consumerPass(ctx, store, consumer.Consumer{Name: name, Pipelined: true,
				Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
					_, err := tx.Exec(ctx, insert(tables[0]), ev.ID, [16]byte(ev.TenantID))
					return err
				}})
		},
		func(ctx context.Context, name string) (passFunc, error) {
			return raw.batchPass(ctx, name, insert(tables[1]))
		},
	}
	name := fmt.Sprintf("consumer INSERT per event, drain %s events, batch %d (raw: one pgx.Batch per pass)", formatValue(float64(b.n.insert), ""), passBatch)
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	total, err := b.drainSides(ctx, name, "bench-inserts", last, int64(b.n.insert), sides[:], func(ctx context.Context, side int) error {
		_, err := b.pool.Exec(ctx, `TRUNCATE `+tables[side])
		return err
	})
	if err != nil {
		return nil, err
	}
	return []row{{name: name, unit: "events/s", fw: total[0].rate(), raw: total[1].rate(), goal: atLeastOfRaw(0.50)}}, nil
}

// batchPass is the raw pass (see startWith) that sends insert for each
// event (its id and tenant) in one batch.
func (r *rawPasser) batchPass(ctx context.Context, name, insert string) (passFunc, error) {
	return r.startWith(ctx, name, 0, func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
		var batch pgx.Batch
		for _, ev := range evs {
			batch.Queue(insert, ev.ID, [16]byte(ev.TenantID))
		}
		return tx.SendBatch(ctx, &batch).Close()
	})
}
