package http_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// roundTrips counts what a pool sends to PostgreSQL: every statement sent
// alone and every batch (one round trip each), with the statements of each
// batch. The store's post-commit wake-up (pg_notify, coalesced across
// writers) is left out: it is not on a request's path.
type roundTrips struct {
	mu      sync.Mutex
	single  []string
	batches [][]string
	current []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "pg_notify") {
		r.mu.Lock()
		r.single = append(r.single, strings.Fields(d.SQL)[0])
		r.mu.Unlock()
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	r.current = nil
	r.mu.Unlock()
	return ctx
}

func (r *roundTrips) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	r.current = append(r.current, strings.Fields(d.SQL)[0])
	r.mu.Unlock()
}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	r.mu.Lock()
	r.batches = append(r.batches, r.current)
	r.mu.Unlock()
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.single, r.batches = nil, nil
}

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
	trips := &roundTrips{}
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
	trips.reset()
	idem.claims.Store(0)
	idem.completes.Store(0)

	create("counted")
	trips.mu.Lock()
	single, batches := trips.single, trips.batches
	trips.mu.Unlock()
	require.Empty(t, single, "statements sent alone; batches %v", batches)
	require.Equal(t, [][]string{{"BEGIN", "INSERT", "INSERT"}, {"INSERT", "COMMIT"}}, batches,
		"BEGIN and the key insert travel with the append, the row with COMMIT")

	// The record is completed after the answer: a retry waits for it and
	// is replayed without touching PostgreSQL.
	r := doOn(t, srv, with(post("/api/write", alice, `{"type":"member.create","payload":{"email":"counted@example.com"}}`), "Idempotency-Key", "counted"))
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"), r.String())
	require.Equal(t, int64(2), idem.claims.Load())
	require.Equal(t, int64(1), idem.completes.Load())
	trips.mu.Lock()
	defer trips.mu.Unlock()
	require.Empty(t, trips.single)
	require.Len(t, trips.batches, 2)
}
