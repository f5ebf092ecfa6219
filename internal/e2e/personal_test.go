package e2e_test

import (
	"context"
	"net/url"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// pgDump is a plain-text pg_dump of the app's schema: every row of every
// table in it.
func (a *app) pgDump(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(a.db.URL)
	require.NoError(t, err)
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_dump", "--data-only", "--schema="+a.db.Schema, "--dbname="+u.String()).CombinedOutput()
	require.NoError(t, err, "pg_dump: %s", out)
	return string(out)
}

// The e2eapp's members have personal names and emails. Under serve, with
// KUMIKO_DATA_KEY: the events and snapshots hold them sealed; after
// `subject forget` of one member a pg_dump of the app's schema holds none
// of that member's values while another member's are intact, the API reads
// the forgotten fields as null, and a restart with another key fails.
func TestPersonalDataForgottenUnderServe(t *testing.T) {
	t.Parallel()
	reserve(t, 1)
	a := newE2EApp(t)
	srv := a.serve(t, "pd-s")
	tenant := uuid.New()
	writer := a.as(t, srv, tenant, "writer", "User")

	ada := ok[entity](writer.write("member.create", map[string]any{"name": "Ada Lovelace", "email": "ada@example.org", "plan": "gold"}))
	bob := ok[entity](writer.write("member.create", map[string]any{"name": "Bob Byron", "email": "bob@example.org", "plan": "gold"}))
	ok[entity](writer.write("member.update", map[string]any{"id": ada.ID, "version": 1, "changes": map[string]any{"email": "ada@lovelace.org"}}))
	dump := a.pgDump(t)
	require.Contains(t, dump, "Ada Lovelace", "the read table holds the name while Ada is known")
	require.Zero(t, a.db.Count(t, `SELECT count(*) FROM kumiko_events WHERE payload::text LIKE '%Ada%' OR payload::text LIKE '%example.org%'`),
		"events hold the values sealed")

	a.cli(t, "subject", "forget", ada.ID.String(), "--tenant", tenant.String())
	dump = a.pgDump(t)
	for _, v := range []string{"Ada Lovelace", "ada@example.org", "ada@lovelace.org"} {
		require.NotContains(t, dump, v)
	}
	for _, v := range []string{"Bob Byron", "bob@example.org"} {
		require.Contains(t, dump, v, "another member's data is intact")
	}
	got := ok[map[string]any](writer.query("member.detail", map[string]any{"id": ada.ID}))
	require.Nil(t, got["name"])
	require.Nil(t, got["email"])
	require.Equal(t, "gold", got["plan"])
	require.Equal(t, "Bob Byron", ok[map[string]any](writer.query("member.detail", map[string]any{"id": bob.ID}))["name"])
	srv.stop(shutdownTimeout)

	// Another key: the start fails and says why.
	wrong := *a
	wrong.env = append(slices.Clone(a.env), "KUMIKO_DATA_KEY=b3RoZXItZGF0YS1rZXktZm9yLXBlcnNvbmFsLWZsZCE=")
	r := wrong.tryCLI(t, "serve")
	require.NotZero(t, r.code)
	require.Contains(t, r.stdout+r.stderr, "does not open")
}
