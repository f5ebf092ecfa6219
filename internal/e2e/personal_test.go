package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
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

// redisValues is every string value of the Redis the apps share: a dump
// of what the idempotency records hold, read with GET (a DUMP compresses
// long strings), each record's response body decoded next to it.
func redisValues(t *testing.T) string {
	t.Helper()
	opts, err := redis.ParseURL(kumikotest.RedisURL())
	require.NoError(t, err)
	rc := redis.NewClient(opts)
	defer func() { _ = rc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b strings.Builder
	iter := rc.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := rc.Get(ctx, iter.Val()).Result()
		if err != nil {
			continue // gone meanwhile, or not a string: not a record
		}
		b.WriteString(v)
		b.WriteByte('\n')
		var rec struct{ Response struct{ Body []byte } } // an idempotency record's body is base64 in its JSON
		if json.Unmarshal([]byte(v), &rec) == nil {
			b.Write(rec.Response.Body)
			b.WriteByte('\n')
		}
	}
	require.NoError(t, iter.Err())
	return b.String()
}

// The e2eapp's members have personal names and emails. Under serve, with
// KUMIKO_DATA_KEY and REDIS_URL: the events and snapshots hold them sealed;
// after `subject forget` of one member and the forget route for another, a
// pg_dump of the app's schema and a dump of Redis (the cached responses of
// keyed writes) hold none of those members' values while a third member's
// are intact; the API reads the forgotten fields as null, a retry of a
// forgotten member's keyed write is not replayed nor is she found by the
// search of members, the export route returns the third member's values,
// and a restart with another key fails.
func TestPersonalDataForgottenUnderServe(t *testing.T) {
	t.Parallel()
	reserve(t, 1)
	a := newE2EApp(t)
	srv := a.serve(t, "pd-s")
	tenant := uuid.New()
	tag := tenant.String()[:8] // the values are this test's own in the shared Redis
	writer := a.as(t, srv, tenant, "writer", "User")
	admin := a.as(t, srv, tenant, "admin", "Admin")
	keyed := func(key string) *client { return writer.with("Idempotency-Key", key+"-"+tag) }

	type member struct{ name, email string }
	adaM, bobM, caraM := member{"Ada Lovelace " + tag, "ada-" + tag + "@example.org"},
		member{"Bob Byron " + tag, "bob-" + tag + "@example.org"}, member{"Cara Cole " + tag, "cara-" + tag + "@example.org"}
	adaMoved := "ada-" + tag + "@lovelace.org"
	create := func(key string, m member) entity {
		return ok[entity](keyed(key).write("member.create", map[string]any{"name": m.name, "email": m.email, "plan": "gold"}))
	}
	ada, bob, cara := create("ada", adaM), create("bob", bobM), create("cara", caraM)
	ok[entity](keyed("ada-moved").write("member.update", map[string]any{"id": ada.ID, "version": 1, "changes": map[string]any{"email": adaMoved}}))
	forgotten := []string{adaM.name, adaM.email, adaMoved, caraM.name, caraM.email}
	kept := []string{bobM.name, bobM.email}
	dump := a.pgDump(t)
	require.Contains(t, dump, adaM.name, "the read table holds the name while Ada is known")
	require.Zero(t, a.db.Count(t, `SELECT count(*) FROM kumiko_events WHERE payload::text LIKE '%' || $1 || '%'`, tag),
		"events hold the values sealed")
	require.Eventually(t, func() bool {
		records := redisValues(t)
		return !slices.ContainsFunc(append(slices.Clone(forgotten), kept...), func(v string) bool { return !strings.Contains(records, v) })
	}, 30*time.Second, 50*time.Millisecond, "the keyed writes' responses are cached in Redis with the members' values")

	type hits struct {
		Hits []struct {
			Row        map[string]any    `json:"row"`
			Highlights map[string]string `json:"highlights"`
		} `json:"hits"`
	}
	found := ok[hits](writer.query("member.search", map[string]any{"q": "lovel " + tag}))
	require.Len(t, found.Hits, 1, "a member is found by a prefix of her name")
	require.Equal(t, ada.ID.String(), found.Hits[0].Row["id"])
	require.Contains(t, found.Hits[0].Highlights["name"], "<mark>Lovelace</mark>")

	exported := admin.do(http.MethodGet, "/api/subjects/"+bob.ID.String()+"/export", nil)
	require.Equal(t, http.StatusOK, exported.status, "%s", exported.body)
	for _, v := range kept {
		require.Contains(t, string(exported.body), v)
	}

	a.cli(t, "subject", "forget", ada.ID.String(), "--tenant", tenant.String())
	r := admin.do(http.MethodPost, "/api/subjects/"+cara.ID.String()+"/forget", nil)
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
	dump, records := a.pgDump(t), redisValues(t)
	for _, v := range forgotten {
		require.False(t, strings.Contains(dump, v), "the database still holds %q", v)
		require.False(t, strings.Contains(records, v), "Redis still holds %q", v)
	}
	for _, v := range kept {
		require.True(t, strings.Contains(dump, v), "another member's data is intact: %q", v)
		require.True(t, strings.Contains(records, v), "another member's cached response is intact: %q", v)
	}
	got := ok[map[string]any](writer.query("member.detail", map[string]any{"id": ada.ID}))
	require.Nil(t, got["name"])
	require.Nil(t, got["email"])
	require.Equal(t, "gold", got["plan"])
	require.Equal(t, bobM.name, ok[map[string]any](writer.query("member.detail", map[string]any{"id": bob.ID}))["name"])
	require.Empty(t, ok[hits](writer.query("member.search", map[string]any{"q": "lovelace " + tag})).Hits, "a forgotten member is not found")
	require.Len(t, ok[hits](writer.query("member.search", map[string]any{"q": "byron " + tag})).Hits, 1)
	retry := keyed("ada").write("member.create", map[string]any{"name": adaM.name, "email": adaM.email, "plan": "gold"})
	require.Equal(t, http.StatusConflict, retry.status, "%s", retry.body)
	require.Contains(t, string(retry.body), "already_applied")
	require.NotContains(t, string(retry.body), adaM.name)
	exported = admin.do(http.MethodGet, "/api/subjects/"+ada.ID.String()+"/export", nil)
	require.Equal(t, http.StatusOK, exported.status, "%s", exported.body)
	require.NotContains(t, string(exported.body), tag, "a forgotten member exports nothing of its values")
	srv.stop(shutdownTimeout)

	// Another key: the start fails and says why.
	wrong := *a
	wrong.env = append(slices.Clone(a.env), "KUMIKO_DATA_KEY=b3RoZXItZGF0YS1rZXktZm9yLXBlcnNvbmFsLWZsZCE=")
	r2 := wrong.tryCLI(t, "serve")
	require.NotZero(t, r2.code)
	require.Contains(t, r2.stdout+r2.stderr, "does not open")
}
