package registry_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

// want describes one expected boot error: the feature, a part of the item,
// the rule and a part of the message.
type want struct {
	feature, item, rule, msg string
}

func requireBootErrors(t *testing.T, err error, wants ...want) {
	t.Helper()
	require.Error(t, err)
	all := registry.AllBootErrors(err)
	require.NotEmpty(t, all, "Build must return *BootError values: %v", err)
	for _, w := range wants {
		found := false
		for _, be := range all {
			if be.Feature == w.feature && strings.Contains(be.Item, w.item) && be.Rule == w.rule && strings.Contains(be.Message, w.msg) {
				found = true
				// The text names the feature and the item.
				if w.feature != "" {
					require.Contains(t, be.Error(), fmt.Sprintf("feature %q", w.feature))
				}
				require.Contains(t, be.Error(), be.Item)
				require.Contains(t, err.Error(), be.Error())
			}
		}
		require.True(t, found, "no boot error %+v among:\n%v", w, err)
	}
}

type okPayload struct {
	Name string `json:"name" validate:"required"`
}

func nop(feature.CommandContext, okPayload) (any, error) { return nil, nil }

func nopApply(feature.ApplyContext, feature.Event) error { return nil }

func nopProject(feature.ProjectionContext, feature.Event) error { return nil }

func tenantTable(name string) feature.TableDef {
	return feature.TableDef{
		Name:       name,
		Columns:    []feature.Column{{Name: "tenant_id", Type: "uuid"}, {Name: "n", Type: "bigint"}},
		PrimaryKey: []string{"tenant_id"},
	}
}

func f(name string, fn func(r *feature.Registrar)) *feature.Feature { return feature.Define(name, fn) }

