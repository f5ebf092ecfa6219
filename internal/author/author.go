// Package author runs code a feature author wrote — handlers, apply
// functions, consumers — so that its failures, panics included, are
// failures of the call, and holds the small transaction helpers the
// executor and the consumer dispatcher share around such code.
package author

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// PanicError is a recovered panic of author code. Its message names the
// value only, since it ends up in consumer and projection statuses; the
// stack is logged once, where the panic is recovered.
type PanicError struct {
	value any
	stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// Code is the stable error code of a panic: internal_error.
func (e *PanicError) Code() string { return string(kumikotype.CodeInternal) }

// Reason is handler_panic (pipeline.ReasonHandlerPanic).
func (e *PanicError) Reason() string { return string(kumikotype.ReasonHandlerPanic) }

// Detail never shows the panic's value.
func (e *PanicError) Detail() string { return "internal error" }

// Run runs fn, code a feature author wrote, and turns a panic in it into a
// *PanicError, logged with its stack and attrs naming where it happened.
// The transaction fn works in is its caller's to roll back, as on any other
// error: so a panicking handler leaves no transaction open, no row locked
// and no connection checked out, and the failure counts like a returned
// error (a failed request, a failed consumer attempt, a failed or
// quarantined rebuild event).
func Run(log *slog.Logger, fn func() error, attrs ...any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			pe := &PanicError{value: p, stack: debug.Stack()}
			log.Error("recovered a panic", append(attrs, "panic", fmt.Sprint(p), "stack", string(pe.stack))...)
			err = pe
		}
	}()
	return fn()
}

// Savepoint runs fn under a savepoint of tx and rolls back to it on error,
// leaving tx usable.
func Savepoint(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(sp); err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return errors.Join(err, rbErr)
		}
		return err
	}
	return sp.Commit(ctx)
}

// Storable makes s storable as text and at most n bytes long: invalid
// UTF-8 becomes U+FFFD, NUL (which PostgreSQL cannot store) is dropped, and
// the cut never splits a character. A stored error that the database
// refused would fail the very write that records the failure.
func Storable(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
