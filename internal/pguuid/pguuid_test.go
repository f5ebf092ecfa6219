package pguuid_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/pguuid"
	"github.com/kumiko-go/kumiko/kumikotest"
)

func TestEncodesBinaryForAUUIDParameter(t *testing.T) {
	u := uuid.New()
	sd := &pgconn.StatementDescription{ParamOIDs: []uint32{pgtype.UUIDOID}}
	var eqb pgx.ExtendedQueryBuilder
	m := pgtype.NewMap()
	build := func() { require.NoError(t, eqb.Build(m, sd, []any{u})) }
	require.Greater(t, testing.AllocsPerRun(100, build), 10.0,
		"without Register a uuid.UUID goes through its text and a discarded error")

	m = pgtype.NewMap()
	pguuid.Register(m)
	require.LessOrEqual(t, testing.AllocsPerRun(100, build), 4.0, "one or two, against 19 without")
	require.Equal(t, [][]byte{u[:]}, eqb.ParamValues)
	require.Equal(t, []int16{pgtype.BinaryFormatCode}, eqb.ParamFormats)

	b, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, &u, nil)
	require.NoError(t, err)
	require.Equal(t, u[:], b, "a pointer is encoded as what it points to")
	b, err = m.Encode(pgtype.TextOID, pgtype.TextFormatCode, u, nil)
	require.NoError(t, err)
	require.Equal(t, u.String(), string(b), "a text parameter still gets the UUID's text")
}

func TestRoundTripsThroughPostgres(t *testing.T) {
	db := kumikotest.NewDB(t) // its pool registers pguuid on every connection
	db.Exec(t, `CREATE TABLE ids (id uuid PRIMARY KEY, label text NOT NULL)`)
	ctx := context.Background()
	u, nilID := uuid.New(), uuid.Nil
	for _, id := range []uuid.UUID{u, nilID} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO ids (id, label) VALUES ($1, $2)`, id, id)
		require.NoError(t, err)
		var got uuid.UUID
		var label string
		var same bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id, label, id = $2::text::uuid FROM ids WHERE id = $1`, id, id.String()).Scan(&got, &label, &same))
		require.Equal(t, id, got)
		require.Equal(t, id.String(), label)
		require.True(t, same)
	}

	// The pool's connections have it registered.
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	sd := &pgconn.StatementDescription{ParamOIDs: []uint32{pgtype.UUIDOID}}
	var eqb pgx.ExtendedQueryBuilder
	allocs := testing.AllocsPerRun(10, func() { require.NoError(t, eqb.Build(conn.Conn().TypeMap(), sd, []any{u})) })
	require.LessOrEqual(t, allocs, 4.0)
}
