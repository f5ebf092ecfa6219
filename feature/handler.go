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
	r.typedHandler(false, name, reflect.TypeFor[T](), nil, access, wrapTyped(fn))
}

// Command declares a command handler whose input In and result Out the
// compiler checks. The registry knows Out: the OpenAPI document describes
// the command's answer ({"data": …}) with Out's JSON Schema, and a client
// decodes it into Out (kumikotest.Data[Out]). HandleCommand's untyped
// result keeps working.
func Command[In, Out any](r *Registrar, name string, access Rule, fn func(ctx CommandContext, in In) (Out, error)) {
	r.typedHandler(false, name, reflect.TypeFor[In](), reflect.TypeFor[Out](), access, wrapTyped(eraseResult(fn)))
}

// Query is Command for a query handler (read-only).
func Query[In, Out any](r *Registrar, name string, access Rule, fn func(ctx CommandContext, in In) (Out, error)) {
	r.typedHandler(true, name, reflect.TypeFor[In](), reflect.TypeFor[Out](), access, wrapTyped(eraseResult(fn)))
}

// eraseResult erases the result type of a typed handler.
func eraseResult[In, Out any](fn func(CommandContext, In) (Out, error)) func(CommandContext, In) (any, error) {
	if fn == nil {
		return nil
	}
	return func(ctx CommandContext, in In) (any, error) {
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		return out, nil
	}
}

// HandleQuery declares a query handler whose input type T the compiler checks;
// it is [Registrar.Query] without reflection.
func HandleQuery[T any](r *Registrar, name string, access Rule, fn func(ctx CommandContext, in T) (any, error)) {
	r.typedHandler(true, name, reflect.TypeFor[T](), nil, access, wrapTyped(fn))
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

func (r *Registrar) typedHandler(query bool, name string, in, result reflect.Type, access Rule, invoke func(CommandContext, any) (any, error)) {
	def := spec.Handler{Name: name, Query: query, Input: in, Result: result, Access: access}
	if invoke != nil {
		def.Invoke = invoke
	}
	r.record(item("handler", name), func(d *spec.Definitions) { d.Handlers = append(d.Handlers, def) })
}
