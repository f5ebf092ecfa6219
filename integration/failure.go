package integration

import (
	"errors"
	"strings"

	"github.com/kumiko-go/kumiko/eventstore"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// codeInternal is the code of a failure that names none of its own.
const codeInternal = string(kumikotype.CodeInternal)

// failure is an error whose text starts with its code, as the dead
// messages show it: "validation_error: message …: …",
// "event_schema_unknown_version: …", "<code>: handler <name>: …".
type failure struct {
	code, text string
	err        error
	// permanent is set on a message no redelivery can cure (see final).
	permanent bool
}

func (f *failure) Error() string { return f.code + ": " + f.text }
func (f *failure) Unwrap() error { return f.err }

// Code is the stable code the text starts with.
func (f *failure) Code() string { return f.code }

// codeOf is the code err carries (the first in its chain with a Code
// method), or internal_error.
func codeOf(err error) string {
	var c interface{ Code() string }
	if errors.As(err, &c) && c.Code() != "" {
		return c.Code()
	}
	return codeInternal
}

// coded is err with its code in front, and what it is about (a message, a
// handler) after the code: "<code>: <about>: <err without its code>".
func coded(about string, err error) *failure {
	code := codeOf(err)
	text := strings.TrimPrefix(err.Error(), code+": ")
	if about != "" {
		text = about + ": " + text
	}
	return &failure{code: code, text: text, err: err}
}

// invalid is the failure of a message that breaks its contract or the
// wire format: a validation_error no redelivery can cure.
func invalid(about string, err error) *failure {
	f := coded(about, err)
	f.permanent = true
	return f
}

// final reports whether err is a failure that no redelivery can cure: a
// message that breaks its contract or the wire format, or one of a
// contract version the app does not know (retrying it before the app is
// upgraded cannot help). Such a message is kept dead at once.
func final(err error) bool {
	var f *failure
	return errors.Is(err, eventstore.ErrUnknownEventVersion) || (errors.As(err, &f) && f.permanent)
}
