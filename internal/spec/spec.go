// Package spec holds the records a feature's declarations are kept in between
// feature.Define and registry.Build: what the author declared, with the DSL's
// defaults applied but not validated. Authors never write these records; the
// feature package's Registrar fills them and the registry compiles them.
//
// The package imports nothing of the framework, so feature can depend on it
// without depending on anything that runs. The records therefore cannot name
// the feature package's types: where a record carries a value the author
// wrote (an access rule, a function, a projection), it holds it as any and
// documents its dynamic type, which the registry asserts once at boot.
package spec

import (
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Definitions is a feature's declarations as recorded, in declaration order.
type Definitions struct {
	Name        string
	Entities    []Entity
	Cruds       []Crud
	Events      []Event
	Migrations  []Migration
	Handlers    []Handler
	Projections []Projection
	// MSPs holds feature.MultiStreamProjection values.
	MSPs []any
	// Contracts are integration events declared with
	// Registrar.IntegrationEvent.
	Contracts []Event
	// IntegrationHandlers are declared with Registrar.OnIntegrationEvent.
	IntegrationHandlers []IntegrationHandler
	// Jobs are declared with Registrar.Job.
	Jobs []Job
	// Searches are declared with Registrar.Search.
	Searches []Search
	// Problems are mistakes found while recording; each fails the boot.
	Problems []Problem
}

// Problem is a mistake recorded while a feature was defined.
type Problem struct {
	Item    string // what it concerns, e.g. `entity "task"`
	Message string
}

// Entity is an entity as declared with Registrar.Entity.
type Entity struct {
	Name string
	// Fields by JSON (camelCase) name, snapshotted when Entity was called.
	Fields map[string]Field
	// SoftDelete keeps deleted rows (deleted_at) and enables restore.
	SoftDelete bool
	// SystemStream writes every stream of the entity to the system tenant.
	SystemStream bool
	// SnapshotEvery is the automatic snapshot interval in events (default 100).
	SnapshotEvery int
	// SnapshotVersion is the reducer generation of snapshots (default 1).
	SnapshotVersion int
	// Table is the read-model table (default read_<entity>).
	Table string
	// States are the struct types the state is read into, declared with
	// feature.StateStruct.
	States []reflect.Type
}

// Clone returns a deep copy of e.
func (e Entity) Clone() Entity {
	fields := make(map[string]Field, len(e.Fields))
	for k, v := range e.Fields {
		fields[k] = v.Clone()
	}
	e.Fields = fields
	e.States = slices.Clone(e.States)
	return e
}

// Crud is a Registrar.Crud declaration.
type Crud struct {
	Entity string
	// Access is the feature.Access given to Crud.
	Access any
}

// Search is the full-text search of an entity or a projection's table
// declared with Registrar.Search.
type Search struct {
	// Entity names the entity, or the inline or multi-stream projection,
	// whose table is searched.
	Entity string
	// Fields maps the searchable fields (an entity's JSON names, a
	// projection table's column names) to their weights, 'A' (most) to 'D'.
	Fields map[string]byte
	// Config is the PostgreSQL text search configuration; "" = "simple".
	Config string
	// Engine names the search.Engine the search runs on; "" = in the read
	// table.
	Engine string
	// Access is the feature.Rule given to SearchAccess; nil when none was.
	Access any
}

// Event is a domain event declared with Registrar.DefineEvent.
type Event struct {
	Name string
	// Payload is the Go type of the payload value; nil when it was nil.
	Payload reflect.Type
	// Version is the current payload schema generation (default 1).
	Version int
	// Key is the payload field whose value orders an integration event's
	// messages (feature.MessageKey); "" when none is named.
	Key string
	// Personal are the payload fields (top-level JSON names) that hold
	// personal data (feature.Personal), in the order given.
	Personal []string
	// Subject is the payload field (top-level JSON name) holding the id of
	// the data subject the Personal fields belong to
	// (feature.SubjectField); "" = the event's stream, its aggregate id.
	Subject string
}

// Clone returns a deep copy of e.
func (e Event) Clone() Event {
	e.Personal = slices.Clone(e.Personal)
	return e
}

// Migration is an upcaster step declared with Registrar.EventMigration.
type Migration struct {
	Event    string
	From, To int
	Steps    []Step
}

// Handler is a command or query declared with Registrar.Command,
// Registrar.Query, feature.HandleCommand or feature.HandleQuery.
type Handler struct {
	Name string
	// Query is set for queries (read-only); commands run in a write
	// transaction.
	Query bool
	// Input is the Go type of the input value; nil when it was nil.
	Input reflect.Type
	// Access is the feature.Rule given with the handler.
	Access any
	// Handler is the function as given to Command or Query, checked against
	// Input and wrapped by the registry. Nil when Invoke is set.
	Handler any
	// Invoke is the registry.HandlerFunc of HandleCommand and HandleQuery;
	// nil otherwise.
	Invoke any
	// Result is the Go type of the result of a handler declared with
	// feature.Command or feature.Query; nil otherwise.
	Result reflect.Type
}

// Job is a background job declared with Registrar.Job.
type Job struct {
	Name string
	// Args is the Go type of the job's argument value; nil when it was nil.
	Args reflect.Type
	// Handler is the function as given, a func(feature.JobContext, Args)
	// error checked by the registry.
	Handler any
	// On are the event types that enqueue the job.
	On []string
	// Schedule is a cron expression; "" = none.
	Schedule string
	// MaxAttempts, UniqueFor and Timeout are 0 unless given, which means
	// the defaults. The registry checks the name, Schedule and these
	// against the contract the jobs runner checks too (internal/jobspec).
	MaxAttempts int
	UniqueFor   time.Duration
	Timeout     time.Duration
	Exclusive   bool
}

// Projection is an inline projection declared with Registrar.Projection.
type Projection struct {
	Name string
	// Inline is the feature.InlineProjection, deep-copied.
	Inline any
}

// Field is an entity field's definition as the registry and the pipeline
// read it.
type Field struct {
	Type       FieldType
	Required   bool
	HasDefault bool
	// Default as given to Field.Default; the registry validates and
	// normalises it.
	Default  any
	MaxLen   int // characters; 0 = unbounded
	Enum     []string
	Sortable bool
	Unique   bool
	// Ref is the referenced entity of a reference field.
	Ref string
	// MustExist makes writes check that a reference names a live row of Ref
	// in the writer's tenant.
	MustExist  bool
	ReadRoles  []string
	WriteRoles []string
	// WrittenBy are the commands that write the field whatever their
	// caller's WriteRoles.
	WrittenBy []string
	// Personal marks the field as personal data of a data subject
	// (feature.Field.Personal, feature.Field.PersonalOf).
	Personal bool
	// Subject is the field of the same entity holding the id of the data
	// subject a Personal field belongs to; "" = the entity's own aggregate
	// id.
	Subject string
	// Problems are builder misuses (MaxLen on a bool, …); each fails the boot.
	Problems []string
}

// Clone returns a deep copy of f, but for Default, which is shared.
func (f Field) Clone() Field {
	f.Enum = slices.Clone(f.Enum)
	f.ReadRoles = slices.Clone(f.ReadRoles)
	f.WriteRoles = slices.Clone(f.WriteRoles)
	f.WrittenBy = slices.Clone(f.WrittenBy)
	f.Problems = slices.Clone(f.Problems)
	return f
}

// CanRead reports whether a caller may see the field (given that it may read
// the entity at all): always without ReadRoles, else when it is
// authenticated and hasRole holds for one of them.
func (f Field) CanRead(authenticated bool, hasRole func(string) bool) bool {
	return fieldAllows(f.ReadRoles, authenticated, hasRole)
}

// CanWrite reports whether a caller may set the field, like CanRead for
// WriteRoles.
func (f Field) CanWrite(authenticated bool, hasRole func(string) bool) bool {
	return fieldAllows(f.WriteRoles, authenticated, hasRole)
}

func fieldAllows(roles []string, authenticated bool, hasRole func(string) bool) bool {
	if len(roles) == 0 {
		return true
	}
	return authenticated && slices.ContainsFunc(roles, hasRole)
}

// FieldType is the kind of value an entity field holds.
type FieldType string

// Field types. Values travel as JSON: text, enum, timestamp (RFC 3339) and
// uuid/reference (canonical lowercase) as strings, number as a JSON number,
// bool as a boolean, json as any JSON value.
const (
	TypeText      FieldType = "text"
	TypeNumber    FieldType = "number"
	TypeBool      FieldType = "bool"
	TypeEnum      FieldType = "enum"
	TypeTimestamp FieldType = "timestamp"
	TypeUUID      FieldType = "uuid"
	TypeReference FieldType = "reference"
	TypeJSON      FieldType = "json"
)

// ColumnType is the PostgreSQL type of the field's read-table column; "" for
// an unknown type.
func (t FieldType) ColumnType() string {
	switch t {
	case TypeText, TypeEnum:
		return "text"
	case TypeNumber:
		return "numeric"
	case TypeBool:
		return "boolean"
	case TypeTimestamp:
		return "timestamptz"
	case TypeUUID, TypeReference:
		return "uuid"
	case TypeJSON:
		return "jsonb"
	}
	return ""
}

// FilterType is the field type of the values a filter compares a
// projection table's column of SQL type typ with — text, a number, a
// boolean, a timestamp, a uuid or a jsonb value —, "" for a column no
// filter compares. A value of a field type casts to the field type's
// ColumnType without fail, and PostgreSQL compares that type with each
// of these column types.
func FilterType(typ string) FieldType {
	typ = strings.Join(strings.Fields(strings.ToLower(typ)), " ")
	if strings.HasSuffix(typ, "]") {
		return ""
	}
	base, _, _ := strings.Cut(typ, "(")
	switch strings.TrimSpace(base) {
	case "text", "varchar", "character varying", "char", "character", "bpchar":
		return TypeText
	case "smallint", "integer", "int", "int2", "int4", "int8", "bigint", "numeric", "decimal",
		"real", "float", "float4", "float8", "double precision":
		return TypeNumber
	case "boolean", "bool":
		return TypeBool
	case "timestamptz", "timestamp with time zone":
		return TypeTimestamp
	case "uuid":
		return TypeUUID
	case "jsonb":
		return TypeJSON
	}
	return ""
}

// ColumnName is the read-table column of a camelCase field name:
// "completedBy" → "completed_by", "userID" → "user_id".
func ColumnName(field string) string {
	rs := []rune(field)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			prevLower := i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]))
			nextLower := i > 0 && i+1 < len(rs) && unicode.IsUpper(rs[i-1]) && unicode.IsLower(rs[i+1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// JSONName is the camelCase JSON name of a column: "created_at" →
// "createdAt". It undoes ColumnName for the names ColumnName makes.
func JSONName(column string) string {
	parts := strings.Split(column, "_")
	for i := 1; i < len(parts); i++ {
		if p := parts[i]; p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// IntegrationHandler is a handler declared with Registrar.OnIntegrationEvent.
type IntegrationHandler struct {
	// Event is the integration event (contract) it handles.
	Event string
	// Name identifies the handler in the inbox; unique in the app.
	Name string
	// Handle is the func(feature.CommandContext, feature.Message) error
	// given; nil when it was nil.
	Handle any
	// Ordered asks for the messages of one key in publish order
	// (feature.Ordered).
	Ordered bool
}
