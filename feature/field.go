package feature

import (
	"fmt"
	"slices"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// Fields are an entity's fields by camelCase JSON name. Each name also gives
// the read table's column, in snake_case: "completedBy" → "completed_by",
// "userID" → "user_id".
type Fields map[string]*Field

// Field is an entity field under construction. The builder methods change
// the field and return it, so they chain; a method that does not apply to the
// field's type records a problem reported at boot.
type Field struct {
	spec spec.Field
}

func newField(t spec.FieldType) *Field { return &Field{spec: spec.Field{Type: t}} }

// Text is a string field; see [Field.MaxLen].
func Text() *Field { return newField(spec.TypeText) }

// Number is a numeric field (a JSON number, stored as numeric).
func Number() *Field { return newField(spec.TypeNumber) }

// Bool is a boolean field.
func Bool() *Field { return newField(spec.TypeBool) }

// Enum is a string field restricted to values (at least one, no duplicates).
func Enum(values ...string) *Field {
	f := newField(spec.TypeEnum)
	f.spec.Enum = slices.Clone(values)
	if len(values) == 0 {
		f.problem("Enum needs at least one value")
	}
	seen := map[string]bool{}
	for _, v := range values {
		if v == "" {
			f.problem("Enum value is empty")
		}
		if seen[v] {
			f.problem(fmt.Sprintf("Enum value %q is listed twice", v))
		}
		seen[v] = true
	}
	return f
}

// Timestamp is a point in time, an RFC 3339 string on the wire, stored with
// microsecond precision.
func Timestamp() *Field { return newField(spec.TypeTimestamp) }

// UUID is a UUID field.
func UUID() *Field { return newField(spec.TypeUUID) }

// Reference is the id of an aggregate of entity (any feature's); it is a UUID
// and the entity must exist in the app. A plain Reference checks only that
// the value is a UUID: not that the row exists, nor that it is of the
// writer's tenant, nor that it is not deleted; see [Field.MustExist].
func Reference(entity string) *Field {
	f := newField(spec.TypeReference)
	f.spec.Ref = entity
	if entity == "" {
		f.problem("Reference needs an entity name")
	}
	return f
}

// JSON holds any JSON value, stored as jsonb. It cannot be sortable or unique.
func JSON() *Field { return newField(spec.TypeJSON) }

func (f *Field) problem(msg string) { f.spec.Problems = append(f.spec.Problems, msg) }

// Required makes the field mandatory on create and forbids clearing it on
// update. An empty string counts as missing for text fields.
func (f *Field) Required() *Field { f.spec.Required = true; return f }

// Default is applied on create when the field is absent or null. It must be
// valid for the field's type (checked at boot): a string for text and enum
// (one of the values), a number, a bool, a time.Time or RFC 3339 string for
// timestamps, a uuid.UUID or UUID string, any JSON-encodable value for json.
func (f *Field) Default(v any) *Field {
	f.spec.Default, f.spec.HasDefault = v, true
	if v == nil {
		f.problem("Default(nil); omit Default for a field without a default")
	}
	return f
}

// MaxLen bounds a text field to n characters (runes), n ≥ 1.
func (f *Field) MaxLen(n int) *Field {
	f.spec.MaxLen = n
	if f.spec.Type != spec.TypeText {
		f.problem(fmt.Sprintf("MaxLen applies to text fields, not %s", f.spec.Type))
	}
	if n < 1 {
		f.problem(fmt.Sprintf("MaxLen(%d) must be at least 1", n))
	}
	return f
}

// Sortable allows list queries to sort (and keyset-paginate) by the field and
// gives its column an index.
func (f *Field) Sortable() *Field {
	f.spec.Sortable = true
	if f.spec.Type == spec.TypeJSON {
		f.problem("json fields cannot be sortable")
	}
	return f
}

// Unique makes the field's value unique per tenant (a unique index on the
// read table; a clash answers unique_violation).
func (f *Field) Unique() *Field {
	f.spec.Unique = true
	if f.spec.Type == spec.TypeJSON {
		f.problem("json fields cannot be unique")
	}
	return f
}

// ReadRoles restricts who sees the field on reads to users with one of roles;
// without it every reader of the entity sees it.
func (f *Field) ReadRoles(roles ...string) *Field {
	f.spec.ReadRoles = slices.Clone(roles)
	f.checkRoles("ReadRoles", roles)
	return f
}

// WriteRoles restricts who may set the field to users with one of roles;
// without it every writer of the entity may. It is checked on CRUD creates
// and updates (the fields the request sends) and when a command's handler
// appends the entity's created or updated event (the fields its payload
// carries); see [Field.WrittenBy] for commands that set the field on their
// own authority.
func (f *Field) WriteRoles(roles ...string) *Field {
	f.spec.WriteRoles = slices.Clone(roles)
	f.checkRoles("WriteRoles", roles)
	return f
}

// WrittenBy names the commands (of the entity's feature) that may set the
// field whatever their caller's roles: when one of them appends the entity's
// created or updated event carrying the field, WriteRoles is not checked
// for it. The command's own access rule still decides who may call it. Use
// it with WriteRoles for a field that only some commands set, such as a
// status that moves by transitions: WriteRoles("nobody") refuses it in CRUD
// writes and other commands, WrittenBy lets the transitions set it. The
// registry refuses a name that is not a command of the entity's feature,
// and WrittenBy on a field without WriteRoles.
func (f *Field) WrittenBy(commands ...string) *Field {
	f.spec.WrittenBy = slices.Clone(commands)
	if len(commands) == 0 {
		f.problem("WrittenBy needs at least one command")
	}
	if slices.Contains(commands, "") {
		f.problem("WrittenBy has an empty command name")
	}
	return f
}

// MustExist makes every write that sets the reference (a CRUD create or
// update, a command appending the entity's created or updated event) check,
// in its transaction, that the value names a row of the referenced entity's
// read table in the writer's tenant (the system tenant for a system-stream
// entity) and, for a soft-deleting entity, one that is not deleted. A value
// that names none answers 422 unprocessable (reason reference_not_found,
// details.field the field), the same for an id of another tenant as for an
// id that names nothing. The row is locked FOR SHARE until the write
// commits, so it cannot be deleted in between. A null value is not checked
// (Required forbids it). It applies to reference fields only.
func (f *Field) MustExist() *Field {
	f.spec.MustExist = true
	if f.spec.Type != spec.TypeReference {
		f.problem(fmt.Sprintf("MustExist applies to reference fields, not %s", f.spec.Type))
	}
	return f
}

// Personal marks the field as personal data of the entity's own data
// subject: the subject's id is the aggregate id of the row (and of its
// stream). The framework encrypts the field's values in events and
// snapshots with that subject's data key, so forgetting the subject makes
// them unreadable. See [Field.PersonalOf] for data of another subject.
func (f *Field) Personal() *Field {
	f.spec.Personal, f.spec.Subject = true, ""
	return f
}

// PersonalOf marks the field as personal data of the data subject whose id
// is held by subjectField, another field of the same entity (by its JSON
// name, e.g. "customerId"), as [Field.Personal] does for the entity's own
// subject. The registry refuses a subjectField that is not a field of the
// entity, is not a UUID, Reference or Text field, is personal itself, or is
// the field itself.
func (f *Field) PersonalOf(subjectField string) *Field {
	f.spec.Personal, f.spec.Subject = true, subjectField
	if subjectField == "" {
		f.problem("PersonalOf needs a field name; use Personal for the entity's own subject")
	}
	return f
}

func (f *Field) checkRoles(method string, roles []string) {
	if len(roles) == 0 {
		f.problem(method + " needs at least one role")
	}
	if slices.Contains(roles, "") {
		f.problem(method + " has an empty role name")
	}
}

// EntityOption configures an entity; see [SoftDelete], [SystemStream],
// [SnapshotEvery], [SnapshotVersion] and [Table].
type EntityOption struct {
	apply func(*spec.Entity)
}

// SoftDelete makes delete set deleted_at instead of removing the row, and
// adds the restore handler and event.
func SoftDelete() EntityOption {
	return EntityOption{func(d *spec.Entity) { d.SoftDelete = true }}
}

// SystemStream stores every stream of the entity in the system tenant
// (streams that belong to no customer); its events are cross-tenant.
func SystemStream() EntityOption {
	return EntityOption{func(d *spec.Entity) { d.SystemStream = true }}
}

// SnapshotEvery sets the automatic snapshot interval (default 100 events;
// n ≥ 1).
func SnapshotEvery(n int) EntityOption {
	return EntityOption{func(d *spec.Entity) { d.SnapshotEvery = n }}
}

// SnapshotVersion sets the reducer generation of snapshots (default 1, v ≥ 1).
// Bump it after a reducer change: snapshots of other generations are ignored.
func SnapshotVersion(v int) EntityOption {
	return EntityOption{func(d *spec.Entity) { d.SnapshotVersion = v }}
}

// Table names the entity's read table (default read_<entity>); a lowercase
// SQL identifier not starting with kumiko_.
func Table(name string) EntityOption {
	return EntityOption{func(d *spec.Entity) { d.Table = name }}
}
