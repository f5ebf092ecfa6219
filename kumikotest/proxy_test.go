package kumikotest_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
)

// A proxy relays PostgreSQL connections until the test cuts them, makes new
// ones hang up or read garbage, or closes it (refused).
func TestProxy(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	p := kumikotest.NewProxy(t, db.URL)
	through := p.URL(db.URL)
	require.Contains(t, through, p.Addr())

	conn, err := pgx.Connect(ctx, through)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM kumiko_events").Scan(&n), "the test schema, through the proxy")

	require.Equal(t, 1, p.Cut())
	require.Error(t, conn.QueryRow(ctx, "SELECT 1").Scan(&n), "the cut connection is gone")

	for _, mode := range []kumikotest.ProxyMode{kumikotest.ProxyHangUp, kumikotest.ProxyGarbage} {
		p.SetMode(mode)
		_, err = pgx.Connect(ctx, through)
		var ce *pgconn.ConnectError
		require.ErrorAs(t, err, &ce, "mode %d", mode)
	}
	p.SetMode(kumikotest.ProxyForward)
	again, err := pgx.Connect(ctx, through)
	require.NoError(t, err)
	require.NoError(t, again.Close(ctx))

	p.Close()
	_, err = net.Dial("tcp", p.Addr())
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "closed: refused, got %v", err)
	p.Close() // idempotent
}
