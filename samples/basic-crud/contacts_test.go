package basiccrud_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	basiccrud "github.com/kumiko-go/kumiko/samples/basic-crud"
)

// Plain CRUD over HTTP, then the contact's history as the tenant's admin
// sees it: one entry per change, with who made it.
func TestContacts(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{basiccrud.Feature})
	tenant := uuid.New()
	alice := srv.As(t, tenant, "alice", "User")

	c := kumikotest.Data[basiccrud.Contact](alice.Write("contact.create",
		map[string]any{"name": "Ada Lovelace", "email": "ada@example.com"}))
	require.Equal(t, 1, c.Version)

	c = kumikotest.Data[basiccrud.Contact](alice.Write("contact.update",
		map[string]any{"id": c.ID, "version": c.Version, "changes": map[string]any{"phone": "+44 20 7946 0000"}}))
	require.Equal(t, 2, c.Version)
	require.Equal(t, "+44 20 7946 0000", c.Phone)

	dup := alice.Write("contact.create", map[string]any{"name": "Ada again", "email": "ada@example.com"}).Problem()
	require.Equal(t, "unique_violation", dup.Code)
	require.Equal(t, "email", dup.Details["field"])

	list := kumikotest.Data[struct {
		Rows []basiccrud.Contact `json:"rows"`
	}](alice.Query("contact.list", map[string]any{"sort": []map[string]any{{"field": "name"}}}))
	require.Len(t, list.Rows, 1)
	require.Equal(t, "Ada Lovelace", list.Rows[0].Name)

	kumikotest.Data[basiccrud.Contact](alice.Write("contact.delete", map[string]any{"id": c.ID}))
	require.Nil(t, kumikotest.Data[*basiccrud.Contact](alice.Query("contact.detail", map[string]any{"id": c.ID})))

	timeline := kumikotest.Data[pipeline.Timeline](srv.As(t, tenant, "root", "Admin").Get("/api/inspect/contact/" + c.ID))
	types := []string{}
	for _, e := range timeline.Events {
		types = append(types, e.Type)
		require.Equal(t, "alice", e.CreatedBy)
	}
	require.Equal(t, []string{"contact.created", "contact.updated", "contact.deleted"}, types)
	require.JSONEq(t, `{"phone":"+44 20 7946 0000"}`, string(timeline.Events[1].Payload), "an update records what changed")
}
