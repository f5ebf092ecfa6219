package kumikotest

import (
	"context"
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
// runner (Executor.Jobs) is not started: start it to work jobs.
func NewApp(t testing.TB, features []*feature.Feature, opts ...Option) *App {
	t.Helper()
	reg, err := registry.Build(features...)
	if err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	db := NewDB(t, append(opts, StoreConfig(eventstore.Config{Upcaster: reg}))...)
	d, err := pipeline.New(reg, db.Store, pipeline.Config{})
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
