package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
)

// tally follows votes three ways: the vote entity's table (keyed by stream
// id), an inline count per choice, and a multi-stream log of the live
// votes; tally.rows answers a projection query of any of them.
var tally = feature.Define("tally", func(r *feature.Registrar) {
	r.Entity("vote", feature.Fields{
		"choice": feature.Text().Required().MaxLen(50),
	})
	r.Crud("vote", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Projection("vote_counts", feature.InlineProjection{
		Source: "vote",
		Table: feature.TableDef{
			Name: "vote_counts",
			Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "choice", Type: "text", NotNull: true},
				{Name: "votes", Type: "bigint", NotNull: true},
				{Name: "reviewed_by", Type: "text", ReadRoles: []string{"HR"}}, // hidden from the other users
			},
			PrimaryKey: []string{"tenant_id", "choice"},
		},
		Apply: map[string]feature.ProjectionApplyFunc{"vote.created": countVote},
		Read:  feature.AnyUser(),
	})
	r.Projection("vote_audit", feature.InlineProjection{
		Source: "vote",
		Table: feature.TableDef{
			Name:       "vote_audit",
			Columns:    []feature.Column{{Name: "tenant_id", Type: "uuid", NotNull: true}, {Name: "n", Type: "bigint"}},
			PrimaryKey: []string{"tenant_id"},
		},
		Apply: map[string]feature.ProjectionApplyFunc{"vote.created": func(feature.ProjectionContext, feature.Event) error { return nil }},
		// No Read rule: nobody may follow it.
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "vote_log",
		Table: &feature.TableDef{
			Name: "vote_log",
			Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "vote_id", Type: "uuid", NotNull: true},
				{Name: "choice", Type: "text", NotNull: true},
			},
			PrimaryKey: []string{"tenant_id", "vote_id"},
		},
		Apply: map[string]feature.ApplyFunc{"vote.created": logVote, "vote.deleted": unlogVote},
		Read:  feature.Roles("Auditor"),
	})
	feature.HandleQuery(r, "tally.rows", feature.AnyUser(), func(ctx feature.CommandContext, in tallyRows) (any, error) {
		return ctx.QueryProjection(in.Name).Rows(feature.ProjectionFilter{})
	})
})

type tallyRows struct {
	Name string `json:"name" validate:"required"`
}

type votePayload struct {
	Choice string `json:"choice"`
}

func countVote(ctx feature.ProjectionContext, e feature.Event) error {
	v, err := feature.Decode[votePayload](e)
	if err != nil {
		return err
	}
	_, err = ctx.DB().Exec(ctx.Context(), `INSERT INTO `+ctx.Table()+` AS c (tenant_id, choice, votes) VALUES ($1, $2, 1)
ON CONFLICT (tenant_id, choice) DO UPDATE SET votes = c.votes + 1`, ctx.Tenant(), v.Choice)
	return err
}

func logVote(ctx feature.ApplyContext, e feature.Event) error {
	v, err := feature.Decode[votePayload](e)
	if err != nil {
		return err
	}
	_, err = ctx.DB().Exec(ctx.Context(), `INSERT INTO `+ctx.Table()+` (tenant_id, vote_id, choice) VALUES ($1, $2, $3)`,
		ctx.Tenant(), e.AggregateID, v.Choice)
	return err
}

func unlogVote(ctx feature.ApplyContext, e feature.Event) error {
	_, err := ctx.DB().Exec(ctx.Context(), `DELETE FROM `+ctx.Table()+` WHERE tenant_id = $1 AND vote_id = $2`, ctx.Tenant(), e.AggregateID)
	return err
}

// newTallyEnv is a server with the tally and staff features whose live feed
// runs; with msp, the feed's dispatcher also holds vote_log's consumer,
// whose passes the test runs.
func newTallyEnv(t *testing.T, hb time.Duration) *env {
	t.Helper()
	e := newEnvWith(t, 8, []*feature.Feature{tally, staff}, func(c *khttp.Config) { c.SSEHeartbeat = hb })
	t.Cleanup(e.s.CloseStreams)
	return e
}

// vote casts a vote as tok and returns its id.
func vote(t *testing.T, e *env, tok, choice string) string {
	t.Helper()
	r := e.post("/api/write", tok, fmt.Sprintf(`{"type":"vote.create","payload":{"choice":%q}}`, choice))
	require.Equal(t, http.StatusOK, r.status, r.String())
	return r.data(t)["id"].(string)
}

