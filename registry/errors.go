package registry

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kumiko-go/kumiko/registry/internal/codec"
)

// ErrUnknownType is returned (wrapped) when a name is neither an event type
// nor a handler of the registry.
var ErrUnknownType = errors.New("unknown event or handler type")

// Boot rule codes, the Rule of a [BootError].
const (
	RuleDefinition = "definition" // a mistake recorded while the feature was defined
	RuleName       = "name"       // a name has the wrong form
	RuleUnique     = "unique"     // a name is declared twice in the app
	RuleField      = "field"      // an entity field is invalid
	RuleEntity     = "entity"     // an entity option is invalid
	RulePayload    = "payload"    // an event payload or handler input type is invalid
	RuleHandler    = "handler"    // a handler function does not fit its input
	RuleAccess     = "access"     // a handler has no (valid) access rule
	RuleCrud       = "crud"       // a Crud declaration is invalid
	RuleSearch     = "search"     // a Search declaration is invalid
	RuleMigration  = "migration"  // an upcaster chain is broken
	RuleApply      = "apply"      // an apply map is empty or names an unknown event
	RuleProjection = "projection" // a projection's source, table or settings are invalid
	RuleInternal   = "internal"   // the registry failed; a bug
)

// BootError is one violation found by [Build]. Build joins all of them with
// errors.Join; use errors.As or AllBootErrors to inspect them.
type BootError struct {
	Feature string // the feature declaring the item ("" when app-wide)
	Item    string // e.g. `event "task.completed"`, `entity "task" field "title"`
	Rule    string // one of the Rule… constants
	Message string
}

// Error names the feature and the item, then the problem and its rule:
// `boot: feature "tasks": event "task.done": … [migration]`.
func (e *BootError) Error() string {
	var b strings.Builder
	b.WriteString("boot: ")
	if e.Feature != "" {
		fmt.Fprintf(&b, "feature %q: ", e.Feature)
	}
	if e.Item != "" {
		b.WriteString(e.Item)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	fmt.Fprintf(&b, " [%s]", e.Rule)
	return b.String()
}

// AllBootErrors returns every *BootError inside err (as returned by Build).
func AllBootErrors(err error) []*BootError {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []*BootError
		for _, e := range joined.Unwrap() {
			out = append(out, AllBootErrors(e)...)
		}
		return out
	}
	var be *BootError
	if errors.As(err, &be) {
		return []*BootError{be}
	}
	return nil
}

// MaxFieldErrors is the most problems a [ValidationError] lists. Past it
// problems are only counted (ValidationError.Omitted): a payload of thousands
// of bad fields costs a short list, not a list as long as the payload.
const MaxFieldErrors = codec.MaxFieldErrors

type (
	// ValidationError is a payload that failed decoding or validation, with
	// every problem (up to MaxFieldErrors) and its JSON path. Nothing derived
	// from such a payload may be stored; it answers 400 validation_error.
	ValidationError = codec.ValidationError
	// FieldError is one problem of a payload: path, stable code, message.
	FieldError = codec.FieldError
)
