package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

func TestCrudVerbRule(t *testing.T) {
	t.Parallel()
	a := feature.Access{
		Write:  feature.Roles("User"),
		Read:   feature.AnyUser(),
		Delete: feature.Roles("Admin"),
		Detail: feature.Anonymous(),
	}
	require.Equal(t, "roles(User)", registry.VerbCreate.Rule(a).String())
	require.Equal(t, "roles(User)", registry.VerbUpdate.Rule(a).String())
	require.Equal(t, "roles(Admin)", registry.VerbDelete.Rule(a).String())
	require.Equal(t, "roles(User)", registry.VerbRestore.Rule(a).String())
	require.Equal(t, "any-user", registry.VerbList.Rule(a).String())
	require.Equal(t, "anonymous", registry.VerbDetail.Rule(a).String())
	require.True(t, registry.CrudVerb("bogus").Rule(a).IsZero())
	require.True(t, registry.VerbCreate.Rule(feature.Access{}).IsZero())
}

func TestCrudVerbs(t *testing.T) {
	t.Parallel()
	var handlers, events []string
	for _, v := range registry.CrudVerbs() {
		handlers = append(handlers, v.HandlerName("task"))
		events = append(events, v.EventType("task"))
	}
	require.Equal(t, []string{"task.create", "task.update", "task.delete", "task.restore", "task.list", "task.detail"}, handlers)
	require.Equal(t, []string{"task.created", "task.updated", "task.deleted", "task.restored", "", ""}, events)
	require.True(t, registry.VerbRestore.IsWrite())
	require.False(t, registry.VerbList.IsWrite())
}