func revote(t *testing.T, e *env, tok, id string, version int, choice string) {
	t.Helper()
	r := e.post("/api/write", tok, fmt.Sprintf(`{"type":"vote.update","payload":{"id":%q,"version":%d,"changes":{"choice":%q}}}`, id, version, choice))
	require.Equal(t, http.StatusOK, r.status, r.String())
}

func unvote(t *testing.T, e *env, tok, id string) {
	t.Helper()
	r := e.post("/api/write", tok, fmt.Sprintf(`{"type":"vote.delete","payload":{"id":%q}}`, id))
	require.Equal(t, http.StatusOK, r.status, r.String())
}

// freshRows is what a projection query of name answers for tok, by key.
func freshRows(t *testing.T, e *env, tok, name string, key func(map[string]any) string) map[string]map[string]any {
	t.Helper()
	r := e.post("/api/query", tok, fmt.Sprintf(`{"type":"tally.rows","payload":{"name":%q}}`, name))
	require.Equal(t, http.StatusOK, r.status, r.String())
	var body struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body))
	out := map[string]map[string]any{}
	for _, row := range body.Data {
		out[key(row)] = row
	}
	return out
}

func keyOf(fields ...string) func(map[string]any) string {
	return func(row map[string]any) string {
		k := ""
		for _, f := range fields {
			k += fmt.Sprint(row[f]) + "|"
		}
		return k
	}
}

// replica is a client's copy of a projection's rows, built from the frames
// of its channel.
type replica struct {
	t     *testing.T
	key   func(map[string]any) string
	rows  map[string]map[string]any
	last  int64 // id of the newest frame with an id
	kinds []string
}

func newReplica(t *testing.T, key func(map[string]any) string) *replica {
	return &replica{t: t, key: key, rows: map[string]map[string]any{}}
}

// apply reduces one frame onto the rows, checking that ids never go down.
func (r *replica) apply(m sseMsg) {
	r.t.Helper()
	if m.id != "" {
		id := m.eventID(r.t)
		require.GreaterOrEqual(r.t, id, r.last, "frame ids never go down")
		r.last = id
	}
	r.kinds = append(r.kinds, m.event)
	switch m.event {
	case "reset":
		r.rows = map[string]map[string]any{}
	case "upsert":
		row := m.obj(r.t)
		r.rows[r.key(row)] = row
	case "delete":
		delete(r.rows, r.key(m.obj(r.t)))
	default:
		r.t.Fatalf("unexpected frame %q", m.event)
	}
}

// until applies frames of s until the rows equal want.
func (r *replica) until(s *sseStream, want map[string]map[string]any) {
	r.t.Helper()
	for !equalRows(r.rows, want) {
		r.apply(s.nextEvent())
	}
}

