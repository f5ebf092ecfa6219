package eventstore

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The rows an append returns are matched to its events by stream and
// version when they do not come in the events' order, and taken as they are
// when they do.
func TestInEventOrder(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	args := &batchArgs{evAggIDs: [][16]byte{a, a, b}, versions: []int32{4, 5, 1}}
	want := []written{{id: 10, aggID: a, version: 4}, {id: 12, aggID: a, version: 5}, {id: 11, aggID: b, version: 1}}

	require.Equal(t, want, inEventOrder([]written{want[0], want[1], want[2]}, args))
	require.Equal(t, want, inEventOrder([]written{want[2], want[0], want[1]}, args))
	require.Equal(t, want, inEventOrder([]written{want[1], want[2], want[0]}, args))
}

// A payload handed over as bytes is copied: the appended event does not
// change when the caller reuses its buffer.
func TestEncodePayloadCopiesTheCallersBytes(t *testing.T) {
	buf := json.RawMessage(` {"a":1} `)
	b, err := encodePayload(buf)
	require.NoError(t, err)
	copy(buf, `{"b":2}  `)
	require.Equal(t, `{"a":1}`, string(b))
}
