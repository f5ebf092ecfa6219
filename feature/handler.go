package feature

import (
	"fmt"
	"reflect"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// HandlerFunc is a command or query handler with its input type erased: in is
// a value of the handler's input type, as produced by the registry's payload
// decoding. The result is the response's data.
type HandlerFunc func(ctx CommandContext, in any) (any, error)

// HandleCommand declares a command handler whose input type T the compiler
// checks; it is [Registrar.Command] without reflection. T is a struct (or a
// pointer to one) with `json` and `validate` tags.
func HandleCommand[T any](r *Registrar, name string, access Rule, fn func(ctx CommandContext, in T) (any, error)) {
	r.typedHandler(false, name, reflect.TypeFor[T](), access, wrapTyped(fn))
}

// HandleQuery declares a query handler whose input type T the compiler checks;
// it is [Registrar.Query] without reflection.
func HandleQuery[T any](r *Registrar, name string, access Rule, fn func(ctx CommandContext, in T) (any, error)) {
	r.typedHandler(true, name, reflect.TypeFor[T](), access, wrapTyped(fn))
}

func wrapTyped[T any](fn func(CommandContext, T) (any, error)) HandlerFunc {
	if fn == nil {
		return nil
	}
	return func(ctx CommandContext, in any) (any, error) {
		v, ok := in.(T)
		if !ok {
			return nil, fmt.Errorf("handler input is %T, want %s", in, reflect.TypeFor[T]())
		}
		return fn(ctx, v)
	}
}

func (r *Registrar) typedHandler(query bool, name string, in reflect.Type, access Rule, invoke HandlerFunc) {
	def := spec.Handler{Name: name, Query: query, Input: in, Access: access}
	if invoke != nil {
		def.Invoke = invoke
	}
	r.record(item("handler", name), func(d *spec.Definitions) { d.Handlers = append(d.Handlers, def) })
}

// CrudVerb names a generated CRUD handler.
type CrudVerb string

// CRUD verbs. The handler of verb v on entity e is named v.HandlerName(e),
// e.g. "task.create"; write verbs append the event v.EventType(e), e.g.
// "task.created".
const (
	VerbCreate  CrudVerb = "create"
	VerbUpdate  CrudVerb = "update"
	VerbDelete  CrudVerb = "delete"
	VerbRestore CrudVerb = "restore" // soft-delete entities only
	VerbList    CrudVerb = "list"
	VerbDetail  CrudVerb = "detail"
)

// CrudVerbs lists every verb in a stable order.
func CrudVerbs() []CrudVerb {
	return []CrudVerb{VerbCreate, VerbUpdate, VerbDelete, VerbRestore, VerbList, VerbDetail}
}

// IsWrite reports whether the verb changes the entity.
func (v CrudVerb) IsWrite() bool {
	return v == VerbCreate || v == VerbUpdate || v == VerbDelete || v == VerbRestore
}

// HandlerName is the verb's handler on entity: "<entity>.<verb>".
func (v CrudVerb) HandlerName(entity string) string { return entity + "." + string(v) }

// EventType is the event a write verb appends on entity ("<entity>.created",
// …); "" for list and detail.
func (v CrudVerb) EventType(entity string) string {
	switch v {
	case VerbCreate, VerbUpdate, VerbDelete, VerbRestore:
		return entity + "." + string(v) + "d"
	}
	return ""
}
