package pipeline

import (
	"fmt"
	"log/slog"
	"runtime/debug"
)

// ReasonHandlerPanic is the Reason of the internal_error that a panic in a
// feature's code (a command or query handler, an inline or multi-stream
// projection's apply function) becomes in a request. The panic's value never
// reaches the client; it is logged with its stack.
const ReasonHandlerPanic = "handler_panic"

// panicError is a recovered panic of author code. Its message names the
// value only, since it ends up in consumer and projection statuses; the
// stack is logged once, where the panic is recovered.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// runAuthor runs fn, code a feature author wrote, and turns a panic in it
// into a *panicError, logged with its stack and attrs naming where it
// happened. The transaction fn works in is its caller's to roll back, as on
// any other error: so a panicking handler leaves no transaction open, no row
// locked and no connection checked out, and the failure counts like a
// returned error (a failed request, a failed consumer attempt, a failed or
// quarantined rebuild event).
func runAuthor(log *slog.Logger, fn func() error, attrs ...any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			pe := &panicError{value: p, stack: debug.Stack()}
			log.Error("recovered a panic", append(attrs, "panic", fmt.Sprint(p), "stack", string(pe.stack))...)
			err = pe
		}
	}()
	return fn()
}
