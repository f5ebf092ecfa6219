package kumikotest

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// App is a test database with features compiled and their tables created:
// the event store upcasts with the registry and the executor is ready.
type App struct {
	*DB
	Registry *registry.Registry
	Executor *pipeline.Executor

	dispatcher *consumer.Dispatcher // CatchUpAll's, made on first use
	consumers  []string
}

// NewApp builds features into a registry (failing the test on boot errors),
// on a fresh database from NewDB, and creates their read tables. The jobs
// runner (Executor.Jobs) is not started: start it to work jobs. Personal
// fields are sealed with a random key-encryption key of the test's own
// unless StoreConfig sets Keys.
func NewApp(t testing.TB, features []*feature.Feature, opts ...Option) *App {
	t.Helper()
	reg, err := registry.Build(features...)
	if err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	sc := o.store
	sc.Upcaster = reg
	if sc.Keys == nil {
		// Personal fields are sealed with a key of the test's own.
		sc.Keys = randomDataKey(t)
	}
	db := NewDB(t, append(opts, StoreConfig(sc))...)
	d, err := pipeline.New(reg, db.Store, o.executor)
	if err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	if defs := d.JobDefinitions(); len(defs) > 0 {
		r, err := jobs.New(db.Store, jobs.Config{}, defs...)
		if err != nil {
			t.Fatalf("kumikotest: %v", err)
		}
		d.UseJobs(r)
	}
	if err := d.EnsureSchema(context.Background()); err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	return &App{DB: db, Registry: reg, Executor: d}
}

// User returns an authenticated caller of tenant with roles.
func User(tenant uuid.UUID, id string, roles ...string) pipeline.Caller {
	return pipeline.Caller{
		User:          feature.User{ID: id, TenantID: tenant, Roles: roles, Authenticated: true},
		RequestID:     "req-" + id,
		CorrelationID: "corr-" + id,
	}
}

// randomDataKey is a LocalKeys provider with a random key-encryption key.
func randomDataKey(t testing.TB) eventstore.KeyProvider {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	p, err := eventstore.NewLocalKeys(k)
	if err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	return p
}
