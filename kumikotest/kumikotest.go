// Package kumikotest is the public test kit: every test gets its own freshly
// migrated PostgreSQL schema on a real server, dropped when the test ends, so
// tests run in parallel without seeing each other. Application authors test
// their features the same way the framework tests itself.
//
// The server is found through DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable); test schemas
// live in the database "kumiko_test" on that server, created on first use.
// When the server cannot be reached the test fails with the reason: tests never
// skip for a missing service.
package kumikotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/migrations"
	"github.com/kumiko-go/kumiko/internal/pguuid"
	"github.com/kumiko-go/kumiko/pipeline"
)

// DefaultDatabaseURL is used when DATABASE_URL is not set.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// DefaultRedisURL is used when REDIS_URL is not set.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// testDatabase holds every test schema.
const testDatabase = "kumiko_test"

// DatabaseURL is the server the test kit uses: DATABASE_URL or the default.
func DatabaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// RedisURL is the Redis the test kit uses: REDIS_URL or the default.
func RedisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return DefaultRedisURL
}

// DB is one test's database: a schema of its own with the kumiko tables
// migrated, a pool whose search_path is that schema, and an event store on it.
type DB struct {
	// Pool connects with search_path set to Schema.
	Pool *pgxpool.Pool
	// Store is an event store on Pool and Schema.
	Store *eventstore.Store
	// Schema is the test's own schema, dropped after the test.
	Schema string
	// URL connects to the test database with search_path set to Schema, for
	// subprocesses and extra pools.
	URL string
}

// Option adjusts a test database.
type Option func(*options)

type options struct {
	maxConns int32
	store    eventstore.Config
	executor pipeline.Config
}

// MaxConns sets the pool size (default 10) for tests that need many
// concurrent connections.
func MaxConns(n int32) Option { return func(o *options) { o.maxConns = n } }

// StoreConfig sets the event store configuration; its Schema is overridden.
func StoreConfig(c eventstore.Config) Option { return func(o *options) { o.store = c } }

// ExecutorConfig sets the configuration NewApp builds the executor with
// (its search engines, say).
func ExecutorConfig(c pipeline.Config) Option { return func(o *options) { o.executor = c } }

// NewDB creates a fresh schema for t, migrated by every owner of tables (the
// event store, the consumer dispatcher, the executor, the integration
// inbox), and drops it when t ends.
func NewDB(t testing.TB, opts ...Option) *DB {
	t.Helper()
	o := options{maxConns: 10}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	base, err := databaseURL(DatabaseURL(), testDatabase)
	if err != nil {
		t.Fatalf("kumikotest: DATABASE_URL: %v", err)
	}
	if err := ensureDatabase(ctx, DatabaseURL(), testDatabase); err != nil {
		t.Fatalf("kumikotest: PostgreSQL at %s is not usable: %v\n"+
			"start it with `make services` (or `make test`, which starts it) or point DATABASE_URL at a server", redact(DatabaseURL()), err)
	}
	schema := "t_" + randomHex(8)
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db := &DB{Schema: schema, URL: u.String()}

	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	cfg.MaxConns = o.maxConns
	cfg.AfterConnect = pguuid.AfterConnect
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("kumikotest: connect: %v", err)
	}
	db.Pool = pool
	t.Cleanup(func() { db.drop(t) })

	sc := o.store
	sc.Schema = schema
	if db.Store, err = eventstore.New(pool, sc); err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	if _, err := migrations.All(ctx, db.Store); err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	return db
}

func (db *DB) drop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if db.Store != nil {
		db.Store.Close()
	}
	// A transaction still ending on the schema's tables (a consumer pass of
	// a stopping app) can deadlock with the drop, which PostgreSQL then
	// cancels: the drop goes again once that transaction is gone.
	var err error
	for range 5 {
		var pg *pgconn.PgError
		if _, err = db.Pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{db.Schema}.Sanitize()+" CASCADE"); !errors.As(err, &pg) || pg.Code != "40P01" {
			break
		}
	}
	if err != nil {
		t.Errorf("kumikotest: drop schema %s: %v", db.Schema, err)
	}
	db.Pool.Close()
}

// Exec runs sql on the test database and fails the test on error.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("kumikotest: %s: %v", sql, err)
	}
}

// Count returns the single integer a query answers and fails the test on error.
func (db *DB) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("kumikotest: %s: %v", sql, err)
	}
	return n
}

// ensureDatabase creates the test database when it does not exist; concurrent
// test binaries may race to create it.
func ensureDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		return nil // created by a concurrent test binary
	}
	return err
}

// databaseURL returns serverURL pointing at database name.
func databaseURL(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("want a postgres:// URL, got scheme %q", u.Scheme)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
