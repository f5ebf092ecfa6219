package eventstore_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// BenchmarkLoad10k loads a 10,000-event stream whose events carry the
// metadata a request writes (user, request, correlation, trace header): run
// it with -benchmem and -cpuprofile to see where a read spends its time
// (`make bench` compares it with a raw read).
func BenchmarkLoad10k(b *testing.B) {
	db := kumikotest.NewDB(b)
	ctx := context.Background()
	meta := eventstore.Metadata{UserID: "user-1", RequestID: "req-0001", CorrelationID: "corr-0001",
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	evs := make([]eventstore.NewEvent, 100)
	for i := range evs {
		evs[i] = eventstore.NewEvent{Type: "task.updated", Payload: json.RawMessage(`{"title":"a task title","done":false,"n":1}`), Metadata: meta}
	}
	st := eventstore.Stream{TenantID: tenantA, AggregateType: "task"}
	for v := 0; v < 10_000; v += len(evs) {
		res, err := db.Store.Append(ctx, st, v, evs...)
		require.NoError(b, err)
		st.AggregateID = res.AggregateID
	}
	b.ReportAllocs()
	for b.Loop() {
		got, err := db.Store.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{})
		if err != nil || len(got) != 10_000 {
			b.Fatalf("load: %d events, %v", len(got), err)
		}
	}
}
