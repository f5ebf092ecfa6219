package ops_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// The tasks sample binary, built once per test binary.
var (
	tasksOnce sync.Once
	tasksBin  string
	tasksErr  error
	tasksDir  string
)

func tasksBinary(t *testing.T) string {
	t.Helper()
	tasksOnce.Do(func() {
		tasksDir, tasksErr = os.MkdirTemp("", "kumiko-cli-test")
		if tasksErr != nil {
			return
		}
		tasksBin = filepath.Join(tasksDir, "tasks")
		out, err := exec.Command("go", "build", "-o", tasksBin, "github.com/kumiko-go/kumiko/samples/tasks/cmd/tasks").CombinedOutput()
		if err != nil {
			tasksErr = errors.New(string(out))
		}
	})
	require.NoError(t, tasksErr)
	return tasksBin
}

// cliRun is one finished run of the binary.
type cliRun struct {
	stdout, stderr string
	code           int
}

func runCLI(t *testing.T, bin string, env []string, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

func cliEnv(db *kumikotest.DB, extra ...string) []string {
	return append(append(os.Environ(), "DATABASE_URL="+db.URL, "KUMIKO_SCHEMA="+db.Schema,
		"KUMIKO_JWT_SECRET=", "REDIS_URL=", "KUMIKO_INSTANCE_ID="), extra...)
}

// seeded is a task stream: created, updated, and a task.completed stored at
// event version 1 (upcast to 3 on read).
type seeded struct {
	app     *kumikotest.App
	tenant  uuid.UUID
	id      uuid.UUID
	between time.Time // after the create, before the update
}

func seedTasks(t *testing.T) seeded {
	t.Helper()
	ctx := context.Background()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature, tasks.Reminders})
	tenant := uuid.New()
	caller := kumikotest.User(tenant, "alice", "User")
	res, err := app.Executor.Write(ctx, caller, pipeline.Request{Type: "task.create", Payload: json.RawMessage(`{"title":"Write the CLI"}`)})
	require.NoError(t, err)
	b, _ := json.Marshal(res)
	var row struct{ ID uuid.UUID }
	require.NoError(t, json.Unmarshal(b, &row))
	_, err = app.Executor.Write(ctx, caller, pipeline.Request{Type: "task.update",
		Payload: json.RawMessage(`{"id":"` + row.ID.String() + `","version":1,"changes":{"priority":"high","title":"Ship the CLI"}}`)})
	require.NoError(t, err)
	_, err = app.Store.Append(ctx, eventstore.Stream{TenantID: tenant, AggregateType: "task", AggregateID: row.ID}, 2,
		eventstore.NewEvent{Type: "task.completed", EventVersion: 1, Payload: map[string]any{"by": "alice"}})
	require.NoError(t, err)
	evs, err := app.Store.Load(ctx, tenant, row.ID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, evs, 3)
	between := evs[0].CreatedAt.Add(evs[1].CreatedAt.Sub(evs[0].CreatedAt) / 2)
	return seeded{app: app, tenant: tenant, id: row.ID, between: between}
}

// registerConsumer creates the state row of a shared consumer.
func registerConsumer(t *testing.T, store *eventstore.Store, name string) {
	t.Helper()
	ed, err := consumer.New(store, consumer.Config{InstanceID: "cli-test"}, consumer.Consumer{
		Name:   name,
		Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return nil },
	})
	require.NoError(t, err)
	require.NoError(t, ed.Register(context.Background()))
}

