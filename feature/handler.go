package feature

import (
	"fmt"
	"reflect"

	"github.com/kumiko-go/kumiko/internal/spec"
)

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

// wrapTyped erases the input type of a typed handler: the registry calls the
// result, a func(CommandContext, any) (any, error), with a value of T as
// produced by its payload decoding.
func wrapTyped[T any](fn func(CommandContext, T) (any, error)) func(CommandContext, any) (any, error) {
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

func (r *Registrar) typedHandler(query bool, name string, in reflect.Type, access Rule, invoke func(CommandContext, any) (any, error)) {
	def := spec.Handler{Name: name, Query: query, Input: in, Access: access}
	if invoke != nil {
		def.Invoke = invoke
	}
	r.record(item("handler", name), func(d *spec.Definitions) { d.Handlers = append(d.Handlers, def) })
}
