package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// TranslateError marks outages and leaves every other error alone.
func TestTranslateError(t *testing.T) {
	t.Parallel()
	// A real connect error: nobody listens on the port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, refused := pgx.Connect(t.Context(), "postgres://postgres@"+dead+"/x?sslmode=disable&connect_timeout=5")
	require.Error(t, refused)

	pg := func(code string) error {
		return fmt.Errorf("insert: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	for name, tc := range map[string]struct {
		err         error
		unavailable bool
	}{
		"connect refused":       {refused, true},
		"too many connections":  {pg("53300"), true},
		"admin shutdown":        {pg("57P01"), true},
		"crash shutdown":        {pg("57P02"), true},
		"cannot connect now":    {pg("57P03"), true},
		"connection exception":  {pg("08006"), true},
		"out of memory":         {pg("53200"), true},
		"unexpected EOF":        {fmt.Errorf("commit: %w", io.ErrUnexpectedEOF), true},
		"EOF":                   {io.EOF, true},
		"connection reset":      {&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, true},
		"conn closed":           {fmt.Errorf("begin: %w", pgconn.ErrConnClosed), true},
		"unique violation":      {pg("23505"), false},
		"syntax error":          {pg("42601"), false},
		"configuration limit":   {pg("53400"), false},
		"query canceled":        {pg("57014"), false},
		"caller cancelled":      {fmt.Errorf("load: %w", context.Canceled), false},
		"caller deadline":       {context.DeadlineExceeded, false},
		"version conflict":      {&eventstore.VersionConflictError{Expected: 1, Current: 2}, false},
		"no rows":               {pgx.ErrNoRows, false},
		"a handler's own error": {errors.New("refused"), false},
	} {
		got := eventstore.TranslateError(tc.err)
		require.Equal(t, tc.unavailable, errors.Is(got, eventstore.ErrUnavailable), name)
		require.ErrorIs(t, got, tc.err, "%s: the cause stays reachable", name)
		if tc.unavailable {
			require.Equal(t, "unavailable", eventstore.Code(got), name)
			require.Same(t, got, eventstore.TranslateError(got), "%s: translating twice changes nothing", name)
		} else {
			require.True(t, got == tc.err, "%s: left unchanged", name) //nolint:errorlint // the very same value, not one that wraps it
		}
	}
	require.NoError(t, eventstore.TranslateError(nil))
}

// The store's own calls answer ErrUnavailable when the connection is lost,
// on the pool and inside WithTx, and the transaction's write is gone.
func TestStoreErrorsAreTranslated(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	proxy := kumikotest.NewProxy(t, db.URL)
	cfg, err := pgxpool.ParseConfig(proxy.URL(db.URL))
	require.NoError(t, err)
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.MaxConns = 1 // one connection, so every cut and every count is exact
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := eventstore.New(pool, eventstore.Config{Schema: db.Schema})
	require.NoError(t, err)
	t.Cleanup(store.Close)
	stream := eventstore.Stream{AggregateID: uuid.New(), TenantID: uuid.New(), AggregateType: "thing"}
	ev := eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)}

	err = store.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := store.AppendTx(ctx, tx, stream, 0, ev); err != nil {
			return err
		}
		require.Equal(t, 1, proxy.Cut())
		return nil
	})
	require.ErrorIs(t, err, eventstore.ErrUnavailable, "a commit on a cut connection")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM kumiko_events"))

	_, err = store.Load(ctx, stream.TenantID, stream.AggregateID, eventstore.LoadOptions{}) // a fresh connection works
	require.NoError(t, err)
	require.Equal(t, 1, proxy.Cut())
	_, err = store.Load(ctx, stream.TenantID, stream.AggregateID, eventstore.LoadOptions{})
	require.ErrorIs(t, err, eventstore.ErrUnavailable, "a read on a cut connection")
	proxy.Close()
	for _, err := range store.ReadAll(ctx, 0, eventstore.ReadFilter{}) {
		require.ErrorIs(t, err, eventstore.ErrUnavailable, "a read with the server gone")
	}
	_, err = store.Append(ctx, stream, 0, ev)
	require.ErrorIs(t, err, eventstore.ErrUnavailable, "an append with the server gone")
}
