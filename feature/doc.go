// Package feature is the DSL application authors write features with: entities
// and CRUD (level 1), domain events and commands (level 2), inline and
// multi-stream projections (level 3) and declarative event migrations
// (level 4), and integration events between apps
// ([Registrar.IntegrationEvent], [Registrar.OnIntegrationEvent]).
//
// A feature is pure data. [Define] runs the author's function once and records
// what it declares; nothing is validated beyond what a single call can know,
// nothing touches a database, and mistakes are recorded rather than panicked.
// The registry package compiles a set of features into an immutable,
// validated registry and reports every recorded mistake at boot, naming the
// feature and the item. What a feature recorded reaches the registry through
// [Feature.Spec] as internal records; authors never handle them.
//
// The package also defines the contract between feature code and the runtime:
// the [CommandContext], [ApplyContext] and [ProjectionContext] interfaces that
// the pipeline implements, the [Event] handed to apply functions, and the
// [User] that access [Rule]s are checked against.
//
//	var Tasks = feature.Define("tasks", func(r *feature.Registrar) {
//		r.Entity("task", feature.Fields{
//			"title": feature.Text().Required().MaxLen(200),
//			"done":  feature.Bool().Default(false),
//		}, feature.SoftDelete())
//		r.Crud("task", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
//	})
package feature

const (
	// AnyVersion as an expected version appends after whatever the stream
	// holds, creating it when missing.
	AnyVersion = -1
	// DefaultSnapshotEvery is the automatic snapshot interval of entities.
	DefaultSnapshotEvery = 100
	// DefaultMaxAttempts is how often a multi-stream projection tries an
	// event before its shard goes dead.
	DefaultMaxAttempts = 10
	// DefaultBatchSize is how many events a multi-stream projection's pass
	// reads at most.
	DefaultBatchSize = 200
)
