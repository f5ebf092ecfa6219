package pipeline_test

import (
	"encoding/json"
	"fmt"
	nethttp "net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

type accountNoted struct {
	Note string `json:"note"`
}

// accountRef names an account and the version a command expects.
type accountRef struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
}

// ledger writes accounts every way there is: CRUD, a command that loads
// the stream (account.rename), one that appends without loading
// (account.note), and a multi-stream projection that appends to the
// account a beacon names.
var ledger = feature.Define("ledger", func(r *feature.Registrar) {
	r.Entity("account", feature.Fields{"name": feature.Text()}, feature.SoftDelete())
	r.Crud("account", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.DefineEvent("account.noted", accountNoted{})
	r.Entity("beacon", feature.Fields{"account": feature.UUID()})
	r.Crud("beacon", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	feature.HandleCommand(r, "account.rename", feature.AnyUser(), func(ctx feature.CommandContext, in accountRef) (any, error) {
		a, err := ctx.FetchForWriting(in.ID, "account", in.Version)
		if err != nil {
			return nil, err
		}
		return nil, a.Append("account.updated", map[string]any{"name": "renamed"})
	})
	feature.HandleCommand(r, "account.note", feature.AnyUser(), func(ctx feature.CommandContext, in accountRef) (any, error) {
		_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, AggregateType: "account", Type: "account.noted",
			Payload: accountNoted{Note: "n"}, ExpectedVersion: feature.AnyVersion})
		return nil, err
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		// From now: the pass must not read the newer event itself, which
		// fails any consumer's read of the log.
		Name: "account-noter", MaxAttempts: 1, StartFrom: feature.FromNow,
		Apply: map[string]feature.ApplyFunc{
			"beacon.created": func(ctx feature.ApplyContext, e feature.Event) error {
				var b struct {
					Account uuid.UUID `json:"account"`
				}
				if err := json.Unmarshal(e.Payload, &b); err != nil {
					return err
				}
				_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: b.Account, AggregateType: "account", Type: "account.noted",
					Payload: accountNoted{Note: "beacon"}, ExpectedVersion: feature.AnyVersion})
				return err
			},
		},
	})
})

// TestWriteOverUnknownVersion: a stream holding an event of a newer version
// than the registry knows (a newer release wrote it) is refused every write,
// over HTTP, with 409 version_conflict, reason event_schema_unknown_version,
// naming the event — CRUD update, delete and restore, a command that loads
// it and one that appends blind, a batch (whole batch rolled back,
// failedIndex) — and a multi-stream projection's append fails its pass;
// nothing is written. Streams of known versions are written as before.
func TestWriteOverUnknownVersion(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{ledger})
	a := srv.As(t, tenantA, "alice", "User")
	ok := func(res kumikotest.Response) map[string]any {
		t.Helper()
		require.Equal(t, nethttp.StatusOK, res.Status, "%s", res.Body)
		return kumikotest.Data[map[string]any](res)
	}
	// newer appends, as a newer release would, an event of the stream at a
	// version above the registry's, moving the read row's version with it.
	newer := func(id any, typ string) int {
		t.Helper()
		var head int
		require.NoError(t, srv.App.Pool.QueryRow(t.Context(),
			"SELECT max(version) FROM kumiko_events WHERE aggregate_id = $1", id).Scan(&head))
		srv.Exec(t, fmt.Sprintf(`INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload)
			VALUES ('%s', 'account', '%s', %d, '%s', 2, '{"name":"v2","note":"v2","tags":[]}')`, id, tenantA, head+1, typ))
		srv.Exec(t, fmt.Sprintf(`UPDATE read_account SET version = %d WHERE id = '%s'`, head+1, id))
		return head + 1
	}
	live := ok(a.Write("account.create", map[string]any{"name": "live"}))
	liveVersion := newer(live["id"], "account.updated")
	gone := ok(a.Write("account.create", map[string]any{"name": "gone"}))
	ok(a.Write("account.delete", map[string]any{"id": gone["id"]}))
	goneVersion := newer(gone["id"], "account.noted")
	fresh := ok(a.Write("account.create", map[string]any{"name": "fresh"}))

	refused := func(res kumikotest.Response, typ string) kumikotest.Problem {
		t.Helper()
		require.Equal(t, nethttp.StatusConflict, res.Status, "%s", res.Body)
		p := res.Problem()
		require.Equal(t, pipeline.CodeVersionConflict, p.Code)
		require.Equal(t, pipeline.ReasonUnknownEventVersion, p.Reason)
		require.Equal(t, typ, p.Details["eventType"], "%s", res.Body)
		require.EqualValues(t, 2, p.Details["eventVersion"])
		require.EqualValues(t, 1, p.Details["knownVersion"])
		require.Contains(t, p.Detail, typ)
		return p
	}
	before := events(t, srv.App)
	refused(a.Write("account.update", map[string]any{"id": live["id"], "version": liveVersion,
		"changes": map[string]any{"name": "old"}}), "account.updated")
	refused(a.Write("account.delete", map[string]any{"id": live["id"]}), "account.updated")
	refused(a.Write("account.restore", map[string]any{"id": gone["id"], "version": goneVersion}), "account.noted")
	refused(a.Command("account.rename", map[string]any{"id": live["id"], "version": liveVersion}), "account.updated")
	refused(a.Command("account.note", map[string]any{"id": live["id"]}), "account.updated")
	batch, err := json.Marshal(map[string]any{"commands": []map[string]any{
		{"type": "account.update", "payload": map[string]any{"id": fresh["id"], "version": 1, "changes": map[string]any{"name": "x"}}},
		{"type": "account.note", "payload": map[string]any{"id": live["id"]}},
	}})
	require.NoError(t, err)
	p := refused(a.Do(nethttp.MethodPost, "/api/batch", batch), "account.updated")
	require.EqualValues(t, 1, p.Details["failedIndex"])
	require.Equal(t, before, events(t, srv.App), "a refused write appends nothing")
	require.Equal(t, 1, srv.Count(t, fmt.Sprintf("SELECT count(*) FROM read_account WHERE id = '%s' AND name = 'fresh' AND version = 1", fresh["id"])),
		"the batch rolled back")

	// A multi-stream projection appending to the stream fails its pass.
	d, err := consumer.New(srv.Store, consumer.Config{InstanceID: "test"}, srv.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, d.Register(t.Context()))
	ok(a.Write("beacon.create", map[string]any{"account": live["id"]}))
	res, err := d.RunPass(t.Context(), "account-noter")
	require.NoError(t, err)
	var unknown *eventstore.UnknownEventVersionError
	require.ErrorAs(t, res.Failed, &unknown)
	require.Equal(t, eventstore.UnknownEventVersionError{Type: "account.updated", Version: 2, Current: 1}, *unknown)
	require.Equal(t, 0, srv.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'account.noted' AND event_version = 1"))

	// Streams of known versions are written as before, by every path.
	ok(a.Write("account.update", map[string]any{"id": fresh["id"], "version": 1, "changes": map[string]any{"name": "y"}}))
	ok(a.Command("account.rename", map[string]any{"id": fresh["id"], "version": 2}))
	ok(a.Command("account.note", map[string]any{"id": fresh["id"]}))
	ok(a.Write("account.delete", map[string]any{"id": fresh["id"]}))
	ok(a.Write("account.restore", map[string]any{"id": fresh["id"]}))
}
