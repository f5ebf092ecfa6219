package feature

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB runs SQL in the transaction a handler or apply function belongs to; a
// pgx.Tx satisfies it. It does not rewrite statements: hand-written SQL must
// filter by tenant itself (QueryProjection does so automatically).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CommandContext is what a command or query handler works with. The pipeline
// implements it for one request: one tenant, one user, one transaction (a
// write transaction for commands, read-only for queries). Every method acts
// within that tenant; another tenant's stream behaves exactly like a missing
// one. Errors matching the event store's sentinels (aggregate not found,
// version conflict, stream archived) reach the client with their codes.
type CommandContext interface {
	// Context is the request's context: cancellation, deadline, tracing.
	Context() context.Context
	// DB is bound to the request transaction.
	DB() DB
	// User is the caller.
	User() User
	// Tenant is the tenant the request runs in.
	Tenant() uuid.UUID
	// RequestID identifies the HTTP request (X-Request-ID).
	RequestID() string
	// CorrelationID is stored on every event the request appends and
	// inherited by events appended by consumers in reaction.
	CorrelationID() string

	// LoadAggregate reads the stream, upcast, optionally as of a time or a
	// version. A missing, foreign, archived or differently typed stream loads
	// as an Aggregate with Version 0 and no error, so handlers can
	// create-if-missing.
	LoadAggregate(id uuid.UUID, aggregateType string, opts LoadOptions) (Aggregate, error)
	// FetchForWriting loads the stream and checks it is at expectedVersion
	// (0 = must not exist, AnyVersion = no check) before anything is written:
	// a stale client gets version_conflict, not a half-done command. Appends
	// through the returned Aggregate use its version as expected version.
	FetchForWriting(id uuid.UUID, aggregateType string, expectedVersion int) (Aggregate, error)
	// LoadAggregateWithSnapshot returns the newest snapshot of generation
	// snapshotVersion (zero Snapshot when none) and the aggregate holding the
	// events after it; Version is the stream head. For entities the
	// Aggregate's State is the full fold either way.
	LoadAggregateWithSnapshot(id uuid.UUID, aggregateType string, snapshotVersion int) (Snapshot, Aggregate, error)
	// SnapshotAggregate stores a snapshot in the request transaction.
	// Snapshots are a cache: a wrong or missing one never changes a load.
	SnapshotAggregate(spec SnapshotSpec) error

	// AppendEvent appends one event. The type must be defined by the
	// handler's feature (or be a CRUD event of its own entity) and the
	// payload must pass the event's validation; otherwise nothing is
	// written and an error is returned.
	AppendEvent(spec AppendSpec) (EventRef, error)
	// TryAppendEvent is AppendEvent under a savepoint: losing a race on the
	// expected version returns ok=false and leaves the transaction usable.
	TryAppendEvent(spec AppendSpec) (ref EventRef, ok bool, err error)

	// ArchiveStream makes the stream read as empty and refuse appends
	// (stream_archived); its events stay. reason is recorded.
	ArchiveStream(id uuid.UUID, reason string) error
	// RestoreStream lifts the archive; the version line continues.
	RestoreStream(id uuid.UUID) error
	// IsStreamArchived reports whether the stream is archived (false for
	// missing and foreign streams).
	IsStreamArchived(id uuid.UUID) (bool, error)

	// QueryProjection reads a projection's table (an inline projection, a
	// table-backed multi-stream projection, or an entity's read table by
	// entity name), filtered to the request's tenant.
	QueryProjection(name string) ProjectionQuery
	// Search runs the search of the entity or projection name (the query
	// "<name>.search", see Registrar.Search) as the caller: its access
	// rule, its tenant and its field read rules apply, and bad input is
	// the same validation_error. It finds what is committed: this
	// handler's own writes so far are not among the hits.
	Search(name string, req SearchRequest) (SearchResults, error)

	// Publish publishes an integration event; see [Registrar.IntegrationEvent].
	Publish(event string, payload any) error
	// ForgetSubject forgets the data subject subject of the request's
	// tenant in the request transaction (docs/personal-data.md): its data
	// key is deleted, so its personal values in events and snapshots read
	// as null once the transaction commits, and the personal fields of
	// entity rows that belong to it are set to null. Forgetting a subject
	// without data, or twice, is not an error.
	ForgetSubject(subject string) error
	// Enqueue enqueues the job called job (declared with Registrar.Job) in
	// the request transaction: it exists only if the write commits. It runs
	// at runAt (zero: at once) as the caller, in the caller's tenant, with
	// the request's correlation id.
	Enqueue(job string, args any, runAt time.Time) error
}

// LoadOptions bound an aggregate load. The zero value loads the current
// state.
type LoadOptions struct {
	// AsOf loads the stream as it was at this time; zero = now.
	AsOf time.Time
	// Version loads up to and including this stream version; 0 = all.
	Version int
}

// Aggregate is a loaded stream.
type Aggregate interface {
	ID() uuid.UUID
	Type() string
	// Version is the stream version as loaded plus the events appended
	// through Append; 0 = the stream does not exist.
	Version() int
	// State is the fold of an entity stream: field values by JSON name plus
	// id, version, createdAt, updatedAt (and deletedAt with soft delete).
	// Nil for aggregates that are not entities. The map is the caller's copy.
	State() map[string]any
	// Events are the loaded events, upcast (after the snapshot, when one was
	// used).
	Events() []Event
	// Append appends an event to this stream expecting the stream to be at
	// Version, with the same rules as CommandContext.AppendEvent.
	Append(eventType string, payload any) error
}

