package eventtimeline_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	eventtimeline "github.com/kumiko-go/kumiko/samples/event-timeline"
)

// Two editors change a document; its timeline names each change's author,
// request and correlation id, and only the tenant's admin may read it.
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{eventtimeline.Feature})
	tenant := uuid.New()
	ann := srv.As(t, tenant, "ann", "Editor").With("X-Correlation-ID", "import-42")
	bob := srv.As(t, tenant, "bob", "Editor")

	d := kumikotest.Data[eventtimeline.Document](ann.Write("document.create", map[string]any{"title": "Plan", "body": "v1"}))
	d = kumikotest.Data[eventtimeline.Document](bob.Write("document.update",
		map[string]any{"id": d.ID, "version": d.Version, "changes": map[string]any{"body": "v2"}}))
	kumikotest.Data[eventtimeline.Document](ann.Write("document.delete", map[string]any{"id": d.ID}))

	admin := srv.As(t, tenant, "root", "Admin")
	timeline := kumikotest.Data[pipeline.Timeline](admin.Get("/api/inspect/document/" + d.ID))
	require.Len(t, timeline.Events, 3)
	who := []string{}
	for _, e := range timeline.Events {
		who = append(who, e.Type+" by "+e.CreatedBy)
		require.NotEmpty(t, e.Metadata.RequestID)
		require.False(t, e.CreatedAt.IsZero())
	}
	require.Equal(t, []string{"document.created by ann", "document.updated by bob", "document.deleted by ann"}, who)
	require.Equal(t, "import-42", timeline.Events[0].Metadata.CorrelationID)
	require.JSONEq(t, `{"body":"v2"}`, string(timeline.Events[1].Payload))

	require.Equal(t, 403, bob.Get("/api/inspect/document/"+d.ID).Status, "editors do not read the trail")
	other := srv.As(t, uuid.New(), "root", "Admin").Get("/api/inspect/document/" + d.ID)
	require.Equal(t, 404, other.Status, "another tenant's admin sees nothing")
}
