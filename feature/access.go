package feature

import (
	"slices"
	"strings"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// User is the caller a request runs as, from the verified token. The zero
// User is an anonymous caller. It is kumikotype's record.
type User = kumikotype.User

// ruleKind is what an access [Rule] checks. ruleNone is the zero Rule: no
// rule was given, which denies.
type ruleKind int

const (
	ruleNone      ruleKind = iota // no rule: denies, and fails the boot on a handler
	ruleRoles                     // authenticated users holding one of the roles
	ruleAnyUser                   // any authenticated user
	ruleAnonymous                 // everyone, authenticated or not
	ruleDeny                      // nobody, on purpose
)

// Rule decides who may call a handler. Build rules with [Roles], [AnyUser],
// [Anonymous] or [Deny]; the zero Rule means "no rule" and denies everyone
// (access is deny-by-default, and the registry refuses a handler without a
// rule). Rules are immutable values.
type Rule struct {
	kind  ruleKind
	roles []string
}

// Roles allows authenticated users holding at least one of names
// (case-sensitive). At least one non-empty name is required (checked at boot).
func Roles(names ...string) Rule { return Rule{kind: ruleRoles, roles: slices.Clone(names)} }

// AnyUser allows every authenticated user.
func AnyUser() Rule { return Rule{kind: ruleAnyUser} }

// Anonymous allows everyone, including callers without a token.
func Anonymous() Rule { return Rule{kind: ruleAnonymous} }

// Deny allows nobody. On a CRUD verb it omits that verb's handler (e.g. a
// read-only entity: Access{Write: Deny(), Read: AnyUser()}); on a command or
// query it fails the boot, since such a handler could never run.
func Deny() Rule { return Rule{kind: ruleDeny} }

// IsDeny reports whether the rule is [Deny].
func (r Rule) IsDeny() bool { return r.kind == ruleDeny }

// Problem describes what makes a given rule unusable — [Roles] without role
// names, or with an empty one — and is "" for a usable rule. The zero Rule
// is reported by IsZero instead.
func (r Rule) Problem() string {
	if r.kind != ruleRoles {
		return ""
	}
	if len(r.roles) == 0 {
		return "Roles() without role names allows nobody; name the roles or use Deny()"
	}
	if slices.Contains(r.roles, "") {
		return "Roles() has an empty role name"
	}
	return ""
}

// IsZero reports whether no rule was given.
func (r Rule) IsZero() bool { return r.kind == ruleNone }

// RoleNames returns a copy of the roles of a Roles rule.
func (r Rule) RoleNames() []string { return slices.Clone(r.roles) }

// Allows reports whether u may call a handler guarded by r.
func (r Rule) Allows(u User) bool {
	switch r.kind {
	case ruleAnonymous:
		return true
	case ruleAnyUser:
		return u.Authenticated
	case ruleRoles:
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
	case ruleRoles:
		return "roles(" + strings.Join(r.roles, ",") + ")"
	case ruleAnyUser:
		return "any-user"
	case ruleAnonymous:
		return "anonymous"
	case ruleDeny:
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

func (a Access) clone() Access {
	for _, r := range []*Rule{&a.Write, &a.Read, &a.Create, &a.Update, &a.Delete, &a.Restore, &a.List, &a.Detail} {
		r.roles = slices.Clone(r.roles)
	}
	return a
}
