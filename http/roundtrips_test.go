package http_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/internal/roundtrips"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// countingStore counts the calls of an idempotency store (a Redis round
// trip each).
type countingStore struct {
	idempotency.Store
	claims, completes atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, k idempotency.Key, fp string) (*idempotency.Response, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, k, fp)
}

func (s *countingStore) Complete(ctx context.Context, k idempotency.Key, fp string, resp idempotency.Response) error {
	s.completes.Add(1)
	return s.Store.Complete(ctx, k, fp, resp)
}

// One keyed HTTP create of an entity without inline projections costs two
// round trips to PostgreSQL — BEGIN, the idempotency key insert and the
// append in one batch; the read row and COMMIT in another — and one claim
// and one completion in the idempotency store. A change that adds a round
// trip fails here.
func TestKeyedCreateRoundTrips(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{probe})
	// The store's post-commit wake-up (pg_notify, coalesced across writers)
	// is not on a request's path.
	trips := &roundtrips.Recorder{Skip: func(sql string) bool { return strings.Contains(sql, "pg_notify") }}
	cfg, err := pgxpool.ParseConfig(app.URL)
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := eventstore.New(pool, eventstore.Config{Schema: app.Schema, Upcaster: app.Registry})
	require.NoError(t, err)
	t.Cleanup(store.Close)
	d, err := pipeline.New(app.Registry, store, pipeline.Config{})
	require.NoError(t, err)
	idem := &countingStore{Store: newMemStore()}
	s, err := khttp.NewServer(khttp.Config{JWTSecret: secret, Idempotency: idem}, d, store)
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	alice := token(t, "alice", tenantA, "User")

	create := func(key string) {
		t.Helper()
		r := doOn(t, srv, with(post("/api/write", alice, `{"type":"member.create","payload":{"email":"`+key+`@example.com"}}`), "Idempotency-Key", key))
		require.Equal(t, http.StatusOK, r.status, r.String())
	}
	create("warm-up") // statement descriptions are cached per connection
	create("warm-up-2")
	// The warm-ups' records are completed after their answers: counted
	// from here they would be this test's.
	require.NoError(t, s.WaitRecords(context.Background()))
	trips.Take()
	idem.claims.Store(0)
	idem.completes.Store(0)

	create("counted")
	require.Equal(t, [][]string{{"BEGIN", "INSERT", "INSERT"}, {"INSERT", "COMMIT"}}, trips.Take(),
		"BEGIN and the key insert travel with the append, the row with COMMIT")

	// The record is completed after the answer; once it is, a retry is
	// replayed with one claim and without touching PostgreSQL. (A retry
	// arriving before the completion waits for it, claiming again:
	// TestIdempotencyRetryBeforeCompletion.)
	require.NoError(t, s.WaitRecords(context.Background()))
	r := doOn(t, srv, with(post("/api/write", alice, `{"type":"member.create","payload":{"email":"counted@example.com"}}`), "Idempotency-Key", "counted"))
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"), r.String())
	require.Equal(t, int64(2), idem.claims.Load())
	require.Equal(t, int64(1), idem.completes.Load())
	require.Empty(t, trips.Take())
}
