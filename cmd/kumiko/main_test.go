package main

import (
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

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/ops"
	"github.com/kumiko-go/kumiko/kumikotest"
)

func TestMigrateCommand(t *testing.T) {
	db := kumikotest.NewDB(t)
	run := func(args ...string) (string, error) {
		root := ops.Generic()
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

// The generic binary, built once per test binary.
var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func kumikoBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kumiko-cmd-test")
		if err != nil {
			binErr = err
			return
		}
		binDir, binPath = dir, filepath.Join(dir, "kumiko")
		if out, err := exec.Command("go", "build", "-o", binPath, "github.com/kumiko-go/kumiko/cmd/kumiko").CombinedOutput(); err != nil {
			binErr = errors.New(string(out))
		}
	})
	require.NoError(t, binErr)
	return binPath
}

func TestGenericBinary(t *testing.T) {
	bin := kumikoBinary(t)
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	tenant, id := uuid.New(), uuid.New()
	_, err := db.Store.Append(ctx, eventstore.Stream{TenantID: tenant, AggregateType: "task", AggregateID: id}, 0,
		eventstore.NewEvent{Type: "task.completed", EventVersion: 1, Payload: map[string]any{"by": "alice"}})
	require.NoError(t, err)
	ed, err := consumer.New(db.Store, consumer.Config{InstanceID: "cmd-test"}, consumer.Consumer{
		Name: "mirror", Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return nil },
	})
	require.NoError(t, err)
	require.NoError(t, ed.Register(ctx))

	env := append(os.Environ(), "DATABASE_URL=", "KUMIKO_SCHEMA=", "KUMIKO_JWT_SECRET=")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--database-url", db.URL, "--schema", db.Schema)...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return stdout.String(), stderr.String(), code
	}
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := run(args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		return out
	}

	require.Contains(t, ok("migrate"), "is up to date")
	require.Contains(t, ok("migrate"), "is up to date")

	require.Regexp(t, `(?m)^mirror\s+__shared__\s+-\s+-\s+-\s+catching_up\s+0\s`, ok("consumer", "list"))
	require.Contains(t, ok("consumer", "disable", "mirror"), "disabled")
	_, errOut, code := run("consumer", "disable", "mirror")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "wrong_state: consumer mirror/__shared__ is disabled")
	var st consumer.ShardStatus
	require.NoError(t, json.Unmarshal([]byte(ok("consumer", "enable", "mirror", "--json")), &st))
	require.Equal(t, consumer.StatusCatchingUp, st.Status)

	// No features, no upcasting: the payload as stored.
	out := ok("inspect", "task", id.String(), "--tenant", tenant.String())
	require.Regexp(t, `(?m)^1\s+\d+\s+task\.completed\s+v1\s.*\{"by":"alice"\}$`, out)
	require.Contains(t, ok("inspect", "--help"), "cannot upcast")
	_, errOut, code = run("inspect", "task", uuid.NewString(), "--tenant", tenant.String())
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "aggregate_not_found")

	require.Contains(t, ok("events", "tail", "--json"), `"payload":{"by":"alice"}`)
	require.NotContains(t, ok("events", "--help"), "asof", "asof needs the app's features")
	help, err := exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err)
	require.NotContains(t, string(help), "  project ", "project needs the app's features")
	require.Contains(t, string(help), "consumer")

	tok := strings.TrimSpace(ok("token", "--user", "ops", "--tenant", tenant.String(), "--roles", "Admin"))
	claims := jwt.MapClaims{}
	_, err = jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) {
		return []byte("kumiko-development-secret-not-for-production"), nil
	}, jwt.WithValidMethods([]string{"HS256"}))
	require.NoError(t, err)
	require.Equal(t, "ops", claims["sub"])

	cmd := exec.Command(bin, "consumer", "list", "--database-url", "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	cmd.Env = env
	outB, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(outB), "is unreachable")
}

// Pointed at a schema without the kumiko tables, or (without a database
// URL) at the development database of an app that never ran, a command says
// so and how to get it right, instead of a bare SQL error.
func TestGenericBinaryExplainsAWrongDatabase(t *testing.T) {
	bin := kumikoBinary(t)
	db := kumikotest.NewDB(t)
	db.Exec(t, "CREATE SCHEMA empty_"+db.Schema)
	t.Cleanup(func() { db.Exec(t, "DROP SCHEMA empty_"+db.Schema) })
	env := append(os.Environ(), "DATABASE_URL=", "KUMIKO_SCHEMA=", "KUMIKO_APP=")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s", out)
		return string(out)
	}
	out := run("consumer", "list", "--database-url", db.URL, "--schema", "empty_"+db.Schema)
	require.Contains(t, out, "schema empty_"+db.Schema+" of database")
	require.Contains(t, out, "has no kumiko tables")
	require.Contains(t, out, "run migrate first")

	app := "never_ran_" + db.Schema
	out = run("consumer", "list", "--app", app)
	require.Contains(t, out, "database postgres://postgres@127.0.0.1:5432/kumiko_"+app)
	require.Contains(t, out, "does not exist: start the app once")
}