// withTask declares entity "task" (soft delete) and its CRUD.
func withTask(r *feature.Registrar) {
	r.Entity("task", feature.Fields{"title": feature.Text()}, feature.SoftDelete())
	r.Crud("task", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
}

func TestBootRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		features func() []*feature.Feature
		want     []want
	}{
		// Features.
		{"nil feature", func() []*feature.Feature { return []*feature.Feature{nil} },
			[]want{{"", "feature #1", registry.RuleDefinition, "nil"}}},
		{"feature name", func() []*feature.Feature { return []*feature.Feature{f("Tasks", func(*feature.Registrar) {})} },
			[]want{{"Tasks", "", registry.RuleName, "lowercase"}}},
		{"duplicate feature", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(*feature.Registrar) {}), f("a", func(*feature.Registrar) {})}
		}, []want{{"a", "", registry.RuleUnique, "given twice"}}},
		{"recorded problems", func() []*feature.Feature {
			return []*feature.Feature{
				feature.Define("nilfn", nil),
				f("panics", func(r *feature.Registrar) { panic("oops") }),
			}
		}, []want{
			{"nilfn", `feature "nilfn"`, registry.RuleDefinition, "nil function"},
			{"panics", `feature "panics"`, registry.RuleDefinition, "panic while defining the feature: oops"},
		}},

		// Entities and fields.
		{"duplicate entity across features", func() []*feature.Feature {
			return []*feature.Feature{
				f("a", func(r *feature.Registrar) { r.Entity("task", feature.Fields{}) }),
				f("b", func(r *feature.Registrar) { r.Entity("task", feature.Fields{}) }),
			}
		}, []want{{"b", `entity "task"`, registry.RuleUnique, `already declared by feature "a"`}}},
		{"entity name", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) { r.Entity("Task", feature.Fields{}) })}
		}, []want{{"a", `entity "Task"`, registry.RuleName, "lowercase"}}},
		{"field names", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.Entity("task", feature.Fields{
					"Title":     feature.Text(),
					"id":        feature.UUID(),
					"tenantID":  feature.UUID(),
					"userId":    feature.Text(),
					"userID":    feature.Text(),
					"bad_name":  feature.Text(),
					"nilField":  nil,
					"zeroField": &feature.Field{},
				})
			})}
		}, []want{
			{"a", `entity "task" field "Title"`, registry.RuleField, "camelCase"},
			{"a", `entity "task" field "bad_name"`, registry.RuleField, "camelCase"},
			{"a", `entity "task" field "id"`, registry.RuleField, "reserved"},
			{"a", `entity "task" field "tenantID"`, registry.RuleField, `column "tenant_id" clashes with a framework column`},
			{"a", `entity "task" field "userId"`, registry.RuleField, `column "user_id" clashes with field "userID"`},
			{"a", `entity "task" field "nilField"`, registry.RuleDefinition, "field is nil"},
			{"a", `entity "task" field "zeroField"`, registry.RuleField, "no valid type"},
		}},
		{"field builders and defaults", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.Entity("task", feature.Fields{
					"done":     feature.Bool().MaxLen(3),
					"count":    feature.Number().Default("many"),
					"prio":     feature.Enum("low", "high").Default("urgent"),
					"title":    feature.Text().MaxLen(3).Default("abcd"),
					"name":     feature.Text().Required().Default(""),
					"dueAt":    feature.Timestamp().Default("tomorrow"),
					"ownerId":  feature.UUID().Default("not-a-uuid"),
					"parent":   feature.Reference("project"),
					"owner":    feature.Reference("person").MustExist(),
					"label":    feature.Text().MustExist(),
					"blob":     feature.JSON().Sortable(),
					"flag":     feature.Bool().Default(nil),
					"weight":   feature.Number().Default(2.5),
					"startsAt": feature.Timestamp().Default("2026-01-02T03:04:05Z"),
				})
			})}
		}, []want{
			{"a", `field "done"`, registry.RuleField, "MaxLen applies to text fields"},
			{"a", `field "count"`, registry.RuleField, `default "many" must be a number`},
			{"a", `field "prio"`, registry.RuleField, `default "urgent" must be one of: low, high`},
			{"a", `field "title"`, registry.RuleField, "must be at most 3 characters"},
			{"a", `field "name"`, registry.RuleField, "cannot be empty"},
			{"a", `field "dueAt"`, registry.RuleField, "RFC 3339"},
			{"a", `field "ownerId"`, registry.RuleField, "must be a UUID"},
			{"a", `field "parent"`, registry.RuleField, `references entity "project", which no feature declares`},
			{"a", `field "owner"`, registry.RuleField, `references entity "person", which no feature declares`},
			{"a", `field "label"`, registry.RuleField, "MustExist applies to reference fields, not text"},
			{"a", `field "blob"`, registry.RuleField, "cannot be sortable"},
			{"a", `field "flag"`, registry.RuleField, "Default(nil)"},
		}},
		{"entity options", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.Entity("a", feature.Fields{}, feature.SnapshotEvery(0), feature.SnapshotVersion(-1))
				r.Entity("b", feature.Fields{}, feature.Table("Bad-Name"))
				r.Entity("c", feature.Fields{}, feature.Table("kumiko_events"))
				r.Entity("d", feature.Fields{}, feature.Table("read_a"))
			})}
		}, []want{
			{"a", `entity "a"`, registry.RuleEntity, "SnapshotEvery(0) must be at least 1"},
			{"a", `entity "a"`, registry.RuleEntity, "SnapshotVersion(-1) must be at least 1"},
			{"a", `entity "b"`, registry.RuleEntity, `table name "Bad-Name"`},
			{"a", `entity "c"`, registry.RuleEntity, "prefix kumiko_"},
			{"a", `entity "d"`, registry.RuleUnique, `table "read_a" is already used by feature "a" entity "a"`},
		}},

		// Events and payloads.
		{"event names", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.DefineEvent("completed", okPayload{})
				r.DefineEvent("Task.Completed", okPayload{})
				r.DefineEvent("task.completed.", okPayload{})
			})}
		}, []want{
			{"a", `event "completed"`, registry.RuleName, "lowercase and dotted"},
			{"a", `event "Task.Completed"`, registry.RuleName, "lowercase and dotted"},
			{"a", `event "task.completed."`, registry.RuleName, "lowercase and dotted"},
		}},
		{"duplicate events", func() []*feature.Feature {
			return []*feature.Feature{
				f("a", func(r *feature.Registrar) {
					withTask(r)
					r.DefineEvent("task.done", okPayload{})
				}),
				f("b", func(r *feature.Registrar) {
					r.DefineEvent("task.done", okPayload{})
					r.DefineEvent("task.created", okPayload{})
				}),
			}
		}, []want{
			{"b", `event "task.done"`, registry.RuleUnique, `already defined by feature "a"`},
			{"b", `event "task.created"`, registry.RuleUnique, `CRUD event of entity "task" (feature "a")`},
		}},
		{"payload types", func() []*feature.Feature {
			type withFunc struct {
				Fn func() `json:"fn"`
			}
			type inner struct {
				N int `json:"n" validate:"required"`
			}
			type noDive struct {
				Items []inner `json:"items" validate:"required"`
			}
			type badTag struct {
				N int `json:"n" validate:"requird"`
			}
			type A struct {
				X string `json:"x"`
			}
			type B struct {
				X string `json:"x"`
			}
			// struct{ A; B }: both embedded structs have a field "x". Built at
			// run time, since vet rightly refuses it in source.
			ambiguous := reflect.New(reflect.StructOf([]reflect.StructField{
				{Name: "A", Type: reflect.TypeFor[A](), Anonymous: true},
				{Name: "B", Type: reflect.TypeFor[B](), Anonymous: true},
			})).Elem().Interface()
			type badKey struct {
				M map[struct{ A int }]string `json:"m"`
			}
			p := &okPayload{}
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.DefineEvent("a.nil", nil)
				r.DefineEvent("a.string", "text")
				r.DefineEvent("a.map", map[string]any{})
				r.DefineEvent("a.ptrptr", &p)
				r.DefineEvent("a.func", withFunc{})
				r.DefineEvent("a.nodive", noDive{})
				r.DefineEvent("a.badtag", badTag{})
				r.DefineEvent("a.ambiguous", ambiguous)
				r.DefineEvent("a.badkey", badKey{})
				r.DefineEvent("a.pointer", &okPayload{}) // fine
			})}
		}, []want{
			{"a", `event "a.nil"`, registry.RulePayload, "payload is nil"},
			{"a", `event "a.string"`, registry.RulePayload, "must be a struct or a pointer to a struct, not string"},
			{"a", `event "a.map"`, registry.RulePayload, "not map[string]interface {}"},
			{"a", `event "a.ptrptr"`, registry.RulePayload, "not **registry_test.okPayload"},
			{"a", `event "a.func"`, registry.RulePayload, "fn: type func() cannot be encoded as JSON"},
			{"a", `event "a.nodive"`, registry.RulePayload, `items: its elements carry validate tags but the field has no validate:"dive"`},
			{"a", `event "a.badtag"`, registry.RulePayload, "invalid validate tag"},
			{"a", `event "a.ambiguous"`, registry.RulePayload, `JSON name "x" is used by 2 fields`},
			{"a", `event "a.badkey"`, registry.RulePayload, "cannot be a JSON object key"},
		}},
		{"event version", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) { r.DefineEvent("a.b", okPayload{}, feature.EventVersion(0)) })}
		}, []want{{"a", `event "a.b"`, registry.RuleMigration, "EventVersion(0) must be at least 1"}}},

		// Upcaster chains.
		{"chain with a gap", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.DefineEvent("a.b", okPayload{}, feature.EventVersion(4))
				r.EventMigration("a.b", 1, 2)
				r.EventMigration("a.b", 3, 4)
			})}
		}, []want{{"a", `event "a.b"`, registry.RuleMigration, "upcaster chain to version 4 is incomplete: no migration 2→3"}}},
		{"chain without any migration", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) { r.DefineEvent("a.b", okPayload{}, feature.EventVersion(3)) })}
		}, []want{{"a", `event "a.b"`, registry.RuleMigration, "no migration 1→2, 2→3"}}},
		{"migration mistakes", func() []*feature.Feature {
			return []*feature.Feature{
				f("a", func(r *feature.Registrar) {
					r.DefineEvent("a.b", okPayload{}, feature.EventVersion(3))
					r.EventMigration("a.b", 1, 2)
					r.EventMigration("a.b", 1, 2, feature.Drop("x"))
					r.EventMigration("a.b", 2, 4)
					r.EventMigration("a.b", 0, 1)
					r.EventMigration("a.b", 3, 4)
					r.EventMigration("a.nope", 1, 2)
					r.EventMigration("a.b", 2, 3, feature.Rename("", "x"), feature.MapFunc(nil), feature.MigrationStep{})
				}),
				f("b", func(r *feature.Registrar) { r.EventMigration("a.b", 2, 3) }),
			}
		}, []want{
			{"a", `migration "a.b" 1→2`, registry.RuleMigration, "step 1→2 is declared twice"},
			{"a", `migration "a.b" 2→4`, registry.RuleMigration, "exactly one version"},
			{"a", `migration "a.b" 0→1`, registry.RuleMigration, "exactly one version"},
			{"a", `migration "a.b" 3→4`, registry.RuleMigration, "beyond the current version 3"},
			{"a", `migration "a.nope" 1→2`, registry.RuleMigration, `event "a.nope" is not defined`},
			{"a", `migration "a.b" 2→3`, registry.RuleMigration, "step 1: Rename needs two field names"},
			{"a", `migration "a.b" 2→3`, registry.RuleMigration, "step 2: MapFunc needs a function"},
			{"a", `migration "a.b" 2→3`, registry.RuleMigration, "step 3: zero MigrationStep"},
			{"a", `event "a.b"`, registry.RuleMigration, "no migration 2→3"},
			{"b", `migration "a.b" 2→3`, registry.RuleMigration, `defined by feature "a"; its migrations belong there`},
		}},
		{"crud event chain with a gap", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				withTask(r)
				r.EventMigration("task.created", 2, 3, feature.Rename("name", "title"))
			})}
		}, []want{{"a", `event "task.created"`, registry.RuleMigration, "no migration 1→2"}}},

		// Handlers.
		{"handler names", func() []*feature.Feature {
			return []*feature.Feature{
				f("a", func(r *feature.Registrar) {
					withTask(r)
					r.Command("complete", okPayload{}, feature.AnyUser(), nop)
					r.Command("task.create", okPayload{}, feature.AnyUser(), nop)
					r.Command("task.done", okPayload{}, feature.AnyUser(), nop)
					r.DefineEvent("task.done", okPayload{})
				}),
				f("b", func(r *feature.Registrar) { r.Query("task.done", okPayload{}, feature.AnyUser(), nop) }),
			}
		}, []want{
			{"a", `handler "complete"`, registry.RuleName, "lowercase and dotted"},
			{"a", `handler "task.create"`, registry.RuleUnique, `already declared by feature "a"`},
			{"a", `handler "task.done"`, registry.RuleUnique, "also an event"},
			{"b", `handler "task.done"`, registry.RuleUnique, `already declared by feature "a"`},
		}},
		{"handler inputs and signatures", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.Command("a.nilinput", nil, feature.AnyUser(), nop)
				r.Command("a.intinput", 5, feature.AnyUser(), nop)
				r.Command("a.wrongtype", struct{ X int }{}, feature.AnyUser(), nop)
				r.Command("a.notfunc", okPayload{}, feature.AnyUser(), "nope")
				r.Command("a.nilfunc", okPayload{}, feature.AnyUser(), nil)
				r.Command("a.oneresult", okPayload{}, feature.AnyUser(), func(feature.CommandContext, okPayload) error { return nil })
				r.Command("a.noctx", okPayload{}, feature.AnyUser(), func(any, okPayload) (any, error) { return nil, nil })
				r.Query("a.ptr", okPayload{}, feature.AnyUser(), func(feature.CommandContext, *okPayload) (any, error) { return nil, nil })
				feature.HandleCommand[okPayload](r, "a.typednil", feature.AnyUser(), nil)
				feature.HandleCommand(r, "a.typedstring", feature.AnyUser(), func(feature.CommandContext, string) (any, error) { return nil, nil })
			})}
		}, []want{
			{"a", `handler "a.nilinput"`, registry.RulePayload, "input is nil"},
			{"a", `handler "a.intinput"`, registry.RulePayload, "not int"},
			{"a", `handler "a.wrongtype"`, registry.RuleHandler, "handler must be func(feature.CommandContext, struct { X int }) (any, error), got func(feature.CommandContext, registry_test.okPayload)"},
			{"a", `handler "a.notfunc"`, registry.RuleHandler, "got string"},
			{"a", `handler "a.nilfunc"`, registry.RuleHandler, "handler function is nil"},
			{"a", `handler "a.oneresult"`, registry.RuleHandler, "(any, error), got func(feature.CommandContext, registry_test.okPayload) error"},
			{"a", `handler "a.noctx"`, registry.RuleHandler, "got func(interface {}, registry_test.okPayload)"},
			{"a", `handler "a.ptr"`, registry.RuleHandler, "got func(feature.CommandContext, *registry_test.okPayload)"},
			{"a", `handler "a.typednil"`, registry.RuleHandler, "handler function is nil"},
			{"a", `handler "a.typedstring"`, registry.RulePayload, "not string"},
		}},
		{"access is deny-by-default", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.Command("a.norule", okPayload{}, feature.Rule{}, nop)
				r.Query("a.deny", okPayload{}, feature.Deny(), nop)
				r.Command("a.noroles", okPayload{}, feature.Roles(), nop)
				r.Command("a.emptyrole", okPayload{}, feature.Roles("Admin", ""), nop)
			})}
		}, []want{
			{"a", `handler "a.norule"`, registry.RuleAccess, "unreachable handler: no access rule"},
			{"a", `handler "a.deny"`, registry.RuleAccess, "unreachable handler: Deny()"},
			{"a", `handler "a.noroles"`, registry.RuleAccess, "Roles() without role names"},
			{"a", `handler "a.emptyrole"`, registry.RuleAccess, "empty role name"},
		}},

		// CRUD.
		{"crud mistakes", func() []*feature.Feature {
			return []*feature.Feature{
				f("a", func(r *feature.Registrar) {
					r.Entity("task", feature.Fields{})
					r.Crud("ghost", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
					r.Crud("task", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser(), Restore: feature.AnyUser()})
					r.Crud("task", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
				}),
				f("b", func(r *feature.Registrar) {
					r.Crud("task", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
				}),
			}
		}, []want{
			{"a", `crud "ghost"`, registry.RuleCrud, `Crud for entity "ghost", which is not declared`},
			{"a", `handler "task.restore"`, registry.RuleCrud, "no SoftDelete"},
			{"a", `crud "task"`, registry.RuleCrud, "declared twice"},
			{"b", `crud "task"`, registry.RuleCrud, `belongs to feature "a"`},
		}},
		{"crud verbs without rules", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.Entity("task", feature.Fields{}, feature.SoftDelete())
				r.Crud("task", feature.Access{Write: feature.Roles("Admin"), Detail: feature.AnyUser()})
			})}
		}, []want{
			{"a", `handler "task.list"`, registry.RuleAccess, "unreachable handler: no access rule (set Access.Read or Access.List)"},
		}},
		{"crud write verbs without rules", func() []*feature.Feature {
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				r.Entity("task", feature.Fields{}, feature.SoftDelete())
				r.Crud("task", feature.Access{Read: feature.AnyUser(), Create: feature.AnyUser()})
			})}
		}, []want{
			{"a", `handler "task.update"`, registry.RuleAccess, "set Access.Write or Access.Update"},
			{"a", `handler "task.delete"`, registry.RuleAccess, "set Access.Write or Access.Delete"},
			{"a", `handler "task.restore"`, registry.RuleAccess, "set Access.Write or Access.Restore"},
		}},

		// Inline projections.
		{"inline projection sources", func() []*feature.Feature {
			apply := map[string]feature.ProjectionApplyFunc{"task.created": nopProject}
			return []*feature.Feature{
				f("a", func(r *feature.Registrar) {
					withTask(r)
					r.Projection("p_empty", feature.InlineProjection{Table: tenantTable("p_empty"), Apply: apply})
					r.Projection("p_ghost", feature.InlineProjection{Source: "ghost", Table: tenantTable("p_ghost"), Apply: apply})
				}),
				f("b", func(r *feature.Registrar) {
					r.Projection("p_foreign", feature.InlineProjection{Source: "task", Table: tenantTable("p_foreign"), Apply: apply})
				}),
			}
		}, []want{
			{"a", `projection "p_empty"`, registry.RuleProjection, "Source is empty"},
			{"a", `projection "p_ghost"`, registry.RuleProjection, `Source "ghost" is not a declared entity`},
			{"b", `projection "p_foreign"`, registry.RuleProjection, `Source "task" is an entity of feature "a"`},
			{"b", `projection "p_foreign"`, registry.RuleApply, `applies "task.created" of feature "a"`},
		}},
		{"inline projection apply maps", func() []*feature.Feature {
			return []*feature.Feature{
				f("b", func(r *feature.Registrar) { r.DefineEvent("other.happened", okPayload{}) }),
				f("a", func(r *feature.Registrar) {
					withTask(r)
					r.Entity("project", feature.Fields{})
					r.DefineEvent("task.done", okPayload{})
					r.Projection("p_none", feature.InlineProjection{Source: "task", Table: tenantTable("p_none")})
					r.Projection("p_bad", feature.InlineProjection{Source: "task", Table: tenantTable("p_bad"), Apply: map[string]feature.ProjectionApplyFunc{
						"task.nope":       nopProject,
						"other.happened":  nopProject,
						"project.created": nopProject,
						"task.done":       nil,
						"task.updated":    nopProject,
					}})
				}),
			}
		}, []want{
			{"a", `projection "p_none"`, registry.RuleApply, "no apply entries"},
			{"a", `projection "p_bad"`, registry.RuleApply, `applies "task.nope", which no feature defines`},
			{"a", `projection "p_bad"`, registry.RuleApply, `applies "other.happened" of feature "b"`},
			{"a", `projection "p_bad"`, registry.RuleApply, `CRUD event of entity "project", but is fed by "task": it would never fire`},
			{"a", `projection "p_bad"`, registry.RuleApply, `apply function for "task.done" is nil`},
		}},
		{"projection tables", func() []*feature.Feature {
			apply := map[string]feature.ProjectionApplyFunc{"task.created": nopProject}
			return []*feature.Feature{f("a", func(r *feature.Registrar) {
				withTask(r)
				r.Projection("no_tenant", feature.InlineProjection{Source: "task", Apply: apply, Table: feature.TableDef{
					Name: "no_tenant", Columns: []feature.Column{{Name: "n", Type: "int"}},
				}})
				r.Projection("bad_cols", feature.InlineProjection{Source: "task", Apply: apply, Table: feature.TableDef{
					Name: "bad_cols",
					Columns: []feature.Column{
						{Name: "tenant_id", Type: "uuid"},
						{Name: "n", Type: "text; drop table x"},
						{Name: "n", Type: "int"},
						{Name: "Big", Type: "int"},
					},
					PrimaryKey: []string{"ghost"},
					Indexes:    []feature.Index{{Columns: []string{"phantom"}}, {}},
				}})
				r.Projection("no_cols", feature.InlineProjection{Source: "task", Apply: apply, Table: feature.TableDef{Name: "no_cols"}})
				r.Projection("clash", feature.InlineProjection{Source: "task", Apply: apply, Table: tenantTable("read_task")})
				r.Projection("Bad Name", feature.InlineProjection{Source: "task", Apply: apply, Table: tenantTable("x")})
				r.Projection("bad_read", feature.InlineProjection{Source: "task", Apply: apply, Table: tenantTable("br"), Read: feature.Roles()})
			})}
		}, []want{
			{"a", `projection "no_tenant"`, registry.RuleProjection, "needs a tenant_id uuid column"},
			{"a", `projection "bad_cols"`, registry.RuleProjection, `type "text; drop table x"`},
			{"a", `projection "bad_cols"`, registry.RuleProjection, `column "n" is declared twice`},
			{"a", `projection "bad_cols"`, registry.RuleProjection, `column name "Big"`},
			{"a", `projection "bad_cols"`, registry.RuleProjection, `primary key names column "ghost"`},
			{"a", `projection "bad_cols"`, registry.RuleProjection, `index 1 names column "phantom"`},
			{"a", `projection "bad_cols"`, registry.RuleProjection, "index 2 has no columns"},
			{"a", `projection "no_cols"`, registry.RuleProjection, "has no columns"},
			{"a", `projection "clash"`, registry.RuleUnique, `table "read_task" is already used by feature "a" entity "task"`},
			{"a", `projection "Bad Name"`, registry.RuleName, "projection names"},
			{"a", `projection "bad_read"`, registry.RuleAccess, "Read: Roles() without role names"},
		}},

		// Multi-stream projections.
		{"msp rules", func() []*feature.Feature {
			apply := map[string]feature.ApplyFunc{"task.created": nopApply}
			tbl := feature.TableDef{Name: "m_table", Columns: []feature.Column{{Name: "n", Type: "int"}}}
			return []*feature.Feature{
				f("a", func(r *feature.Registrar) {
					withTask(r)
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "empty"})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "ghost", Apply: map[string]feature.ApplyFunc{"ghost.happened": nopApply, "task.created": nil}})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "fanout", Delivery: feature.PerInstance, Table: &tbl, Apply: apply})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "settings", Apply: apply, MaxAttempts: -1, BatchSize: -5, Delivery: 9, StartFrom: 9})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "mail", Apply: apply, Read: feature.AnyUser()})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "many", Apply: apply, Partitions: 300})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "local", Apply: apply, Partitions: 4, Delivery: feature.PerInstance})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "parks", Apply: apply, Park: true, SkipApplyErrors: true})
					r.DefineEvent("a.named", okPayload{})
					named := map[string]feature.ApplyFunc{"a.named": nopApply, "task.created": nopApply}
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "by-name", Apply: named, Partitions: 4, PartitionBy: "name"})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "by-customer", Apply: named, Partitions: 4, PartitionBy: "customerId"})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "twice", Apply: apply})
					r.Projection("shared-name", feature.InlineProjection{Source: "task", Table: tenantTable("sn"), Apply: map[string]feature.ProjectionApplyFunc{"task.created": nopProject}})
				}),
				f("b", func(r *feature.Registrar) {
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "twice", Apply: apply})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "shared-name", Apply: apply})
					r.MultiStreamProjection(feature.MultiStreamProjection{Name: "", Apply: apply})
				}),
			}
		}, []want{
			{"a", `msp "empty"`, registry.RuleApply, "no apply entries"},
			{"a", `msp "ghost"`, registry.RuleApply, `applies "ghost.happened", which no feature defines`},
			{"a", `msp "ghost"`, registry.RuleApply, `apply function for "task.created" is nil`},
			{"a", `msp "fanout"`, registry.RuleProjection, "PerInstance delivery with a table"},
			{"a", `msp "settings"`, registry.RuleProjection, "MaxAttempts -1 is negative"},
			{"a", `msp "settings"`, registry.RuleProjection, "BatchSize -5 is negative"},
			{"a", `msp "settings"`, registry.RuleProjection, "Delivery 9"},
			{"a", `msp "settings"`, registry.RuleProjection, "StartFrom 9"},
			{"a", `msp "mail"`, registry.RuleProjection, "a Read rule without a table"},
			{"a", `msp "many"`, registry.RuleProjection, "Partitions 300 is outside 0..256"},
			{"a", `msp "local"`, registry.RuleProjection, "Partitions with PerInstance delivery"},
			{"a", `msp "parks"`, registry.RuleProjection, "Park and SkipApplyErrors exclude each other"},
			{"a", `msp "by-customer"`, registry.RuleProjection, `PartitionBy "customerId": the payload of "a.named" has no such field`},
			{"b", `msp "twice"`, registry.RuleUnique, `already declared by feature "a"`},
			{"b", `msp "shared-name"`, registry.RuleUnique, `already declared by feature "a"`},
			{"b", `msp ""`, registry.RuleName, "projection names"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var (
				reg *registry.Registry
				err error
			)
			require.NotPanics(t, func() { reg, err = registry.Build(c.features()...) })
			require.Nil(t, reg)
			requireBootErrors(t, err, c.want...)
		})
	}
}

