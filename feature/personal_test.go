package feature_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

func TestPersonalFields(t *testing.T) {
	t.Parallel()
	s := feature.SpecOf(feature.Text().Personal())
	require.True(t, s.Personal)
	require.Equal(t, "", s.Subject, "the entity's own subject")
	require.Empty(t, s.Problems)

	s = feature.SpecOf(feature.Text().MaxLen(80).PersonalOf("customerId"))
	require.True(t, s.Personal)
	require.Equal(t, "customerId", s.Subject)
	require.Equal(t, 80, s.MaxLen)
	require.Empty(t, s.Problems)

	s = feature.SpecOf(feature.Text().PersonalOf("customerId").Personal())
	require.True(t, s.Personal)
	require.Equal(t, "", s.Subject, "the last call decides the subject")

	require.False(t, feature.SpecOf(feature.Text()).Personal)

	s = feature.SpecOf(feature.Text().PersonalOf(""))
	require.Len(t, s.Problems, 1)
	require.Contains(t, s.Problems[0], "PersonalOf needs a field name")
}

func TestPersonalEventOptions(t *testing.T) {
	t.Parallel()
	names := []string{"email", "phone"}
	f := feature.Define("shop", func(r *feature.Registrar) {
		r.DefineEvent("order.placed", struct{}{}, feature.Personal(names...), feature.Personal("address"), feature.SubjectField("customerId"))
		r.DefineEvent("order.noted", struct{}{}, feature.Personal("note"))
		r.DefineEvent("order.paid", struct{}{})
		r.IntegrationEvent("order.shipped", struct{}{}, feature.Personal("email"), feature.SubjectField("customerId"))
	})
	names[0] = "changed" // the option keeps its own copy

	d := f.Spec()
	require.Empty(t, d.Problems)
	require.Len(t, d.Events, 3)
	require.Equal(t, []string{"email", "phone", "address"}, d.Events[0].Personal)
	require.Equal(t, "customerId", d.Events[0].Subject)
	require.Equal(t, []string{"note"}, d.Events[1].Personal)
	require.Equal(t, "", d.Events[1].Subject)
	require.Nil(t, d.Events[2].Personal)
	require.Len(t, d.Contracts, 1)
	require.Equal(t, []string{"email"}, d.Contracts[0].Personal)
	require.Equal(t, "customerId", d.Contracts[0].Subject)

	// Spec hands out copies.
	d.Events[0].Personal[0] = "x"
	d.Contracts[0].Personal[0] = "x"
	d = f.Spec()
	require.Equal(t, "email", d.Events[0].Personal[0])
	require.Equal(t, "email", d.Contracts[0].Personal[0])
}

func TestPersonalEventOptionMisuse(t *testing.T) {
	t.Parallel()
	f := feature.Define("shop", func(r *feature.Registrar) {
		r.DefineEvent("order.placed", struct{}{}, feature.Personal())
		r.DefineEvent("order.noted", struct{}{}, feature.Personal("note"), feature.SubjectField(""))
		r.IntegrationEvent("order.shipped", struct{}{}, feature.Personal())
		r.IntegrationEvent("order.sent", struct{}{}, feature.Personal("email"), feature.SubjectField(""))
	})
	ps := problems(f)
	require.Len(t, ps, 4)
	require.Contains(t, ps[0], `event "order.placed": Personal needs at least one field name`)
	require.Contains(t, ps[1], `event "order.noted": SubjectField needs a field name`)
	require.Contains(t, ps[2], `integration event "order.shipped": Personal needs at least one field name`)
	require.Contains(t, ps[3], `integration event "order.sent": SubjectField needs a field name`)
}
