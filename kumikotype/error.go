package kumikotype

import (
	"strings"
)

// Error is a failure as a client may see it, the one error type of the
// contract: a stable Code, a finer Reason, a Detail sentence safe to show,
// the payload's field problems and structured extras. The cause is kept
// for logs and errors.Is/As (Unwrap), never shown. pipeline.Error and
// consumer.Error are this type; the HTTP adapter and the console read any
// error with Code, Reason and Detail methods.
type Error struct {
	code    Code
	reason  Reason
	detail  string
	fields  []FieldError
	details map[string]any
	cause   error
}

// NewError is an error of code with reason (the code when empty), detail
// and cause (nil for none).
func NewError(code Code, reason Reason, detail string, cause error) *Error {
	if reason == "" {
		reason = Reason(code)
	}
	return &Error{code: code, reason: reason, detail: detail, cause: cause}
}

// Code is the stable error code, one of the Code constants.
func (e *Error) Code() string { return string(e.code) }

// Reason is the finer reason code; the code when there is none finer.
func (e *Error) Reason() string { return string(e.reason) }

// Detail is a sentence safe to show to a client.
func (e *Error) Detail() string { return e.detail }

// Status is the HTTP status of the error's code and reason.
func (e *Error) Status() int { return e.code.Status(string(e.reason)) }

// Fields lists payload problems (validation_error); nil when there are
// none.
func (e *Error) Fields() []FieldError { return e.fields }

// Details are structured extras: expectedVersion/currentVersion on
// conflicts, failedIndex in batches, field on unique violations, consumer
// and cursor on refused operations; nil when there are none.
func (e *Error) Details() map[string]any { return e.details }

// With sets the detail key to v and returns e, for chaining.
func (e *Error) With(key string, v any) *Error {
	if e.details == nil {
		e.details = map[string]any{}
	}
	e.details[key] = v
	return e
}

// WithFields sets the field problems and returns e.
func (e *Error) WithFields(fields []FieldError) *Error {
	e.fields = fields
	return e
}

// WithCause sets the cause and returns e.
func (e *Error) WithCause(cause error) *Error {
	e.cause = cause
	return e
}

// Error is "code (reason): detail: cause", leaving out what is empty or
// the reason when it is the code.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.code))
	if e.reason != "" && e.reason != Reason(e.code) {
		b.WriteString(" (" + string(e.reason) + ")")
	}
	if e.detail != "" {
		b.WriteString(": " + e.detail)
	}
	if e.cause != nil {
		b.WriteString(": " + e.cause.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.cause }

// FieldError is one problem of a payload (registry.FieldError is this
// type).
type FieldError struct {
	// Path is the JSON path of the value in camelCase wire names, e.g.
	// "items[2].name" or `tags["a b"]`; "" for the payload itself.
	Path string
	// Code is stable: one of the FieldCode constants ("invalid_json",
	// "type", "required", "unknown_field", "max", "min", "oneof",
	// "not_sortable", "duplicate", "range" (a value the database cannot
	// store, such as a time outside years 1 to 9999), "invalid_character",
	// "duplicate_key", …), or the name of the failing validate tag
	// ("email", "gte", …). It is a string: string(FieldCodeRequired).
	Code string
	// Message is a sentence for humans, safe to show to clients.
	Message string
}
