package ops

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/pipeline"
)

// forgetRecordsTimeout bounds the removal of a forgotten subject's
// idempotency records after the forget committed.
const forgetRecordsTimeout = 10 * time.Second

// ForgetRecords is the pipeline.ForgetStep that removes from r the cached
// responses of the requests whose events hold the forgotten subject's
// personal data (eventstore.Store.SubjectRequestsTx), once the forget has
// committed. A removal that fails is logged; those records then expire
// after the store's TTL (idempotency.DefaultTTL, 24 hours, by default).
// The kumiko facade adds it to the executor of a server and a worker with a
// Redis store, and subject forget to its own when REDIS_URL is set.
func ForgetRecords(store *eventstore.Store, r idempotency.Remover, log *slog.Logger) pipeline.ForgetStep {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) error {
		reqs, err := store.SubjectRequestsTx(ctx, tx, tenant, subject)
		if err != nil || len(reqs) == 0 {
			return err
		}
		keys := make([]idempotency.Key, len(reqs))
		for i, req := range reqs {
			keys[i] = idempotency.Key{Tenant: tenant.String(), User: req.UserID, Key: req.Key}
		}
		remove := func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetRecordsTimeout)
			defer cancel()
			if err := r.Remove(ctx, keys...); err != nil {
				log.Warn("kumiko: remove the forgotten subject's idempotency records; they expire after the store's TTL",
					"tenant", tenant, "records", len(keys), "err", err)
			}
		}
		if t := eventstore.TxOf(tx); t != nil {
			t.AfterCommit(remove)
		} else {
			remove() // a forget in a transaction of the caller's: removing early only costs a replay
		}
		return nil
	}
}

// forgetRecords has a forget through c's executor remove the forgotten
// subject's idempotency records from the Redis store at Settings.RedisURL;
// without one it does nothing. The function it returns closes the client.
func (c *conn) forgetRecords() (func(), error) {
	if c.cfg.RedisURL == "" {
		return func() {}, nil
	}
	opts, err := redis.ParseURL(c.cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opts.ContextTimeoutEnabled = true
	client := redis.NewClient(opts)
	c.disp.OnForget(ForgetRecords(c.store, idempotency.NewRedisStore(client, idempotency.RedisConfig{}), c.cfg.Logger))
	return func() { _ = client.Close() }, nil
}