func equalRows(a, b map[string]map[string]any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// An entity's channel sends the row after a create and an update, and the
// key after a delete, each with its event's id, in id order; a channel
// opened without a resume point starts with a reset.
func TestProjectionChannelEntityLive(t *testing.T) {
	t.Parallel()
	e := newTallyEnv(t, 0)
	start(t, feed(t, e))
	alice := token(t, "alice", tenantA, "User")

	s := openStream(t, e.srv, "/api/projections/vote/events", alice).read()
	reset := s.nextEvent()
	require.Equal(t, "reset", reset.event)
	require.NotEmpty(t, reset.id, "an empty snapshot's reset carries its id")

	id := vote(t, e, alice, "red")
	created := s.nextEvent()
	require.Equal(t, "upsert", created.event)
	row := created.obj(t)
	require.Equal(t, id, row["id"])
	require.Equal(t, "red", row["choice"])
	require.EqualValues(t, 1, row["version"])
	require.NotContains(t, row, "tenantId")
	require.Contains(t, row, "createdAt", "camelCase, as the projection query answers")
	require.Greater(t, created.eventID(t), reset.eventID(t))

	revote(t, e, alice, id, 1, "blue")
	updated := s.nextEvent()
	require.Equal(t, "upsert", updated.event)
	require.Equal(t, "blue", updated.obj(t)["choice"])
	require.EqualValues(t, 2, updated.obj(t)["version"])
	require.Greater(t, updated.eventID(t), created.eventID(t))

	unvote(t, e, alice, id)
	deleted := s.nextEvent()
	require.Equal(t, "delete", deleted.event)
	require.Equal(t, map[string]any{"id": id}, deleted.obj(t))
	require.Greater(t, deleted.eventID(t), updated.eventID(t))

	// The inline count follows the same way, keyed by its primary key.
	c := openStream(t, e.srv, "/api/projections/vote_counts/events", alice).read()
	require.Equal(t, "reset", c.nextEvent().event)
	snap := c.nextEvent()
	require.Equal(t, "upsert", snap.event)
	require.Equal(t, map[string]any{"choice": "red", "votes": float64(1)}, snap.obj(t), "the snapshot: the counts so far")
	require.Equal(t, deleted.id, snap.id, "the snapshot's last frame carries the id it reflects")
	vote(t, e, alice, "green")
	up := c.nextEvent()
	require.Equal(t, "upsert", up.event)
	require.Equal(t, map[string]any{"choice": "green", "votes": float64(1)}, up.obj(t))
}

// A client that resumes with Last-Event-ID after missing writes (creates,
// updates, deletes, and another tenant's writes) and reduces the frames onto
// its rows ends with the rows of a fresh projection query: an entity's
// table by replaying the changed rows, a table not keyed by stream after a
// reset; live frames keep it there.
func TestProjectionChannelResumeConverges(t *testing.T) {
	t.Parallel()
	e := newTallyEnv(t, 0)
	start(t, feed(t, e))
	alice := token(t, "alice", tenantA, "User")
	bob := token(t, "bob", tenantB, "User")

	for _, tc := range []struct {
		name  string
		key   func(map[string]any) string
		keyed bool
	}{
		{"vote", keyOf("id"), true},
		{"vote_counts", keyOf("choice"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/api/projections/" + tc.name + "/events"
			rep := newReplica(t, tc.key)
			s := openStream(t, e.srv, path, alice).read()
			keep := vote(t, e, alice, "red")
			gone := vote(t, e, alice, "red")
			rep.until(s, freshRows(t, e, alice, tc.name, tc.key))
			s.close()

			// Missed while disconnected.
			revote(t, e, alice, keep, 1, "blue")
			unvote(t, e, alice, gone)
			vote(t, e, bob, "red")
			added := vote(t, e, alice, "green")
			want := freshRows(t, e, alice, tc.name, tc.key)

			rep.kinds = nil
			s = openStream(t, e.srv, path, alice, "Last-Event-ID", fmt.Sprint(rep.last)).read()
			rep.until(s, want)
			if tc.keyed {
				require.NotContains(t, rep.kinds, "reset", "an entity's table resumes without a reset")
			} else {
				require.Equal(t, "reset", rep.kinds[0], "a table not keyed by stream resumes with a reset")
			}

			// Live after the resume.
			revote(t, e, alice, added, 1, "blue")
			vote(t, e, alice, "blue")
			rep.until(s, freshRows(t, e, alice, tc.name, tc.key))

			// ?after= resumes the same way.
			q := newReplica(t, tc.key)
			q.rows = maps(rep.rows)
			q.last = rep.last
			vote(t, e, alice, "red")
			qs := openStream(t, e.srv, path+"?after="+fmt.Sprint(rep.last), alice).read()
			q.until(qs, freshRows(t, e, alice, tc.name, tc.key))
		})
	}
}

func maps(m map[string]map[string]any) map[string]map[string]any {
	out := make(map[string]map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// newTallyPasses is a tally env with a heartbeat every 10 ms and a
// dispatcher of its consumers (vote_log's and the live feed's) whose
// passes the test runs.
func newTallyPasses(t *testing.T) (*env, *consumer.Dispatcher) {
	t.Helper()
	e := newTallyEnv(t, 10*time.Millisecond)
	d, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "t", PollInterval: 20 * time.Millisecond},
		append(e.app.Executor.Consumers(), e.s.EventsConsumer())...)
	require.NoError(t, err)
	require.NoError(t, d.Register(context.Background()))
	return e, d
}

// A multi-stream projection's frame comes only once its consumer has applied
// the event: the live feed hands the event over at once, the channel waits
// for the consumer's cursor, and then sends the row the query shows.
func TestProjectionChannelWaitsForMultiStreamProjection(t *testing.T) {
	t.Parallel()
	e, d := newTallyPasses(t)
	auditor := token(t, "ada", tenantA, "User", "Auditor")

	s := openStream(t, e.srv, "/api/projections/vote_log/events", auditor).read()
	require.Equal(t, "reset", s.nextEvent().event)

	id := vote(t, e, auditor, "red")
	pass(t, d) // the live feed has the event
	// Let the channel take the event: heartbeats come from the same loop.
	for range 3 {
		require.True(t, s.next().isComment, "nothing but heartbeats while the projection has not applied the event")
	}
	require.Zero(t, e.app.Count(t, "SELECT count(*) FROM vote_log"), "the projection has not applied it yet")

	_, err := d.RunPass(context.Background(), "vote_log")
	require.NoError(t, err)
	m := nextFrame(t, s)
	require.Equal(t, "upsert", m.event)
	require.Equal(t, map[string]any{"voteId": id, "choice": "red"}, m.obj(t))
	require.Equal(t, freshRows(t, e, auditor, "vote_log", keyOf("voteId"))[keyOf("voteId")(m.obj(t))], m.obj(t))

	unvote(t, e, auditor, id)
	pass(t, d)
	_, err = d.RunPass(context.Background(), "vote_log")
	require.NoError(t, err)
	del := nextFrame(t, s)
	require.Equal(t, "delete", del.event)
	require.Equal(t, map[string]any{"voteId": id}, del.obj(t))
	require.Greater(t, del.eventID(t), m.eventID(t))
}

// A snapshot taken before a multi-stream projection applied the events up
// to its mark is followed, once the projection has, by the rows those
// events changed: the live feed does not bring those events again.
func TestProjectionChannelSnapshotBehindMultiStreamProjection(t *testing.T) {
	t.Parallel()
	e, d := newTallyPasses(t)
	auditor := token(t, "ada", tenantA, "User", "Auditor")

	id := vote(t, e, auditor, "red")
	// The first stream starts where the log has settled: after the vote,
	// which vote_log has not applied.
	s := openStream(t, e.srv, "/api/projections/vote_log/events", auditor).read()
	reset := s.nextEvent()
	require.Equal(t, "reset", reset.event)
	require.Positive(t, reset.eventID(t), "the snapshot's mark covers the vote")
	for range 3 {
		require.True(t, s.next().isComment, "nothing but heartbeats while the projection has not applied the vote")
	}

	_, err := d.RunPass(context.Background(), "vote_log")
	require.NoError(t, err)
	m := nextFrame(t, s)
	require.Equal(t, "upsert", m.event)
	require.Equal(t, map[string]any{"voteId": id, "choice": "red"}, m.obj(t))
	require.Equal(t, reset.eventID(t), m.eventID(t))
}

// nextFrame is the next frame but heartbeats, failing the test when none
// comes in time however many heartbeats do.
func nextFrame(t *testing.T, s *sseStream) sseMsg {
	t.Helper()
	deadline := time.Now().Add(sseWait)
	for time.Now().Before(deadline) {
		if m := s.next(); !m.isComment {
			return m
		}
	}
	t.Fatalf("no frame but heartbeats within %s", sseWait)
	return sseMsg{}
}

// Frames leave out the fields the caller may not read, as detail and list
// do: in the snapshot, live and in a resume.
func TestProjectionChannelHidesUnreadableFields(t *testing.T) {
	t.Parallel()
	e := newTallyEnv(t, 0)
	start(t, feed(t, e))
	alice, hr := token(t, "alice", tenantA, "User"), token(t, "hanna", tenantA, "User", "HR")
	r := e.post("/api/write", hr, `{"type":"employee.create","payload":{"name":"Bo","salary":5000}}`)
	require.Equal(t, http.StatusOK, r.status, r.String())

	plain := openStream(t, e.srv, "/api/projections/employee/events", alice).read()
	full := openStream(t, e.srv, "/api/projections/employee/events", hr).read()
	require.Equal(t, "reset", plain.nextEvent().event)
	require.Equal(t, "reset", full.nextEvent().event)
	snap := plain.nextEvent()
	require.Equal(t, "Bo", snap.obj(t)["name"])
	require.NotEmpty(t, snap.id)
	require.NotContains(t, snap.obj(t), "salary", "no salary for a user without HR")
	require.EqualValues(t, 5000, full.nextEvent().obj(t)["salary"])

	r = e.post("/api/write", hr, `{"type":"employee.create","payload":{"name":"Cy","salary":6000}}`)
	require.Equal(t, http.StatusOK, r.status, r.String())
	live := frameOf(t, plain, "Cy")
	require.NotContains(t, live.obj(t), "salary")
	require.EqualValues(t, 6000, frameOf(t, full, "Cy").obj(t)["salary"])

	resumed := openStream(t, e.srv, "/api/projections/employee/events?after="+snap.id, alice).read()
	m := resumed.nextEvent()
	require.Equal(t, "Cy", m.obj(t)["name"])
	require.NotContains(t, m.obj(t), "salary", "the replay hides it too")

	// A projection column with ReadRoles is hidden the same way.
	vote(t, e, alice, "yes")
	plainCounts := openStream(t, e.srv, "/api/projections/vote_counts/events", alice).read()
	fullCounts := openStream(t, e.srv, "/api/projections/vote_counts/events", hr).read()
	require.Equal(t, "reset", plainCounts.nextEvent().event)
	require.Equal(t, "reset", fullCounts.nextEvent().event)
	require.NotContains(t, plainCounts.nextEvent().obj(t), "reviewedBy")
	require.Contains(t, fullCounts.nextEvent().obj(t), "reviewedBy")
}

// frameOf reads s up to the frame of the employee called name (a row may be
// sent again when the feed brings an event the snapshot reflected).
func frameOf(t *testing.T, s *sseStream, name string) sseMsg {
	t.Helper()
	for {
		if m := s.nextEvent(); m.obj(t)["name"] == name {
			return m
		}
	}
}

// Two tenants writing at once: each tenant's channels end with exactly that
// tenant's rows, and no frame names a row of the other.
func TestProjectionChannelTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newTallyEnv(t, 0)
	start(t, feed(t, e))
	toks := map[uuid.UUID]string{tenantA: token(t, "alice", tenantA, "User"), tenantB: token(t, "bob", tenantB, "User")}
	choice := map[uuid.UUID]string{tenantA: "a", tenantB: "b"}

	type channel struct {
		tenant uuid.UUID
		name   string
		key    func(map[string]any) string
		s      *sseStream
		rep    *replica
	}
	var chans []*channel
	for tenant, tok := range toks {
		for name, key := range map[string]func(map[string]any) string{"vote": keyOf("id"), "vote_counts": keyOf("choice")} {
			c := &channel{tenant: tenant, name: name, key: key, rep: newReplica(t, key)}
			c.s = openStream(t, e.srv, "/api/projections/"+name+"/events", tok).read()
			chans = append(chans, c)
		}
	}

	var wg sync.WaitGroup
	ids := map[uuid.UUID][]string{}
	var mu sync.Mutex
	for tenant, tok := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				r, err := send(e.srv, request{path: "/api/write", token: tok,
					body: strings.NewReader(fmt.Sprintf(`{"type":"vote.create","payload":{"choice":"%s%d"}}`, choice[tenant], i%3))})
				if err != nil || r.status != http.StatusOK {
					t.Errorf("vote: %v %v", err, r)
					return
				}
				var body struct {
					Data struct {
						ID string `json:"id"`
					} `json:"data"`
				}
				_ = json.Unmarshal(r.body, &body)
				mu.Lock()
				ids[tenant] = append(ids[tenant], body.Data.ID)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	for _, c := range chans {
		c.rep.until(c.s, freshRows(t, e, toks[c.tenant], c.name, c.key))
		other := tenantB
		if c.tenant == tenantB {
			other = tenantA
		}
		for _, row := range c.rep.rows {
			if c.name == "vote" {
				require.NotContains(t, ids[other], row["id"], "a row of the other tenant")
			} else {
				require.Equal(t, choice[c.tenant], row["choice"].(string)[:1], "a count of the other tenant")
			}
		}
	}
	require.Len(t, chans[0].rep.rows, map[string]int{"vote": 10, "vote_counts": 3}[chans[0].name])
}

