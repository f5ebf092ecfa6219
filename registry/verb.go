package registry

import "github.com/kumiko-go/kumiko/feature"

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
	// VerbSearch is the query of an entity's full-text search
	// (feature.Registrar.Search); not one of CrudVerbs.
	VerbSearch CrudVerb = "search"
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

// Rule resolves the verb's rule in a: the per-verb rule when set, else Write
// or Read.
func (v CrudVerb) Rule(a feature.Access) feature.Rule {
	var specific, general feature.Rule
	switch v {
	case VerbCreate:
		specific, general = a.Create, a.Write
	case VerbUpdate:
		specific, general = a.Update, a.Write
	case VerbDelete:
		specific, general = a.Delete, a.Write
	case VerbRestore:
		specific, general = a.Restore, a.Write
	case VerbList, VerbSearch:
		specific, general = a.List, a.Read
	case VerbDetail:
		specific, general = a.Detail, a.Read
	default:
		return feature.Rule{}
	}
	if !specific.IsZero() {
		return specific
	}
	return general
}
