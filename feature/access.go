package feature

import (
	"slices"
	"strings"

	"github.com/google/uuid"
)

// User is the caller a request runs as, from the verified token. The zero
// User is an anonymous caller.
type User struct {
	ID            string
	TenantID      uuid.UUID
	Roles         []string
	Authenticated bool
}

// HasRole reports whether u holds role (case-sensitive).
func (u User) HasRole(role string) bool { return slices.Contains(u.Roles, role) }

// RuleKind is what an access [Rule] checks.
type RuleKind int

// Rule kinds. RuleNone is the zero Rule: no rule was given, which denies.
const (
	RuleNone      RuleKind = iota // no rule: denies, and fails the boot on a handler
	RuleRoles                     // authenticated users holding one of the roles
	RuleAnyUser                   // any authenticated user
	RuleAnonymous                 // everyone, authenticated or not
	RuleDeny                      // nobody, on purpose
)

// Rule decides who may call a handler. Build rules with [Roles], [AnyUser],
// [Anonymous] or [Deny]; the zero Rule means "no rule" and denies everyone
// (access is deny-by-default, and the registry refuses a handler without a
// rule). Rules are immutable values.
type Rule struct {
	kind  RuleKind
	roles []string
}

// Roles allows authenticated users holding at least one of names
// (case-sensitive). At least one non-empty name is required (checked at boot).
func Roles(names ...string) Rule { return Rule{kind: RuleRoles, roles: slices.Clone(names)} }

// AnyUser allows every authenticated user.
func AnyUser() Rule { return Rule{kind: RuleAnyUser} }

// Anonymous allows everyone, including callers without a token.
func Anonymous() Rule { return Rule{kind: RuleAnonymous} }

// Deny allows nobody. On a CRUD verb it omits that verb's handler (e.g. a
// read-only entity: Access{Write: Deny(), Read: AnyUser()}); on a command or
// query it fails the boot, since such a handler could never run.
func Deny() Rule { return Rule{kind: RuleDeny} }

// Kind is what the rule checks.
func (r Rule) Kind() RuleKind { return r.kind }

// IsZero reports whether no rule was given.
func (r Rule) IsZero() bool { return r.kind == RuleNone }

// RoleNames returns a copy of the roles of a Roles rule.
func (r Rule) RoleNames() []string { return slices.Clone(r.roles) }

// Allows reports whether u may call a handler guarded by r.
func (r Rule) Allows(u User) bool {
	switch r.kind {
	case RuleAnonymous:
		return true
	case RuleAnyUser:
		return u.Authenticated
	case RuleRoles:
		return u.Authenticated && slices.ContainsFunc(r.roles, func(role string) bool {
			return role != "" && u.HasRole(role)
		})
	}
	return false
}

// String describes the rule: "roles(Admin,User)", "any-user", "anonymous",
// "deny" or "none".
func (r Rule) String() string {
	switch r.kind {
	case RuleRoles:
		return "roles(" + strings.Join(r.roles, ",") + ")"
	case RuleAnyUser:
		return "any-user"
	case RuleAnonymous:
		return "anonymous"
	case RuleDeny:
		return "deny"
	}
	return "none"
}

// Access are the rules of an entity's CRUD handlers. Write covers create,
// update, delete and restore; Read covers list and detail; a per-verb rule
// overrides them. A verb left without any rule fails the boot.
type Access struct {
	Write, Read                                   Rule
	Create, Update, Delete, Restore, List, Detail Rule
}

// For resolves the rule of verb: the per-verb rule when set, else Write or
// Read.
func (a Access) For(verb CrudVerb) Rule {
	var specific, general Rule
	switch verb {
	case VerbCreate:
		specific, general = a.Create, a.Write
	case VerbUpdate:
		specific, general = a.Update, a.Write
	case VerbDelete:
		specific, general = a.Delete, a.Write
	case VerbRestore:
		specific, general = a.Restore, a.Write
	case VerbList:
		specific, general = a.List, a.Read
	case VerbDetail:
		specific, general = a.Detail, a.Read
	default:
		return Rule{}
	}
	if !specific.IsZero() {
		return specific
	}
	return general
}

func (a Access) clone() Access {
	for _, r := range []*Rule{&a.Write, &a.Read, &a.Create, &a.Update, &a.Delete, &a.Restore, &a.List, &a.Detail} {
		r.roles = slices.Clone(r.roles)
	}
	return a
}
