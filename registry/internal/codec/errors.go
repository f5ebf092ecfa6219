package codec

import (
	"fmt"
	"strings"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// MaxFieldErrors is the most problems a [ValidationError] lists. Past it
// problems are only counted (ValidationError.Omitted): a payload of thousands
// of bad fields costs a short list, not a list as long as the payload.
const MaxFieldErrors = 50

// ValidationError is a payload that failed decoding or validation. Nothing
// derived from such a payload may be stored; it answers 400 validation_error
// with its Fields.
type ValidationError struct {
	// Fields lists the problems found, in a stable order: every one, or the
	// first MaxFieldErrors of them.
	Fields []FieldError
	// Omitted counts the problems found beyond Fields; len(Fields)+Omitted
	// is the total.
	Omitted int
}

// FieldError is one problem of a payload: kumikotype's record (see
// kumikotype.FieldError for its members).
type FieldError = kumikotype.FieldError

// Error lists every field problem with its path and code.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("validation failed")
	for i, f := range e.Fields {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		if f.Path != "" {
			b.WriteString(f.Path)
			b.WriteString(" ")
		}
		b.WriteString(f.Message)
		fmt.Fprintf(&b, " (%s)", f.Code)
	}
	if e.Omitted > 0 {
		fmt.Fprintf(&b, "; and %d more", e.Omitted)
	}
	return b.String()
}

// Code is the stable error code "validation_error".
func (e *ValidationError) Code() string { return string(kumikotype.CodeValidation) }

func invalid(fields ...FieldError) *ValidationError {
	var p problems
	p.add(fields...)
	return p.err()
}

// problems collects the problems of one payload: the first MaxFieldErrors in
// the order found, and a count of the rest. The zero value is empty.
type problems struct {
	fields  []FieldError
	omitted int
}

func (p *problems) add(fs ...FieldError) {
	for _, f := range fs {
		if len(p.fields) < MaxFieldErrors {
			p.fields = append(p.fields, f)
		} else {
			p.omitted++
		}
	}
}

// fail adds one problem.
func (p *problems) fail(path string, code kumikotype.FieldCode, msg string) {
	p.add(FieldError{Path: path, Code: string(code), Message: msg})
}

// merge adds what q collected, counting what q omitted.
func (p *problems) merge(q problems) {
	p.add(q.fields...)
	p.omitted += q.omitted
}

func (p *problems) empty() bool { return len(p.fields) == 0 && p.omitted == 0 }

// err is the collected problems as a ValidationError.
func (p *problems) err() *ValidationError {
	return &ValidationError{Fields: p.fields, Omitted: p.omitted}
}
