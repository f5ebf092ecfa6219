package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

type contactDetails struct {
	Phone string `json:"phone"`
}

type bookingConfirmed struct {
	BookingID  string `json:"bookingId" validate:"required"`
	CustomerID string `json:"customerId" validate:"required"`
	Email      string `json:"email"`
	Nights     int    `json:"nights"`
	Internal   string `json:"-"`
	contactDetails
}

// bookingFeature declares entity "booking" with a personal field of its own
// subject and one of the customer's, and events with personal fields.
func bookingFeature(name string) *feature.Feature {
	return feature.Define(name, func(r *feature.Registrar) {
		r.Entity("customer", feature.Fields{"name": feature.Text()})
		r.Entity("room", feature.Fields{"number": feature.Text()})
		r.Entity("booking", feature.Fields{
			"guestName":      feature.Text().Required().Personal(),
			"customerId":     feature.Reference("customer"),
			"billingAddress": feature.Text().PersonalOf("customerId"),
			"nights":         feature.Number(),
		}, feature.SoftDelete())
		r.Crud("booking", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		r.DefineEvent("booking.confirmed", bookingConfirmed{},
			feature.Personal("email"), feature.Personal("phone"), feature.SubjectField("customerId"))
		r.DefineEvent("booking.renamed", &bookingConfirmed{}, feature.Personal("email"))
		r.DefineEvent("booking.extended", bookingConfirmed{})
		r.IntegrationEvent("booking.exported", bookingConfirmed{}, feature.Personal("email"), feature.SubjectField("customerId"))
		r.IntegrationEvent("booking.shared", bookingConfirmed{}, feature.Personal("phone"), feature.SubjectField("customerId"))
	})
}

func TestPersonalDataAccessors(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(bookingFeature("bookings"))
	require.NoError(t, err)

	booking, ok := reg.Entity("booking")
	require.True(t, ok)
	wantEntity := map[string]string{"guestName": "", "billingAddress": "customerId"}
	require.Equal(t, wantEntity, booking.Personal())
	booking.Personal()["nights"] = "x"
	require.Equal(t, wantEntity, booking.Personal(), "Personal returns a copy")
	room, _ := reg.Entity("room")
	require.Nil(t, room.Personal())
	f, _ := booking.Field("billingAddress")
	require.True(t, f.Personal)
	require.Equal(t, "customerId", f.Subject)

	// The created and updated events carry the entity's fields; deleted
	// and restored carry none.
	for ev, want := range map[string]map[string]string{
		"booking.created":   wantEntity,
		"booking.updated":   wantEntity,
		"booking.deleted":   nil,
		"booking.restored":  nil,
		"room.created":      nil,
		"booking.confirmed": {"email": "customerId", "phone": "customerId"},
		"booking.renamed":   {"email": ""},
		"booking.extended":  nil,
	} {
		et, ok := reg.Event(ev)
		require.True(t, ok, ev)
		require.Equal(t, want, et.Personal, ev)
	}
	et, _ := reg.Event("booking.created")
	et.Personal["nights"] = "x"
	et, _ = reg.Event("booking.created")
	require.Equal(t, wantEntity, et.Personal, "Event returns a copy")
	for _, et := range reg.Events() {
		if et.Name == "booking.updated" {
			et.Personal["nights"] = "x"
		}
	}
	et, _ = reg.Event("booking.updated")
	require.Equal(t, wantEntity, et.Personal, "Events returns copies")

	c, ok := reg.Contract("booking.exported")
	require.True(t, ok)
	require.Equal(t, map[string]string{"email": "customerId"}, c.Personal)
	c.Personal["nights"] = "x"
	c, _ = reg.Contract("booking.exported")
	require.Equal(t, map[string]string{"email": "customerId"}, c.Personal, "Contract returns a copy")
	c, _ = reg.Contract("booking.shared")
	require.Equal(t, map[string]string{"phone": "customerId"}, c.Personal)
}

// A contract shared by two features must declare the same personal fields
// in both.
func TestSharedContractPersonalFields(t *testing.T) {
	t.Parallel()
	declare := func(opts ...feature.EventOption) func(r *feature.Registrar) {
		return func(r *feature.Registrar) { r.IntegrationEvent("booking.exported", bookingConfirmed{}, opts...) }
	}
	same := []feature.EventOption{feature.Personal("email"), feature.SubjectField("customerId")}
	reg, err := registry.Build(feature.Define("a", declare(same...)), feature.Define("b", declare(same...)))
	require.NoError(t, err)
	c, _ := reg.Contract("booking.exported")
	require.Equal(t, map[string]string{"email": "customerId"}, c.Personal)

	_, err = registry.Build(feature.Define("a", declare(same...)), feature.Define("b", declare(feature.Personal("email"))))
	requireBootErrors(t, err, want{"b", `integration event "booking.exported"`, registry.RuleUnique, "other personal fields"})
	_, err = registry.Build(feature.Define("a", declare(same...)), feature.Define("b", declare()))
	requireBootErrors(t, err, want{"b", `integration event "booking.exported"`, registry.RuleUnique, "other personal fields"})
}

func TestPersonalDataBootRules(t *testing.T) {
	t.Parallel()
	entity := func(fields feature.Fields) func(r *feature.Registrar) {
		return func(r *feature.Registrar) {
			fields["customerId"] = feature.UUID()
			r.Entity("booking", fields)
		}
	}
	event := func(opts ...feature.EventOption) func(r *feature.Registrar) {
		return func(r *feature.Registrar) { r.DefineEvent("booking.confirmed", bookingConfirmed{}, opts...) }
	}
	contract := func(opts ...feature.EventOption) func(r *feature.Registrar) {
		return func(r *feature.Registrar) { r.IntegrationEvent("booking.exported", bookingConfirmed{}, opts...) }
	}
	const (
		field = `entity "booking" field "address"`
		ev    = `event "booking.confirmed"`
		ct    = `integration event "booking.exported"`
	)
	cases := []struct {
		name string
		fn   func(r *feature.Registrar)
		want want
	}{
		// Entity fields.
		{"PersonalOf an unknown field", entity(feature.Fields{"address": feature.Text().PersonalOf("ownerId")}),
			want{"shop", field, registry.RuleField, `PersonalOf("ownerId") names no field of entity "booking"`}},
		{"PersonalOf the aggregate id", entity(feature.Fields{"address": feature.Text().PersonalOf("id")}),
			want{"shop", field, registry.RuleField, `PersonalOf("id") names no field of entity "booking"; use Personal`}},
		{"PersonalOf a number", entity(feature.Fields{"address": feature.Text().PersonalOf("nights"), "nights": feature.Number()}),
			want{"shop", field, registry.RuleField, `PersonalOf("nights") names a number field; a subject's id is held by a uuid, reference or text field`}},
		{"PersonalOf a bool", entity(feature.Fields{"address": feature.Text().PersonalOf("vip"), "vip": feature.Bool()}),
			want{"shop", field, registry.RuleField, `PersonalOf("vip") names a bool field`}},
		{"PersonalOf a personal field", entity(feature.Fields{"address": feature.Text().PersonalOf("email"), "email": feature.Text().Personal()}),
			want{"shop", field, registry.RuleField, `PersonalOf("email") names a personal field`}},
		{"PersonalOf a field personal of another", entity(feature.Fields{"address": feature.Text().PersonalOf("ref"), "ref": feature.UUID().PersonalOf("customerId")}),
			want{"shop", field, registry.RuleField, `PersonalOf("ref") names a personal field`}},
		{"PersonalOf the field itself", entity(feature.Fields{"address": feature.Text().PersonalOf("address")}),
			want{"shop", field, registry.RuleField, `PersonalOf("address") names the field itself`}},
		{"PersonalOf without a name", entity(feature.Fields{"address": feature.Text().PersonalOf("")}),
			want{"shop", field, registry.RuleField, "PersonalOf needs a field name"}},

		// Domain events.
		{"Personal of an unknown field", event(feature.Personal("address")),
			want{"shop", ev, registry.RulePayload, `Personal("address") names no top-level field of the payload`}},
		{"Personal by Go name", event(feature.Personal("Email")),
			want{"shop", ev, registry.RulePayload, `Personal("Email") names no top-level field of the payload`}},
		{"Personal of an ignored field", event(feature.Personal("Internal")),
			want{"shop", ev, registry.RulePayload, `Personal("Internal") names no top-level field`}},
		{"Personal with an empty name", event(feature.Personal("email", "")),
			want{"shop", ev, registry.RulePayload, "Personal has an empty field name"}},
		{"Personal listed twice", event(feature.Personal("email", "phone"), feature.Personal("email")),
			want{"shop", ev, registry.RulePayload, `Personal lists field "email" twice`}},
		{"Personal without names", event(feature.Personal()),
			want{"shop", ev, registry.RuleDefinition, "Personal needs at least one field name"}},
		{"SubjectField of an unknown field", event(feature.Personal("email"), feature.SubjectField("ownerId")),
			want{"shop", ev, registry.RulePayload, `SubjectField("ownerId") names no top-level field of the payload`}},
		{"SubjectField without Personal", event(feature.SubjectField("customerId")),
			want{"shop", ev, registry.RulePayload, `SubjectField("customerId") without Personal`}},
		{"SubjectField personal itself", event(feature.Personal("email", "customerId"), feature.SubjectField("customerId")),
			want{"shop", ev, registry.RulePayload, `SubjectField("customerId") is one of the Personal fields`}},
		{"SubjectField without a name", event(feature.Personal("email"), feature.SubjectField("")),
			want{"shop", ev, registry.RuleDefinition, "SubjectField needs a field name"}},

		// Integration events.
		{"contract Personal of an unknown field", contract(feature.Personal("address"), feature.SubjectField("customerId")),
			want{"shop", ct, registry.RuleIntegration, `Personal("address") names no top-level field of the payload`}},
		{"contract Personal listed twice", contract(feature.Personal("email", "email"), feature.SubjectField("customerId")),
			want{"shop", ct, registry.RuleIntegration, `Personal lists field "email" twice`}},
		{"contract Personal with an empty name", contract(feature.Personal(""), feature.SubjectField("customerId")),
			want{"shop", ct, registry.RuleIntegration, "Personal has an empty field name"}},
		{"contract SubjectField of an unknown field", contract(feature.Personal("email"), feature.SubjectField("ownerId")),
			want{"shop", ct, registry.RuleIntegration, `SubjectField("ownerId") names no top-level field`}},
		{"contract SubjectField without Personal", contract(feature.SubjectField("customerId")),
			want{"shop", ct, registry.RuleIntegration, `SubjectField("customerId") without Personal`}},
		{"contract Personal without SubjectField", contract(feature.Personal("email")),
			want{"shop", ct, registry.RuleIntegration, `Personal without SubjectField: a message is a stream of its own`}},
		{"contract SubjectField personal itself", contract(feature.Personal("customerId"), feature.SubjectField("customerId")),
			want{"shop", ct, registry.RuleIntegration, `SubjectField("customerId") is one of the Personal fields`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := registry.Build(feature.Define("shop", c.fn))
			requireBootErrors(t, err, c.want)
			require.Len(t, registry.AllBootErrors(err), 1, "one problem, one boot error: %v", err)
		})
	}
}

// The personal options are checked by name even when the payload is
// unusable, so every problem is reported at once.
func TestPersonalDataCheckedWithABadPayload(t *testing.T) {
	t.Parallel()
	_, err := registry.Build(feature.Define("shop", func(r *feature.Registrar) {
		r.DefineEvent("booking.confirmed", nil, feature.Personal("email", "email"))
		r.IntegrationEvent("booking.exported", "text", feature.SubjectField("customerId"))
	}))
	requireBootErrors(t, err,
		want{"shop", `event "booking.confirmed"`, registry.RulePayload, "payload is nil"},
		want{"shop", `event "booking.confirmed"`, registry.RulePayload, `Personal lists field "email" twice`},
		want{"shop", `integration event "booking.exported"`, registry.RulePayload, "must be a struct"},
		want{"shop", `integration event "booking.exported"`, registry.RuleIntegration, `SubjectField("customerId") without Personal`},
	)
}