// AppendSpec is one event to append.
type AppendSpec struct {
	// AggregateID of the stream; zero with ExpectedVersion 0 mints a UUIDv7.
	AggregateID   uuid.UUID
	AggregateType string
	// Type is the event type; the current event version is stamped.
	Type string
	// Payload is a value of the event's payload type, a map, or a
	// json.RawMessage holding a JSON object.
	Payload any
	// ExpectedVersion is the stream version before the append: 0 = new
	// stream, AnyVersion = no check.
	ExpectedVersion int
	// Headers are added to the event's metadata.
	Headers map[string]string
}

// EventRef identifies an appended event.
type EventRef struct {
	ID           int64
	AggregateID  uuid.UUID
	Version      int
	Type         string
	EventVersion int
}

// Snapshot is a stored fold of a stream up to Version. The zero Snapshot
// means none was found.
type Snapshot struct {
	Version         int
	State           json.RawMessage
	SnapshotVersion int
	CreatedAt       time.Time
}

// SnapshotSpec is a snapshot to store.
type SnapshotSpec struct {
	AggregateID   uuid.UUID
	AggregateType string
	// Version is the stream version State is the fold of; it must exist.
	Version int
	// State must encode to JSON. For entities it may be nil: the framework
	// folds the stream itself.
	State any
	// SnapshotVersion is the reducer generation (0 = 1).
	SnapshotVersion int
	// Personal names State's fields (top-level JSON names) that hold
	// personal data, each with the id of its data subject ("" = the
	// aggregate's own id): they are sealed like the personal fields of
	// events and read as null once the subject is forgotten. An entity's
	// snapshot seals the entity's personal fields itself; for other
	// aggregates, name every field of State that copies a personal value of
	// its events, or it is stored in plain text.
	Personal map[string]string
}

// ProjectionQuery reads a projection table. The tenant filter is added by the
// implementation and cannot be turned off through this interface, whatever
// the ProjectionFilter says.
type ProjectionQuery interface {
	// Rows returns the matching rows, each as a map from the column's JSON
	// name (camelCase: created_at is "createdAt") to its value, without the
	// tenant_id column, so a query may answer the rows as they are. Where
	// and OrderBy still name columns.
	Rows(f ProjectionFilter) ([]map[string]any, error)
	// Row returns the first matching row, or nil when none matches.
	Row(f ProjectionFilter) (map[string]any, error)
	// Count returns the number of matching rows.
	Count(f ProjectionFilter) (int64, error)
}

// ProjectionFilter narrows a projection read. The zero value reads all of the
// tenant's rows in primary-key order.
//
// The tenant filter is applied to the table before Where sees a row, so no
// Where can widen a read past the caller's tenant. Never build Where or
// OrderBy from user input all the same: pass values through Args.
type ProjectionFilter struct {
	// Where is one boolean SQL condition over the table's columns with $1…
	// placeholders for Args; "" matches every row. Refused (the read fails,
	// naming the projection): unbalanced parentheses, ";", comments, dollar
	// quotes, subqueries (SELECT, TABLE) and functions that run SQL text or
	// read a table by name (query_to_xml, table_to_xml…, dblink…). A
	// function of your own that reads other tables reads them unfiltered.
	Where string
	Args  []any
	// OrderBy is a comma list of the table's declared columns, each with an
	// optional ASC or DESC and NULLS FIRST or NULLS LAST, e.g.
	// "month DESC"; "" = primary key. Expressions are refused.
	OrderBy string
	// Limit caps the rows; 0 = no limit.
	Limit int
}

// ProjectionContext is what an inline projection's apply function works with.
// During a write it is the write transaction; during a rebuild it is the
// rebuild transaction and Table names the shadow table being filled.
type ProjectionContext interface {
	Context() context.Context
	// DB is the transaction the apply function must write in. During a
	// rebuild, Exec statements may be queued and sent together (in order,
	// and always before a Query or QueryRow): the command tag Exec returns
	// is then empty, so use Query or QueryRow when a result matters.
	DB() DB
	// Tenant is the event's tenant; write it into tenant_id.
	Tenant() uuid.UUID
	// Table is the quoted, schema-qualified table to write to; use it rather
	// than the declared name, which a rebuild swaps behind the scenes.
	Table() string
}

// ApplyContext is what a multi-stream projection's apply function works with:
// the consumer pass's transaction, whose commit also moves the cursor.
type ApplyContext interface {
	Context() context.Context
	// DB is the pass transaction, scoped to the event's tenant: the setting
	// kumiko.tenant_id (current_setting('kumiko.tenant_id')) holds the
	// tenant for row-level security policies and hand-written SQL; for
	// events of the system tenant it is empty (unscoped). Statements are not
	// rewritten: filter by Tenant() or use such a policy. Exec statements
	// are queued and sent as one batch per pass, in order and always before
	// a Query or QueryRow, so an apply reads its own writes: Exec's command
	// tag is then empty, so use QueryRow when a result matters. A failing
	// statement makes the pass run again event by event, naming the event.
	DB() DB
	// Tenant is the event's tenant.
	Tenant() uuid.UUID
	// Table is the quoted, schema-qualified table to write to ("" for a
	// side-effect consumer); during a rebuild it is the shadow table.
	Table() string
	// AppendEvent appends an event in the event's tenant (sagas, process
	// managers): causation is the triggering event, correlation is inherited,
	// and the type must be defined by the projection's feature.
	AppendEvent(spec AppendSpec) (EventRef, error)
	// LoadAggregate reads a stream of the event's tenant, as
	// CommandContext.LoadAggregate.
	LoadAggregate(id uuid.UUID, aggregateType string, opts LoadOptions) (Aggregate, error)
	// Publish publishes an integration event in the pass transaction, in
	// the event's tenant and as its user; see [Registrar.IntegrationEvent].
	Publish(event string, payload any) error
}
