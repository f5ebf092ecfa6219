package main

import (
	"context"
	"fmt"
	"os"
	"time"

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
	fmt.Fprintf(os.Stderr, "  seeding %s events into schema %s …\n", formatValue(insertBacklog, ""), schema)
	store, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema)
	last, err := b.seedBacklog(ctx, schema, insertBacklog)
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
	name := fmt.Sprintf("consumer INSERT per event, drain %s events, batch %d (raw: one pgx.Batch per pass)", formatValue(insertBacklog, ""), passBatch)
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	var total [2]measured
	for round := range b.cfg.rounds {
		for i := range 2 {
			side := (i + round) % 2
			if _, err := b.pool.Exec(ctx, `TRUNCATE `+tables[side]); err != nil {
				return nil, err
			}
			pass, err := sides[side](ctx, fmt.Sprintf("bench-inserts-%d-%d", round, side))
			if err != nil {
				return nil, err
			}
			m, err := drain(ctx, pass, last, time.Time{}, nil)
			if err == nil && m.units != insertBacklog {
				err = fmt.Errorf("drained %d events, want %d", m.units, insertBacklog)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			total[side].units += m.units
			total[side].elapsed += m.elapsed
		}
	}
	return []row{{name: name, unit: "events/s", fw: total[0].rate(), raw: total[1].rate(), goal: atLeastOfRaw(0.50)}}, nil
}

// batchPass creates the state row name at the beginning of the log and
// returns its pass: lock the row, read the next passBatch events, send
// insert for each (event id, tenant) in one batch, write the cursor.
func (r *rawPasser) batchPass(ctx context.Context, name, insert string) (passFunc, error) {
	if _, err := r.pool.Exec(ctx, r.register, name, consumer.SharedInstance, 0); err != nil {
		return nil, fmt.Errorf("register raw state row %s: %w", name, err)
	}
	return func(ctx context.Context) (int, int64, error) {
		var (
			n      int
			cursor int64
		)
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, r.lock, name, consumer.SharedInstance).Scan(&cursor); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, r.read, cursor, passBatch)
			if err != nil {
				return err
			}
			evs, err := scanEvents(rows)
			if err != nil {
				return err
			}
			var batch pgx.Batch
			for _, ev := range evs {
				batch.Queue(insert, ev.ID, [16]byte(ev.TenantID))
			}
			if err := tx.SendBatch(ctx, &batch).Close(); err != nil {
				return err
			}
			if n = len(evs); n > 0 {
				cursor = evs[n-1].ID
			}
			_, err = tx.Exec(ctx, r.save, name, consumer.SharedInstance, cursor)
			return err
		})
		return n, cursor, err
	}, nil
}