func TestBootErrorsAreAllReportedAtOnce(t *testing.T) {
	t.Parallel()
	_, err := registry.Build(
		f("a", func(r *feature.Registrar) {
			r.Entity("Bad", feature.Fields{})
			r.DefineEvent("nodots", okPayload{})
			r.Command("a.x", okPayload{}, feature.Rule{}, nop)
		}),
		f("b", func(r *feature.Registrar) { r.MultiStreamProjection(feature.MultiStreamProjection{Name: "m"}) }),
	)
	all := registry.AllBootErrors(err)
	require.Len(t, all, 4, "%v", err)
	var be *registry.BootError
	require.True(t, errors.As(err, &be))
	require.Equal(t, `boot: feature "a": entity "Bad": entity names are lowercase letters, digits and '_', starting with a letter [name]`, all[0].Error())
}

func TestValidDeclarationsPass(t *testing.T) {
	t.Parallel()
	// Things that look unusual but are allowed.
	type recursive struct {
		Name     string       `json:"name" validate:"required"`
		Children []*recursive `json:"children" validate:"dive"`
	}
	_, err := registry.Build(
		f("other", func(r *feature.Registrar) { r.DefineEvent("other.happened", okPayload{}) }),
		f("a", func(r *feature.Registrar) {
			r.Entity("item", feature.Fields{"ref": feature.Reference("item")}) // self reference
			r.Crud("item", feature.Access{Write: feature.Deny(), Read: feature.Anonymous()})
			r.DefineEvent("item.tree", recursive{})
			r.DefineEvent("item.bumped", &okPayload{}, feature.EventVersion(2))
			r.EventMigration("item.bumped", 1, 2) // a version bump without steps
			r.EventMigration("item.created", 1, 2, feature.Rename("old", "ref"))
			r.Command("item.noop", struct{}{}, feature.Anonymous(), func(feature.CommandContext, struct{}) (int, error) { return 1, nil })
			r.MultiStreamProjection(feature.MultiStreamProjection{Name: "watch.other-feature_1", Apply: map[string]feature.ApplyFunc{
				"other.happened": nopApply, "item.created": nopApply,
			}})
		}),
	)
	require.NoError(t, err)
}