func TestOpsCLIOnTheAppBinary(t *testing.T) {
	t.Parallel()
	bin := tasksBinary(t)
	s := seedTasks(t)
	registerConsumer(t, s.app.Store, "task-counter")
	env := cliEnv(s.app.DB)
	run := func(args ...string) cliRun { t.Helper(); return runCLI(t, bin, env, args...) }
	ok := func(args ...string) string {
		t.Helper()
		r := run(args...)
		require.Equal(t, 0, r.code, "%v: stdout:\n%s\nstderr:\n%s", args, r.stdout, r.stderr)
		return r.stdout
	}
	fails := func(want string, args ...string) {
		t.Helper()
		r := run(args...)
		require.NotEqual(t, 0, r.code, "%v should fail; stdout:\n%s", args, r.stdout)
		require.Contains(t, r.stderr, want, "%v", args)
	}

	t.Run("migrate", func(t *testing.T) {
		out := ok("migrate")
		require.Contains(t, out, "schema "+s.app.Schema+" is up to date")
		require.Contains(t, out, "read tables of tasks are in place")
		// A fresh schema: applied, then up to date.
		schema := s.app.Schema + "_m"
		t.Cleanup(func() { s.app.Exec(t, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
		out = ok("migrate", "--schema", schema)
		require.Contains(t, out, "applied migration 1")
		require.Equal(t, 1, s.app.Count(t, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'read_task'", schema))
		var js struct {
			Schema  string
			Applied []int
		}
		require.NoError(t, json.Unmarshal([]byte(ok("migrate", "--schema", schema, "--json")), &js))
		require.Equal(t, schema, js.Schema)
		require.Empty(t, js.Applied)
	})

	t.Run("openapi", func(t *testing.T) {
		var doc struct {
			OpenAPI    string
			Info       struct{ Title string }
			Components struct{ Schemas map[string]json.RawMessage }
		}
		require.NoError(t, json.Unmarshal([]byte(ok("openapi")), &doc))
		require.Equal(t, "3.1.0", doc.OpenAPI)
		require.Equal(t, "tasks", doc.Info.Title)
		require.Contains(t, doc.Components.Schemas, "task.complete.payload")
		require.Contains(t, doc.Components.Schemas, "task.create.result")
	})

	t.Run("consumer", func(t *testing.T) {
		var list []consumer.ShardStatus
		require.NoError(t, json.Unmarshal([]byte(ok("consumer", "list", "--json")), &list))
		require.Len(t, list, 1)
		require.Equal(t, "task-counter", list[0].Name)
		require.Equal(t, consumer.StatusCatchingUp, list[0].Status)
		require.Equal(t, int64(3), list[0].LagEvents)

		out := ok("consumer", "list")
		require.Regexp(t, `(?m)^NAME\s+INSTANCE\s+PARTITION\s+OWNER\s+LIVENESS\s+STATUS\s+CURSOR`, out)
		require.Regexp(t, `(?m)^task-counter\s+__shared__\s+-\s+-\s+-\s+catching_up\s+0\s+\d+\s+3\s`, out)

		require.Contains(t, ok("consumer", "disable", "task-counter"), "consumer task-counter/__shared__ disabled")
		fails("wrong_state: consumer task-counter/__shared__ is disabled; disable needs it idle or dead or expired", "consumer", "disable", "task-counter")
		fails("wrong_state", "consumer", "restart", "task-counter")
		var st consumer.ShardStatus
		require.NoError(t, json.Unmarshal([]byte(ok("consumer", "status", "task-counter", "--json")), &st))
		require.Equal(t, consumer.StatusDisabled, st.Status)
		require.Contains(t, ok("consumer", "enable", "task-counter"), "enabled")
		require.Contains(t, ok("consumer", "skip", "task-counter"), "consumer task-counter/__shared__ skipped")
		require.NoError(t, json.Unmarshal([]byte(ok("consumer", "status", "task-counter", "--json")), &st))
		require.Equal(t, int64(2), st.LagEvents)
		fails("consumer_not_found: no consumer nope with instance __shared__", "consumer", "status", "nope")
		fails("consumer_not_found: no consumer task-counter with instance other", "consumer", "enable", "task-counter", "--instance", "other")
		fails("accepts 1 arg", "consumer", "status")
	})

	t.Run("consumer gc", func(t *testing.T) {
		// A per-instance shard of a process that never beat: unknown, kept
		// unless asked for; the shared shard is never touched.
		ed, err := consumer.New(s.app.Store, consumer.Config{InstanceID: "old-pod"}, consumer.Consumer{
			Name: "feed", Delivery: feature.PerInstance,
			Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return nil },
		})
		require.NoError(t, err)
		require.NoError(t, ed.Register(context.Background()))
		require.Regexp(t, `(?m)^feed\s+old-pod\s+-\s+-\s+unknown\s+catching_up\s`, ok("consumer", "list"))
		require.Contains(t, ok("consumer", "gc"), "no stale instances")
		require.Contains(t, ok("consumer", "gc", "--unknown", "--dry-run"), "would remove (dry run) 1 shards of 1 stale instances: old-pod")
		var res consumer.GCResult
		require.NoError(t, json.Unmarshal([]byte(ok("consumer", "gc", "--unknown", "--json")), &res))
		require.Equal(t, consumer.GCResult{Instances: []string{"old-pod"}, Shards: 1}, res)
		var list []consumer.ShardStatus
		require.NoError(t, json.Unmarshal([]byte(ok("consumer", "list", "--json")), &list))
		require.Len(t, list, 1)
		require.Equal(t, consumer.SharedInstance, list[0].InstanceID)
		fails("--stale-after must be positive", "consumer", "gc", "--stale-after", "-1s")
	})

	t.Run("inspect", func(t *testing.T) {
		out := ok("inspect", "task", s.id.String(), "--tenant", s.tenant.String())
		require.Contains(t, out, "task "+s.id.String()+"  tenant "+s.tenant.String()+"  version 3  archived no")
		require.Regexp(t, `(?m)^VER\s+ID\s+TYPE\s+EV\s+CREATED\s+BY\s+PAYLOAD\s+STORED AS$`, out)
		require.Regexp(t, `(?m)^1\s+\d+\s+task\.created\s+v1\s.*"title":"Write the CLI".*\s-$`, out)
		require.Regexp(t, `(?m)^3\s+\d+\s+task\.completed\s+v3\s.*\{"completedBy":"alice","note":""\}\s+v1 \{"by":"alice"\}$`, out)

		var tl struct {
			Version  int
			Archived bool
			Events   []struct {
				Type               string
				EventVersion       int
				StoredEventVersion int
				Payload            map[string]any
				RawPayload         map[string]any
			}
		}
		require.NoError(t, json.Unmarshal([]byte(ok("inspect", "task", s.id.String(), "--tenant", s.tenant.String(), "--json")), &tl))
		require.Equal(t, 3, tl.Version)
		require.Len(t, tl.Events, 3)
		require.Equal(t, 3, tl.Events[2].EventVersion)
		require.Equal(t, 1, tl.Events[2].StoredEventVersion)
		require.Equal(t, "alice", tl.Events[2].Payload["completedBy"])
		require.Equal(t, "alice", tl.Events[2].RawPayload["by"])

		fails("aggregate_not_found: no task", "inspect", "task", uuid.NewString(), "--tenant", s.tenant.String())
		fails("aggregate_not_found: no task", "inspect", "task", s.id.String(), "--tenant", uuid.NewString())
		fails("aggregate_not_found: no note", "inspect", "note", s.id.String(), "--tenant", s.tenant.String())
		require.Equal(t, out, ok("inspect", "task", s.id.String()), "without --tenant: the stream's own")
		fails("aggregate_not_found", "inspect", "task", uuid.NewString())
		fails("is not a non-nil UUID", "inspect", "task", "x", "--tenant", s.tenant.String())
	})

	t.Run("snapshot", func(t *testing.T) {
		out := ok("snapshot", "task", s.id.String(), "--tenant", s.tenant.String())
		require.Regexp(t, `snapshot of task \S+ at version \d+`, out)
		require.Equal(t, 1, s.app.Count(t, "SELECT count(*) FROM kumiko_snapshots WHERE aggregate_id = $1", s.id))
		fails("aggregate_not_found: no task", "snapshot", "task", uuid.NewString(), "--tenant", s.tenant.String())
	})

	t.Run("events asof", func(t *testing.T) {
		at := s.between.Format(time.RFC3339Nano)
		out := ok("events", "asof", "task", s.id.String(), at, "--tenant", s.tenant.String())
		require.Regexp(t, `(?m)^title\s+Write the CLI$`, out)
		require.Regexp(t, `(?m)^priority\s+normal$`, out)
		var row map[string]any
		require.NoError(t, json.Unmarshal([]byte(ok("events", "asof", "task", s.id.String(), time.Now().Add(time.Minute).Format(time.RFC3339), "--tenant", s.tenant.String(), "--json")), &row))
		require.Equal(t, "Ship the CLI", row["title"])
		require.Contains(t, row, "done")
		fails("not found: no task", "events", "asof", "task", s.id.String(), "2000-01-01T00:00:00Z", "--tenant", s.tenant.String())
		fails("is not RFC 3339", "events", "asof", "task", s.id.String(), "yesterday", "--tenant", s.tenant.String())
		require.Equal(t, out, ok("events", "asof", "task", s.id.String(), at), "without --tenant: the aggregate's own")

		// A stream that is no entity: its events up to the time.
		other := uuid.New()
		_, err := s.app.Store.Append(context.Background(), eventstore.Stream{TenantID: s.tenant, AggregateType: "ledger", AggregateID: other}, 0,
			eventstore.NewEvent{Type: "ledger.opened", Payload: map[string]any{"owner": "bob"}})
		require.NoError(t, err)
		out = ok("events", "asof", "ledger", other.String(), time.Now().Add(time.Minute).Format(time.RFC3339), "--tenant", s.tenant.String())
		require.Regexp(t, `(?m)^1\s+\d+\s+ledger\.opened\s+v1\s.*\{"owner":"bob"\}`, out)
	})

	t.Run("events tail", func(t *testing.T) {
		out := ok("events", "tail")
		require.Regexp(t, `(?m)^ID\s+CREATED\s+TENANT\s+AGGREGATE\s+VER\s+TYPE\s+PAYLOAD$`, out)
		require.Contains(t, out, "task.completed v3")
		lines := strings.Split(strings.TrimSpace(ok("events", "tail", "--json", "--type", "task.created", "--type", "task.updated")), "\n")
		require.Len(t, lines, 2)
		var ev struct {
			ID       int64
			Type     string
			TenantID uuid.UUID
		}
		require.NoError(t, json.Unmarshal([]byte(lines[1]), &ev))
		require.Equal(t, "task.updated", ev.Type)
		require.Equal(t, s.tenant, ev.TenantID)

		lines = strings.Split(strings.TrimSpace(ok("events", "tail", "--json", "-n", "1", "--tenant", s.tenant.String(), "--aggregate-type", "task")), "\n")
		require.Len(t, lines, 1)
		require.Contains(t, lines[0], `"type":"task.completed"`)
		require.Contains(t, ok("events", "tail", "--tenant", uuid.NewString()), "no events")
		out = ok("events", "tail", "--json", "--after", "0")
		require.GreaterOrEqual(t, strings.Count(out, "\n"), 3)
	})

	t.Run("events tail --follow", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// A poll far longer than the test: the notification must wake it.
		cmd := exec.CommandContext(ctx, bin, "events", "tail", "--follow", "--json", "-n", "0", "--type", "task.created", "--poll", "1h")
		cmd.Env = env
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		lines := make(chan string, 10)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Append until the follower has started listening and prints one.
		caller := kumikotest.User(s.tenant, "alice", "User")
		deadline := time.After(30 * time.Second)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			_, err := s.app.Executor.Write(ctx, caller, pipeline.Request{Type: "task.create", Payload: json.RawMessage(`{"title":"followed"}`)})
			require.NoError(t, err)
			select {
			case l, open := <-lines:
				require.True(t, open, "tail exited; stderr:\n%s", stderr.String())
				require.Contains(t, l, `"type":"task.created"`)
				require.Contains(t, l, `"title":"followed"`)

				// A writer holds an allocated id open while a later event
				// commits: the follower prints both, in id order, the late one
				// included.
				held, err := s.app.Pool.Begin(ctx)
				require.NoError(t, err)
				_, err = s.app.Store.AppendTx(ctx, held, eventstore.Stream{TenantID: s.tenant, AggregateType: "task"}, 0,
					eventstore.NewEvent{Type: "task.created", Payload: map[string]any{"title": "late"}})
				require.NoError(t, err)
				_, err = s.app.Executor.Write(ctx, caller, pipeline.Request{Type: "task.create", Payload: json.RawMessage(`{"title":"after"}`)})
				require.NoError(t, err)
				require.NoError(t, held.Commit(ctx))
				var got []string
				for len(got) < 2 {
					select {
					case l := <-lines:
						if !strings.Contains(l, `"title":"followed"`) {
							got = append(got, l)
						}
					case <-deadline:
						t.Fatalf("tail --follow printed %q; stderr:\n%s", got, stderr.String())
					}
				}
				require.Contains(t, got[0], `"title":"late"`)
				require.Contains(t, got[1], `"title":"after"`)
				require.NoError(t, cmd.Process.Signal(os.Interrupt))
				require.NoError(t, cmd.Wait(), "an interrupted follow exits 0; stderr:\n%s", stderr.String())
				return
			case <-tick.C:
			case <-deadline:
				t.Fatalf("no line from tail --follow; stderr:\n%s", stderr.String())
			}
		}
	})

	t.Run("token", func(t *testing.T) {
		tok := strings.TrimSpace(ok("token", "--user", "bob", "--tenant", s.tenant.String(), "--roles", "Admin,Auditor", "--ttl", "1h"))
		claims := jwt.MapClaims{}
		_, err := jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) {
			return []byte("kumiko-development-secret-not-for-production"), nil
		}, jwt.WithValidMethods([]string{"HS256"}))
		require.NoError(t, err)
		require.Equal(t, "bob", claims["sub"])
		require.Equal(t, s.tenant.String(), claims["tid"])
		require.Equal(t, []any{"Admin", "Auditor"}, claims["roles"])

		r := runCLI(t, bin, append(env, "KUMIKO_JWT_SECRET="+secret), "token", "--json", "--tenant", s.tenant.String())
		require.Equal(t, 0, r.code, r.stderr)
		var js struct{ Token, User string }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &js))
		require.Equal(t, "dev", js.User)
		_, err = jwt.Parse(js.Token, func(*jwt.Token) (any, error) { return []byte(secret), nil }, jwt.WithValidMethods([]string{"HS256"}))
		require.NoError(t, err)

		r = runCLI(t, bin, append(env, "KUMIKO_JWT_ISSUER=https://idp.example", "KUMIKO_JWT_AUDIENCE=tasks-api"), "token", "--roles", "Operator")
		require.Equal(t, 0, r.code, r.stderr)
		claims = jwt.MapClaims{}
		_, err = jwt.ParseWithClaims(strings.TrimSpace(r.stdout), claims, func(*jwt.Token) (any, error) {
			return []byte("kumiko-development-secret-not-for-production"), nil
		}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer("https://idp.example"), jwt.WithAudience("tasks-api"))
		require.NoError(t, err, "the token carries the configured issuer and audience")
		require.Equal(t, []any{"Operator"}, claims["roles"])

		// Without --roles: the configured admin role and User.
		r = runCLI(t, bin, append(env, "KUMIKO_ADMIN_ROLE=Owner"), "token", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var roles struct{ Roles []string }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &roles))
		require.Equal(t, []string{"Owner", "User"}, roles.Roles)
		fails("system tenant", "token", "--tenant", "00000000-0000-4000-8000-000000000000")

		fails("not a non-nil UUID", "token", "--tenant", "nope")
		fails("ttl must be positive", "token", "--ttl", "-1h")
	})

	t.Run("archived stream", func(t *testing.T) {
		require.NoError(t, s.app.Store.Archive(context.Background(), s.tenant, s.id, "alice", "test"))
		out := ok("inspect", "task", s.id.String(), "--tenant", s.tenant.String())
		require.Contains(t, out, "archived yes")
		require.Contains(t, out, "task.completed")
	})

	t.Run("project", func(t *testing.T) {
		var list []pipeline.ProjectionStatus
		require.NoError(t, json.Unmarshal([]byte(ok("project", "list", "--json")), &list))
		require.NotEmpty(t, list)
		require.Equal(t, "tasks_by_month", list[0].Name)
		require.Regexp(t, `(?m)^tasks_by_month\s+inline\s+\w+`, ok("project", "status", "tasks_by_month"))
		r := run("project", "rebuild", "tasks_by_month")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "rebuilt tasks_by_month (inline)")
		require.Contains(t, r.stderr, "rebuild tasks_by_month: ", "plain progress lines off a terminal")
		fails("not found: no projection nope", "project", "status", "nope")
		fails("nope", "project", "rebuild", "nope")
	})

	t.Run("events prune", func(t *testing.T) {
		future := time.Now().Add(time.Minute).Format(time.RFC3339)
		fails("--types is required", "events", "prune", "--older-than", "30d")
		fails("neither a positive duration", "events", "prune", "--older-than", "soon", "--types", "ledger")
		fails("consumer_lagging", "events", "prune", "--older-than", future, "--types", "ledger")
		out := ok("events", "prune", "--older-than", future, "--types", "ledger", "--dry-run")
		require.Contains(t, out, "would remove (dry run) 1 events", "a dry run counts even when a prune would be refused")
		require.Contains(t, out, "a prune now would be refused (consumer_lagging): consumer ")
		ok("consumer", "disable", "task-counter")
		out = ok("events", "prune", "--older-than", future, "--types", "ledger", "--dry-run")
		require.Contains(t, out, "would remove (dry run) 1 events")
		require.Regexp(t, `(?m)^ledger\s+1$`, out)
		var res struct {
			Deleted int64
			ByType  map[string]int64
		}
		require.NoError(t, json.Unmarshal([]byte(ok("events", "prune", "--older-than", future, "--types", "ledger", "--json")), &res))
		require.Equal(t, int64(1), res.Deleted)
		require.Contains(t, ok("events", "prune", "--older-than", "1h", "--types", "ledger"), "removed 0 events")
	})

	t.Run("unreachable database", func(t *testing.T) {
		r := runCLI(t, bin, cliEnv(s.app.DB), "consumer", "list", "--database-url", "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
		require.NotEqual(t, 0, r.code)
		require.Contains(t, r.stderr, "database postgres://postgres@127.0.0.1:1/none?connect_timeout=2 is unreachable")
	})
}
