package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/console"
)

// task is the tasks sample's entity as the API answers it.
type task struct {
	entity
	Title     string  `json:"title"`
	Done      bool    `json:"done"`
	Priority  string  `json:"priority"`
	DueAt     *string `json:"dueAt"`
	DeletedAt *string `json:"deletedAt"`
}

// The task sample's binary under `serve`, one process, every line that
// needs no other: each subtest works in a tenant of its own.
func TestTasks(t *testing.T) {
	t.Parallel()
	reserve(t, 1)
	a := newApp(t, "tasks")
	srv := a.serve(t, "tasks-1")
	t.Run("parallel", func(t *testing.T) { tasksLines(t, a, srv) })
	// Disabling a consumer touches every tenant: after the others.
	t.Run("console", func(t *testing.T) { consoleLine(t, a, srv) })
	t.Run("stops cleanly", func(t *testing.T) { srv.stop(shutdownTimeout) })
}

func tasksLines(t *testing.T, a *app, srv *server) {
	t.Run("crud", func(t *testing.T) {
		t.Parallel()
		alice := a.as(t, srv, uuid.New(), "alice", "User")
		created := ok[task](alice.write("task.create", map[string]any{"title": "Try kumiko"}))
		require.Equal(t, 1, created.Version)
		require.Equal(t, "normal", created.Priority)

		updated := ok[task](alice.write("task.update", map[string]any{"id": created.ID, "version": 1, "changes": map[string]any{"priority": "high"}}))
		require.Equal(t, 2, updated.Version)
		require.Equal(t, "high", updated.Priority)

		p := alice.write("task.update", map[string]any{"id": created.ID, "version": 1, "changes": map[string]any{"title": "stale"}}).failed(http.StatusConflict)
		require.Equal(t, "version_conflict", p.Code)
		require.Equal(t, map[string]any{"currentVersion": float64(2), "expectedVersion": float64(1)}, p.Details)

		other := ok[task](alice.write("task.create", map[string]any{"title": "Second"}))
		list := ok[struct {
			Rows       []task `json:"rows"`
			NextCursor string `json:"nextCursor"`
		}](alice.query("task.list", map[string]any{"limit": 10, "sort": []map[string]any{{"field": "title"}}}))
		require.Len(t, list.Rows, 2)
		require.Equal(t, []string{"Second", "Try kumiko"}, []string{list.Rows[0].Title, list.Rows[1].Title})
		require.Equal(t, "", list.NextCursor)

		detail := ok[task](alice.query("task.detail", map[string]any{"id": created.ID}))
		require.Equal(t, updated, detail)

		deleted := ok[task](alice.write("task.delete", map[string]any{"id": other.ID, "version": 1}))
		require.NotNil(t, deleted.DeletedAt)
		list.Rows = nil
		list = ok[struct {
			Rows       []task `json:"rows"`
			NextCursor string `json:"nextCursor"`
		}](alice.query("task.list", map[string]any{"limit": 10}))
		require.Len(t, list.Rows, 1, "a deleted task leaves the list")
		require.Equal(t, created.ID, list.Rows[0].ID)

		require.Equal(t, 1, a.db.Count(t, "SELECT count(*) FROM read_task WHERE id = $1 AND deleted_at IS NOT NULL", other.ID))
		require.Equal(t, 2, a.db.Count(t, "SELECT count(*) FROM kumiko_events WHERE aggregate_id = $1", other.ID),
			"created and deleted, as events")
	})
	t.Run("command and query", func(t *testing.T) {
		t.Parallel()
		bob := a.as(t, srv, uuid.New(), "bob", "User")
		created := ok[task](bob.write("task.create", map[string]any{"title": "Ship it"}))
		done := ok[entity](bob.command("task.complete", map[string]any{"id": created.ID, "version": 1, "note": "shipped"}))
		require.Equal(t, entity{ID: created.ID, Version: 3}, done, "task.completed and task.updated")
		p := bob.command("task.complete", map[string]any{"id": created.ID, "version": 3}).failed(http.StatusUnprocessableEntity)
		require.Equal(t, "already_done", p.Reason)
		require.True(t, ok[task](bob.query("task.detail", map[string]any{"id": created.ID})).Done)

		ok[task](bob.write("task.create", map[string]any{"title": "Not yet"}))
		stats := ok[[]struct {
			Month     string `json:"month"`
			Created   int    `json:"created"`
			Completed int    `json:"completed"`
		}](bob.query("task.stats", map[string]any{}))
		require.Len(t, stats, 1)
		require.Equal(t, time.Now().UTC().Format("2006-01"), stats[0].Month)
		require.Equal(t, 2, stats[0].Created)
		require.Equal(t, 1, stats[0].Completed)
	})

	t.Run("event stream resumes by Last-Event-ID", func(t *testing.T) {
		t.Parallel()
		carol := a.as(t, srv, uuid.New(), "carol", "User")
		live := carol.events(0)
		first := ok[task](carol.write("task.create", map[string]any{"title": "Seen live"}))
		f := live.next(15 * time.Second)
		require.Equal(t, "task.created", f.Event)
		require.Equal(t, first.ID, f.Data.AggregateID)
		live.close()

		// Written while nobody listens.
		missed := ok[task](carol.write("task.create", map[string]any{"title": "Missed"}))
		ok[task](carol.write("task.update", map[string]any{"id": missed.ID, "version": 1, "changes": map[string]any{"priority": "low"}}))

		resumed := carol.events(f.ID)
		after := ok[task](carol.write("task.create", map[string]any{"title": "After the reconnect"}))
		var got []string
		var ids []int64
		for len(got) < 3 {
			g := resumed.next(15 * time.Second)
			got = append(got, g.Event+" "+g.Data.AggregateID.String())
			ids = append(ids, g.ID)
		}
		require.Equal(t, []string{"task.created " + missed.ID.String(), "task.updated " + missed.ID.String(), "task.created " + after.ID.String()}, got,
			"the missed events once, in order, then live; nothing before the resume point")
		require.Greater(t, ids[0], f.ID)
		require.Less(t, ids[0], ids[1])
		require.Less(t, ids[1], ids[2])
	})

	t.Run("command line against the running app", func(t *testing.T) {
		t.Parallel()
		dave := a.as(t, srv, uuid.New(), "dave", "User")
		created := ok[task](dave.write("task.create", map[string]any{"title": "Inspect me"}))
		ok[task](dave.write("task.update", map[string]any{"id": created.ID, "version": 1, "changes": map[string]any{"title": "Inspected"}}))

		var shards []struct {
			Name       string `json:"name"`
			InstanceID string `json:"instanceId"`
			Status     string `json:"status"`
			Liveness   string `json:"liveness"`
		}
		require.NoError(t, json.Unmarshal([]byte(a.cli(t, "consumer", "list", "--json").stdout), &shards))
		byName := map[string]string{}
		for _, s := range shards {
			byName[s.Name+"@"+s.InstanceID] = s.Liveness
		}
		require.Contains(t, byName, "jobs@__shared__", "%+v", shards)
		require.Equal(t, "live", byName["kumiko.sse@tasks-1"], "the serving process's own shard, beating: %+v", shards)

		var tl struct {
			AggregateID uuid.UUID `json:"aggregateId"`
			Version     int       `json:"version"`
			Events      []struct {
				Type    string         `json:"type"`
				Payload map[string]any `json:"payload"`
			} `json:"events"`
		}
		out := a.cli(t, "inspect", "task", created.ID.String(), "--json").stdout
		require.NoError(t, json.Unmarshal([]byte(out), &tl), out)
		require.Equal(t, created.ID, tl.AggregateID)
		require.Equal(t, 2, tl.Version)
		require.Len(t, tl.Events, 2, out)
		require.Equal(t, "task.created", tl.Events[0].Type)
		require.Equal(t, "task.updated", tl.Events[1].Type)
		require.Equal(t, "Inspected", tl.Events[1].Payload["title"])
	})

	t.Run("job on an event, run at its time", func(t *testing.T) {
		t.Parallel()
		erin := a.as(t, srv, uuid.New(), "erin", "User")
		due := time.Now().Add(3 * time.Second).UTC().Truncate(time.Millisecond)
		created := ok[task](erin.write("task.create", map[string]any{"title": "Remind me", "dueAt": due.Format(time.RFC3339Nano)}))
		// task.created enqueues task.plan-reminder (the event trigger),
		// which enqueues task.remind at the due time; that appends
		// reminder.due.
		waitFor(t, 30*time.Second, "reminder.due", countIs(t, a.db, 1,
			"SELECT count(*) FROM kumiko_events WHERE type = 'reminder.due' AND payload->>'taskId' = $1", created.ID.String()))
		var at time.Time
		require.NoError(t, a.db.Pool.QueryRow(t.Context(),
			"SELECT created_at FROM kumiko_events WHERE type = 'reminder.due' AND payload->>'taskId' = $1", created.ID.String()).Scan(&at))
		require.False(t, at.Before(due), "the reminder ran at %s, before its time %s", at, due)
		waitFor(t, 10*time.Second, "task.remind completes", countIs(t, a.db, 1,
			"SELECT count(*) FROM river_job WHERE kind = 'task.remind' AND state = 'completed' AND args->'args'->>'taskId' = $1", created.ID.String()))
	})

	t.Run("job by hand", func(t *testing.T) {
		t.Parallel()
		var run struct {
			ID int64 `json:"id"`
		}
		out := a.cli(t, "job", "run", "task.daily-digest", "--json").stdout
		require.NoError(t, json.Unmarshal([]byte(out), &run), out)
		waitFor(t, 20*time.Second, "the digest job completes", countIs(t, a.db, 1,
			"SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'", run.ID))
		require.Positive(t, a.db.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'digest.compiled'"))
	})

	t.Run("two saves of one task leave one reminder", func(t *testing.T) {
		t.Parallel()
		tenant := uuid.New()
		fay := a.as(t, srv, tenant, "fay", "User")
		due := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
		created := ok[task](fay.write("task.create", map[string]any{"title": "Once", "dueAt": due}))
		ok[task](fay.write("task.update", map[string]any{"id": created.ID, "version": 1, "changes": map[string]any{"title": "Still once", "dueAt": due}}))
		waitFor(t, 20*time.Second, "both saves planned their reminder", countIs(t, a.db, 2,
			"SELECT count(*) FROM river_job WHERE kind = 'task.plan-reminder' AND state = 'completed' AND args->'cause'->>'tenantId' = $1", tenant.String()))
		require.Equal(t, 1, a.db.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'task.remind' AND args->'args'->>'taskId' = $1", created.ID.String()),
			"the sample's promise: one reminder per (task, due time), however often it is saved")
	})
}

// The console: sign in with a token (session cookie and CSRF token), an
// action refused without the CSRF token, disable and enable a consumer,
// seen in GET /api/consumers.
func consoleLine(t *testing.T, a *app, srv *server) {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Transport: a.hc.Transport, Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, form url.Values, csrf string) (int, http.Header) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.base+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", srv.base)
		if csrf != "" {
			req.Header.Set(console.CSRFHeader, csrf)
		}
		resp, err := browser.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	operator := token(t, uuid.New(), "olga", "Operator")
	code, header := post("/ops/login", url.Values{"token": {operator}, "next": {"/ops/consumers"}}, "")
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/ops/consumers", header.Get("Location"))
	u, _ := url.Parse(srv.base + "/ops/")
	cookies := map[string]string{}
	for _, c := range jar.Cookies(u) {
		cookies[c.Name] = c.Value
	}
	require.NotEmpty(t, cookies[console.SessionCookie], "the session cookie")
	csrf := cookies[console.CSRFCookie]
	require.NotEmpty(t, csrf, "the CSRF cookie")

	req, err := http.NewRequest(http.MethodGet, srv.base+"/ops/consumers", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/html")
	page, err := browser.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	require.Equal(t, http.StatusOK, page.StatusCode, "signed in by the cookie alone: %s", body)
	require.Contains(t, string(body), csrf, "the page carries the CSRF token")

	status := func() string {
		var shards []struct {
			Name, InstanceID, Status string
		}
		list := ok[[]struct {
			Name       string `json:"name"`
			InstanceID string `json:"instanceId"`
			Status     string `json:"status"`
		}](a.as(t, srv, uuid.New(), "olga", "Operator").do(http.MethodGet, "/api/consumers", nil))
		for _, s := range list {
			if s.Name == "jobs" {
				return s.Status
			}
			shards = append(shards, struct{ Name, InstanceID, Status string }{s.Name, s.InstanceID, s.Status})
		}
		t.Fatalf("no shard jobs among %+v", shards)
		return ""
	}
	require.NotEqual(t, "disabled", status())
	code, _ = post("/ops/consumers/disable", url.Values{"name": {"jobs"}}, "")
	require.Equal(t, http.StatusForbidden, code, "an action without the session's CSRF token is refused")
	require.NotEqual(t, "disabled", status())

	code, _ = post("/ops/consumers/disable", url.Values{"name": {"jobs"}}, csrf)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "disabled", status())
	code, _ = post("/ops/consumers/enable", url.Values{"name": {"jobs"}}, csrf)
	require.Equal(t, http.StatusOK, code)
	require.NotEqual(t, "disabled", status())
}
