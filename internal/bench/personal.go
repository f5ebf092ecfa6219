package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
)

// personalPayload is a payload with three personal fields.
const personalPayload = `{"name":"Ada Lovelace","email":"ada@example.org","phone":"+44 20 7946 0000","plan":"gold","seats":12}`

// personalRows measures personal data (docs/personal-data.md) against the
// same work without it, in one store schema each, side by side:
//
//   - a new stream's append of one event with three personal fields of the
//     stream's own subject (its data key created in the append) followed by
//     the load of the stream (opening the fields), against the same append
//     and load with the fields plain; goal ≥ 0.85;
//   - the same with the fields of one of 100 subjects that have data keys
//     (a customer's later events); goal ≥ 0.85;
//   - the forget of a subject with 1,000 events across 10 streams
//     (Store.ForgetSubjectTx, one transaction) against a raw DELETE of a
//     key row of the same table, as the time of one forget.
func (b *bench) personalRows(ctx context.Context) ([]row, error) {
	kek := make([]byte, 32)
	if _, err := rand.Read(kek); err != nil {
		return nil, err
	}
	keys, err := eventstore.NewLocalKeys(kek)
	if err != nil {
		return nil, err
	}
	schema := b.store.Schema() + "_pd"
	plain, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, plain, schema)
	sealed, err := eventstore.New(b.pool, eventstore.Config{Schema: schema, Keys: keys})
	if err != nil {
		return nil, err
	}
	defer sealed.Close()

	personal := map[string]string{"name": "", "email": "", "phone": ""}
	// Subjects that have data keys: the fields of a customer's later events.
	known := make([]map[string]string, 100)
	for i := range known {
		subject := uuid.NewString()
		known[i] = map[string]string{"name": subject, "email": subject, "phone": subject}
	}
	var next atomic.Int64
	appendLoad := func(s *eventstore.Store, fields func() map[string]string) opFunc {
		return func(ctx context.Context, _ int) (int, error) {
			st := eventstore.Stream{TenantID: b.tenant, AggregateType: aggType, AggregateID: uuid.Must(uuid.NewV7())}
			ev := benchEvent()
			ev.Payload, ev.Personal = json.RawMessage(personalPayload), fields()
			if _, err := s.Append(ctx, st, 0, ev); err != nil {
				return 0, err
			}
			evs, err := s.Load(ctx, b.tenant, st.AggregateID, eventstore.LoadOptions{})
			if err != nil {
				return 0, err
			}
			if len(evs) != 1 {
				return 0, fmt.Errorf("load: %d events, want 1", len(evs))
			}
			return 1, nil
		}
	}
	none := func() map[string]string { return nil }
	var rows []row
	for _, p := range []pair{{
		name: "append + load, 3 personal fields of a new subject (raw: the same fields plain)",
		fw:   appendLoad(sealed, func() map[string]string { return personal }),
	}, {
		name: "append + load, 3 personal fields of a known subject (raw: the same fields plain)",
		fw:   appendLoad(sealed, func() map[string]string { return known[next.Add(1)%int64(len(known))] }),
	}} {
		p.unit, p.workers, p.raw, p.goal = "ops/s", 1, appendLoad(plain, none), atLeastOfRaw(0.85)
		r, err := b.compare(ctx, p)
		rows = append(rows, r)
		if err != nil {
			return rows, err
		}
	}

	// A subject with 1,000 events across 10 streams, forgotten; beside it
	// a raw delete of one key row.
	fmt.Fprintln(os.Stderr, "  forgetting subjects of 1,000 events …")
	const rounds = 5
	var fw, raw time.Duration
	for range rounds {
		subject := uuid.NewString()
		for range 10 {
			st := eventstore.Stream{TenantID: b.tenant, AggregateType: aggType, AggregateID: uuid.Must(uuid.NewV7())}
			batch := make([]eventstore.NewEvent, 100)
			for i := range batch {
				batch[i] = benchEvent()
				batch[i].Payload, batch[i].Personal = json.RawMessage(personalPayload), map[string]string{"name": subject, "email": subject, "phone": subject}
			}
			if _, err := sealed.Append(ctx, st, 0, batch...); err != nil {
				return rows, err
			}
		}
		start := time.Now()
		if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := sealed.ForgetSubjectTx(ctx, tx, b.tenant, subject)
			return err
		}); err != nil {
			return rows, err
		}
		fw += time.Since(start)
		other := uuid.NewString()
		if _, err := b.pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "kumiko_subject_keys"}.Sanitize()+
			` (tenant_id, subject, kek_id, wrapped) VALUES ($1, $2, 'raw', '\x00')`, b.tenant, other); err != nil {
			return rows, err
		}
		start = time.Now()
		if _, err := b.pool.Exec(ctx, `DELETE FROM `+pgx.Identifier{schema, "kumiko_subject_keys"}.Sanitize()+
			` WHERE tenant_id = $1 AND subject = $2`, b.tenant, other); err != nil {
			return rows, err
		}
		raw += time.Since(start)
	}
	rows = append(rows, row{name: "forget a subject of 1,000 events in 10 streams (raw: DELETE of one key row)", unit: "ms",
		fw: float64(fw.Microseconds()) / 1000 / rounds, raw: float64(raw.Microseconds()) / 1000 / rounds,
		goal: goal{text: "< 1,000 ms", met: func(fw, _ float64) bool { return fw < 1000 }}})
	return rows, nil
}