// Opening a channel needs a signed-in caller the projection's rule allows,
// a known projection with a table and a well-formed resume point; each
// refusal is the usual problem.
func TestProjectionChannelRefusals(t *testing.T) {
	t.Parallel()
	e := newTallyEnv(t, 0)
	alice := token(t, "alice", tenantA, "User")
	r := e.do(get("/api/projections/vote/events", ""))
	requireProblem(t, r, http.StatusUnauthorized, "unauthenticated", "")
	require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
	requireProblem(t, e.do(get("/api/projections/nope/events", alice)), http.StatusNotFound, "not_found", "projection_not_found")
	requireProblem(t, e.do(get("/api/projections/vote_audit/events", alice)), http.StatusForbidden, "access_denied", "")
	requireProblem(t, e.do(get("/api/projections/vote_log/events", alice)), http.StatusForbidden, "access_denied", "")
	requireProblem(t, e.do(get("/api/projections/vote/events?after=x", alice)), http.StatusBadRequest, "validation_error", "invalid_resume_point")
	requireProblem(t, e.do(with(get("/api/projections/vote/events", alice), "Last-Event-ID", "-3")), http.StatusBadRequest, "validation_error", "invalid_resume_point")

	e.s.CloseStreams()
	requireProblem(t, e.do(get("/api/projections/vote/events", alice)), http.StatusServiceUnavailable, "unavailable", "shutting_down")
}
