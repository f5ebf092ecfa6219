package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
)

// A projection partitioned by a payload field keys an event by the field's
// value (a string as it is, anything else as JSON), and by its aggregate
// id when the field is missing, null or empty.
func TestPartitionKeyByField(t *testing.T) {
	require.Nil(t, partitionKey(""))
	key := partitionKey("customerId")
	id := uuid.New()
	ev := func(payload string) eventstore.Event {
		return eventstore.Event{AggregateID: id, Payload: json.RawMessage(payload)}
	}
	require.Equal(t, "c-1", key(ev(`{"customerId":"c-1"}`)))
	require.Equal(t, "42", key(ev(`{"customerId":42}`)))
	for _, p := range []string{`{}`, `{"customerId":null}`, `{"customerId":""}`, `not json`} {
		require.Equal(t, id.String(), key(ev(p)), p)
	}
}
