package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
)

func TestMigrateCommand(t *testing.T) {
	db := kumikotest.NewDB(t)
	run := func(args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
	schema := db.Schema + "_cli"
	t.Cleanup(func() { db.Exec(t, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })

	out, err := run("migrate", "--database-url", db.URL, "--schema", schema)
	require.NoError(t, err)
	require.Contains(t, out, "applied migration 1")
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'kumiko_events'", schema))

	out, err = run("migrate", "--database-url", db.URL, "--schema", schema)
	require.NoError(t, err)
	require.Contains(t, out, "is up to date")

	_, err = run("migrate", "--database-url", "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "--schema", schema)
	require.Error(t, err, "an unreachable database fails the command")
}
