package registry

import (
	"fmt"

	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/registry/internal/codec"
)

// entityPersonal checks the personal fields of an entity (Field.Personal,
// Field.PersonalOf) and returns them by the field holding their subject's
// id ("" = the entity's own aggregate id); nil when there are none.
func (b *builder) entityPersonal(feat string, def spec.Entity, names []string) map[string]string {
	var personal map[string]string
	for _, name := range names {
		fs := def.Fields[name]
		if !fs.Personal {
			continue
		}
		if personal == nil {
			personal = map[string]string{}
		}
		personal[name] = fs.Subject
		if fs.Subject == "" {
			continue // the own aggregate id, or PersonalOf("") reported by the field
		}
		fitem := fmt.Sprintf("entity %q field %q", def.Name, name)
		subject, ok := def.Fields[fs.Subject]
		switch {
		case fs.Subject == name:
			b.fail(feat, fitem, RuleField, "PersonalOf(%q) names the field itself; use Personal for the entity's own subject", fs.Subject)
		case !ok:
			b.fail(feat, fitem, RuleField, "PersonalOf(%q) names no field of entity %q; use Personal for the entity's own subject", fs.Subject, def.Name)
		case subject.Type != spec.TypeUUID && subject.Type != spec.TypeReference && subject.Type != spec.TypeText:
			b.fail(feat, fitem, RuleField, "PersonalOf(%q) names a %s field; a subject's id is held by a uuid, reference or text field", fs.Subject, subject.Type)
		case subject.Personal:
			b.fail(feat, fitem, RuleField, "PersonalOf(%q) names a personal field; a subject's id must not be personal data itself", fs.Subject)
		}
	}
	return personal
}

// eventPersonal checks an event's Personal and SubjectField options against
// its payload p (nil when the payload is unusable, which is reported
// already) and returns the personal fields by the field holding their
// subject's id ("" = the event's stream); nil when there are none. rule is
// the rule of the problems reported.
func (b *builder) eventPersonal(feat, item, rule string, def spec.Event, p *codec.Payload) map[string]string {
	if len(def.Personal) == 0 {
		if def.Subject != "" {
			b.fail(feat, item, rule, "SubjectField(%q) without Personal: the event declares no personal fields", def.Subject)
		}
		return nil
	}
	seen := map[string]bool{}
	for _, f := range def.Personal {
		switch {
		case f == "":
			b.fail(feat, item, rule, "Personal has an empty field name")
		case seen[f]:
			b.fail(feat, item, rule, "Personal lists field %q twice", f)
		case p != nil && !hasProperty(p.Schema, f):
			b.fail(feat, item, rule, "Personal(%q) names no top-level field of the payload (by its JSON name)", f)
		}
		seen[f] = true
	}
	switch {
	case def.Subject == "":
	case seen[def.Subject]:
		b.fail(feat, item, rule, "SubjectField(%q) is one of the Personal fields; a subject's id must not be personal data itself", def.Subject)
	case p != nil && !hasProperty(p.Schema, def.Subject):
		b.fail(feat, item, rule, "SubjectField(%q) names no top-level field of the payload (by its JSON name)", def.Subject)
	}
	return personalOf(def)
}

// personalOf is an event's personal fields by the field holding their
// subject's id, as declared; nil when there are none.
func personalOf(def spec.Event) map[string]string {
	if len(def.Personal) == 0 {
		return nil
	}
	out := make(map[string]string, len(def.Personal))
	for _, f := range def.Personal {
		out[f] = def.Subject
	}
	return out
}
