package eventstore_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

var (
	tenantA = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	tenantB = uuid.MustParse("0190b000-0000-7000-8000-00000000000b")
)

func ev(typ string, payload string) eventstore.NewEvent {
	return eventstore.NewEvent{Type: typ, Payload: json.RawMessage(payload)}
}

func TestAppendAndLoad(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store

	res, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0,
		ev("task.created", `{"title":"a"}`), ev("task.updated", `{"title":"b"}`))
	require.NoError(t, err)
	require.Equal(t, 2, res.Version)
	require.Equal(t, uuid.Version(7), res.AggregateID.Version(), "minted ids are UUIDv7")
	require.Len(t, res.Events, 2)
	require.Less(t, res.Events[0].ID, res.Events[1].ID)

	evs, err := s.Load(ctx, tenantA, res.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, "task.created", evs[0].Type)
	require.JSONEq(t, `{"title":"b"}`, string(evs[1].Payload))
	require.Equal(t, 1, evs[0].Version)
	require.Equal(t, 2, evs[1].Version)
}
