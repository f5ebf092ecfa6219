package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/user"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/ops"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// inProcess runs the commands of an app of features (nil: the generic
// binary's) on app's database, in this process.
func inProcess(app *kumikotest.App, features []*feature.Feature) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		root := ops.Generic()
		if features != nil {
			root = ops.NewCommand(ops.App{Name: "ledger", Features: features,
				Resolve: func(s ops.Settings) ops.Settings { s.Name = "ledger"; return s }})
		}
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append(args, "--database-url", app.URL, "--schema", app.Schema))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
}

// A partitioned consumer that parks a failing stream: `consumer list`
// shows its partitions, their owner and the parked count; `consumer parked`
// the stream; retry-parked and skip-parked ask the running dispatcher to
// go on with it; repartition changes the count while it runs.
func TestConsumerParkedAndRepartitionCommands(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, nil)
	cli := inProcess(app, nil)
	ctx := context.Background()

	var (
		mu      sync.Mutex
		broken  = map[uuid.UUID]bool{}
		handled = map[int64]int{}
	)
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "pod-a", PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}, consumer.Consumer{
		Name: "mailer", Partitions: 2, Park: true, MaxAttempts: 1,
		Handle: func(_ context.Context, _ pgx.Tx, ev eventstore.Event) error {
			mu.Lock()
			defer mu.Unlock()
			if broken[ev.AggregateID] {
				return errors.New("smtp refuses " + ev.AggregateID.String())
			}
			handled[ev.ID]++
			return nil
		},
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })

	tenant := uuid.New()
	bad, other := uuid.New(), uuid.New()
	mu.Lock()
	broken[bad], broken[other] = true, true
	mu.Unlock()
	appendTo := func(id uuid.UUID, version int) int64 {
		t.Helper()
		res, err := app.Store.Append(ctx, eventstore.Stream{TenantID: tenant, AggregateType: "mail", AggregateID: id}, version,
			eventstore.NewEvent{Type: "mail.queued", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		return res.Events[0].ID
	}
	first := appendTo(bad, 0)
	second := appendTo(bad, 1)
	skipped := appendTo(other, 0)
	after := appendTo(other, 1)
	fine := appendTo(uuid.New(), 0)

	parked := func(name string) []consumer.ParkedStream {
		t.Helper()
		out, err := cli("consumer", "parked", name, "--json")
		require.NoError(t, err, out)
		var list []consumer.ParkedStream
		require.NoError(t, json.Unmarshal([]byte(out), &list))
		return list
	}
	require.Eventually(t, func() bool { return len(parked("")) == 2 }, 30*time.Second, 20*time.Millisecond, "both broken streams park")
	list := parked("mailer")
	require.Len(t, list, 2)
	var p consumer.ParkedStream
	for _, x := range list {
		if x.Stream == bad.String() {
			p = x
		}
	}
	require.Equal(t, first, p.EventID)
	require.Equal(t, "mail.queued", p.EventType)
	require.Contains(t, p.LastError, "smtp refuses")
	require.Equal(t, consumer.PartitionInstance(consumer.PartitionOf(bad.String(), 2)), p.Shard)
	require.Empty(t, parked("nobody"))
	out, err := cli("consumer", "parked", "nobody")
	require.NoError(t, err)
	require.Equal(t, "no parked streams\n", out)
	out, err = cli("consumer", "parked")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^CONSUMER\s+SHARD\s+STREAM\s+EVENT\s+TYPE\s+ATTEMPTS\s+SINCE\s+ACTION\s+ERROR$`, out)
	require.Regexp(t, fmt.Sprintf(`(?m)^mailer\s+%s\s+%s\s+%d\s+mail\.queued\s+1\s+\S+\s+-\s+event %d \(mail\.queued\): smtp refuses`, p.Shard, bad, first, first), out)

	// The list: two partitions owned by the running process, the parked
	// streams counted on theirs.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled[fine] == 1
	}, 30*time.Second, 20*time.Millisecond, "the other streams go on")
	out, err = cli("consumer", "list", "--json")
	require.NoError(t, err)
	var shards []consumer.ShardStatus
	require.NoError(t, json.Unmarshal([]byte(out), &shards))
	require.Len(t, shards, 2)
	total := 0
	for k, s := range shards {
		require.Equal(t, consumer.PartitionInstance(k), s.InstanceID)
		require.Equal(t, k, s.Partition)
		require.Equal(t, 2, s.Partitions)
		require.Equal(t, "pod-a", s.Owner)
		total += s.Parked
	}
	require.Equal(t, 2, total)
	out, err = cli("consumer", "list")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^NAME\s+INSTANCE\s+PARTITION\s+OWNER\s+LIVENESS\s+STATUS\s+.*\s+ATTEMPTS\s+PARKED\s+STUCK\s`, out)
	require.Regexp(t, `(?m)^mailer\s+__partition_0__\s+0/2\s+pod-a\s+-\s+\w+\s`, out)
	require.Regexp(t, `(?m)^mailer\s+__partition_1__\s+1/2\s+pod-a\s+-\s+\w+\s`, out)
	out, err = cli("consumer", "status", "mailer", "--instance", p.Shard)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^mailer\s+`+p.Shard+`\s+\d/2\s+pod-a\s`, out)

	// A retry while the handler still fails: requested, carried out by the
	// next pass, parked again with the same event.
	out, err = cli("consumer", "retry-parked", "mailer", bad.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "retry of stream "+bad.String()+" of consumer mailer requested; the next pass of shard "+p.Shard+" carries it out")
	require.Regexp(t, `(?m)^mailer\s+\S+\s+`+bad.String()+`\s+\d+\s+mail\.queued\s+1\s+\S+\s+retry\s`, out)
	require.Eventually(t, func() bool {
		for _, x := range parked("mailer") {
			if x.Stream == bad.String() {
				return x.Action == "" && x.EventID == first
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the retry failed: still parked")

	// Fixed: the retry hands the stream's events to the handler, in order;
	// the other stream's failing event is skipped, its later one handled.
	mu.Lock()
	delete(broken, bad)
	delete(broken, other)
	mu.Unlock()
	out, err = cli("consumer", "retry-parked", "mailer", bad.String(), "--json")
	require.NoError(t, err, out)
	var req consumer.ParkedStream
	require.NoError(t, json.Unmarshal([]byte(out), &req))
	require.Equal(t, "retry", req.Action)
	out, err = cli("consumer", "skip-parked", "mailer", other.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "skip of stream "+other.String()+" of consumer mailer requested")
	require.Eventually(t, func() bool { return len(parked("mailer")) == 0 }, 30*time.Second, 20*time.Millisecond)
	mu.Lock()
	require.Equal(t, map[int64]int{first: 1, second: 1, after: 1, fine: 1}, handled, "event %d skipped", skipped)
	mu.Unlock()

	_, err = cli("consumer", "skip-parked", "mailer", bad.String())
	require.EqualError(t, err, "stream_not_parked: consumer mailer has no parked stream "+bad.String())
	_, err = cli("consumer", "retry-parked", "mailer")
	require.ErrorContains(t, err, "accepts 2 arg(s)")

	// Repartition while the dispatcher runs.
	out, err = cli("consumer", "repartition", "mailer", "3", "--by", "olga", "--wait", "20s")
	require.NoError(t, err, out)
	require.Regexp(t, `^repartitioned consumer mailer from 2 to 3 partitions at event \d+ by olga\n$`, out)
	out, err = cli("consumer", "list", "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &shards))
	require.Len(t, shards, 3)
	require.Equal(t, 3, shards[2].Partitions)
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_consumer_audit WHERE name = 'mailer' AND action = 'repartition' AND actor = 'olga'`))
	out, err = cli("consumer", "repartition", "mailer", "1", "--json")
	require.NoError(t, err, out)
	var rp consumer.RepartitionResult
	require.NoError(t, json.Unmarshal([]byte(out), &rp))
	require.Equal(t, consumer.RepartitionResult{Name: "mailer", From: 3, To: 1, Cursor: rp.Cursor}, rp)
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_consumer_audit WHERE name = 'mailer' AND action = 'repartition' AND actor = $1`, osUser(t)))

	_, err = cli("consumer", "repartition", "mailer", "0")
	require.EqualError(t, err, "invalid_operation: the partition count must be between 1 and 256")
	_, err = cli("consumer", "repartition", "mailer", "many")
	require.EqualError(t, err, `partition count "many" is not a number`)
	_, err = cli("consumer", "repartition", "nope", "2")
	require.EqualError(t, err, "consumer_not_found: no consumer nope")
}

// osUser is the OS user the commands record when --by is not given.
func osUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	require.NoError(t, err)
	return u.Username
}

// mailed counts the events the side-effect projection entry_mail saw.
var mailed sync.Map // tenant → *int

// ledger keeps entries in a projection table (entry_log) and mails them
// (entry_mail, a projection without a table).
func ledgerFeature() *feature.Feature {
	return feature.Define("ledger", func(r *feature.Registrar) {
		r.Entity("entry", feature.Fields{"note": feature.Text().Required().MaxLen(100)})
		r.Crud("entry", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name: "entry_log",
			Table: &feature.TableDef{
				Name: "entry_log",
				Columns: []feature.Column{
					{Name: "tenant_id", Type: "uuid", NotNull: true},
					{Name: "entry_id", Type: "uuid", NotNull: true},
				},
				PrimaryKey: []string{"tenant_id", "entry_id"},
			},
			Apply: map[string]feature.ApplyFunc{"entry.created": func(ctx feature.ApplyContext, e feature.Event) error {
				_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO `+ctx.Table()+` (tenant_id, entry_id) VALUES ($1, $2)`, ctx.Tenant(), e.AggregateID)
				return err
			}},
		})
		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name: "entry_mail",
			Apply: map[string]feature.ApplyFunc{"entry.created": func(ctx feature.ApplyContext, _ feature.Event) error {
				n, _ := mailed.LoadOrStore(ctx.Tenant(), new(int))
				*n.(*int)++
				return nil
			}},
		})
	})
}

// `consumer reset` resets a projection with a table from the beginning
// with its table (truncated or rebuilt) only, any other consumer on --yes
// only, and records who did it; the generic binary needs --yes always.
func TestConsumerResetCommand(t *testing.T) {
	t.Parallel()
	ledger := ledgerFeature()
	app := kumikotest.NewApp(t, []*feature.Feature{ledger})
	cli := inProcess(app, []*feature.Feature{ledger})
	ctx := context.Background()
	tenant := uuid.New()
	caller := kumikotest.User(tenant, "wes", "User")
	for _, note := range []string{"one", "two"} {
		_, err := app.Executor.Write(ctx, caller, pipeline.Request{Type: "entry.create", Payload: json.RawMessage(`{"note":"` + note + `"}`)})
		require.NoError(t, err)
	}
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "t"}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))
	catchUp := func() { t.Helper(); kumikotest.CatchUp(t, d, "entry_log", "entry_mail") }
	catchUp()
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM entry_log"))
	var (
		ids   []int64
		times []time.Time
	)
	require.NoError(t, app.Pool.QueryRow(ctx, "SELECT array_agg(id ORDER BY id), array_agg(created_at ORDER BY id) FROM kumiko_events").Scan(&ids, &times))
	require.Len(t, ids, 2)
	refused := func(want string, args ...string) {
		t.Helper()
		out, err := cli(append([]string{"consumer", "reset"}, args...)...)
		require.Error(t, err, out)
		require.Contains(t, err.Error(), want, "%v", args)
	}
	cursor := func(name string) int64 {
		t.Helper()
		st, err := consumer.NewOps(app.Store).Status(ctx, name, "")
		require.NoError(t, err)
		return st.Cursor
	}

	// A projection with a table: from the beginning, with its table.
	unsafe := "reset_unsafe: consumer entry_log is the projection of table entry_log: its rows follow every event up to its cursor, " +
		"so it resets from the beginning with its table: --to beginning with --truncate (empty the table and apply every event again) " +
		"or --rebuild (rebuild it into a shadow table and swap it in)"
	refused(unsafe, "entry_log", "--to", "beginning")
	refused(unsafe, "entry_log", "--to", "beginning", "--yes")
	refused(unsafe, "entry_log", "--to", strconv.FormatInt(ids[0], 10), "--truncate")
	refused(unsafe, "entry_log", "--to", "beginning", "--truncate", "--rebuild")
	require.Equal(t, ids[1], cursor("entry_log"), "a refusal changes nothing")

	out, err := cli("consumer", "reset", "entry_log", "--to", "beginning", "--truncate", "--by", "ada")
	require.NoError(t, err, out)
	require.Equal(t, fmt.Sprintf("reset consumer entry_log to 0 by ada: __shared__ from %d; 0 parked streams dropped\n", ids[1])+
		`table "`+app.Schema+`"."entry_log" truncated`+"\n", out)
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM entry_log"), "the table and the cursor moved together")
	require.Equal(t, int64(0), cursor("entry_log"))
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_consumer_audit WHERE name = 'entry_log' AND action = 'reset'
		AND actor = 'ada' AND detail->>'table' = 'truncated' AND (detail->>'to')::bigint = 0`))
	catchUp()
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM entry_log"))

	app.Exec(t, "DELETE FROM entry_log")
	out, err = cli("consumer", "reset", "entry_log", "--to", "beginning", "--rebuild")
	require.NoError(t, err, out)
	require.Contains(t, out, "rebuilt entry_log (")
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM entry_log"), "rebuilt from the events")
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_consumer_audit WHERE name = 'entry_log'`), "a rebuild records no reset")

	// A consumer without a table: on --yes, to a time.
	refused("reset_unsafe: consumer entry_mail keeps no table: its handler acts outside the projection tables, and a reset to 0 "+
		"delivers the events after it again, so its effects happen again: confirm with --yes", "entry_mail", "--to", "beginning")
	refused("invalid_operation: consumer entry_mail has no table to truncate or rebuild", "entry_mail", "--to", "beginning", "--truncate", "--yes")
	refused("invalid_operation: consumer entry_mail has no table to truncate or rebuild", "entry_mail", "--to", "beginning", "--rebuild")
	between := times[0].Add(times[1].Sub(times[0]) / 2).Format(time.RFC3339Nano)
	out, err = cli("consumer", "reset", "entry_mail", "--to", between, "--yes", "--json")
	require.NoError(t, err, out)
	var res consumer.ResetResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, consumer.ResetResult{Name: "entry_mail", Shards: []string{consumer.SharedInstance}, To: ids[0],
		From: map[string]int64{consumer.SharedInstance: ids[1]}}, res)
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_consumer_audit WHERE name = 'entry_mail' AND actor = $1 AND NOT detail ? 'table'`, osUser(t)))
	n, _ := mailed.Load(tenant)
	require.Equal(t, 2, *n.(*int))
	catchUp()
	require.Equal(t, 3, *n.(*int), "the second entry mailed again")

	refused("consumer_not_found: no consumer nope", "nope", "--to", "beginning", "--yes")
	refused(`--to "soon" is neither beginning, an event id nor an RFC 3339 time`, "entry_mail", "--to", "soon", "--yes")
	refused("--to is required", "entry_mail", "--yes")
	refused(fmt.Sprintf("invalid_operation: position %d lies beyond the newest event %d", ids[1]+100, ids[1]),
		"entry_mail", "--to", strconv.FormatInt(ids[1]+100, 10), "--yes")

	// The generic binary cannot tell a projection's table: --yes, and no
	// --truncate or --rebuild.
	generic := inProcess(app, nil)
	_, err = generic("consumer", "reset", "entry_log", "--to", "beginning", "--truncate")
	require.EqualError(t, err, "invalid_operation: --truncate and --rebuild need the app's own binary, which knows its projections' tables")
	_, err = generic("consumer", "reset", "entry_log", "--to", "beginning")
	require.EqualError(t, err, "reset_unsafe: this binary cannot tell what consumer entry_log wrote; a reset to 0 delivers the events "+
		"after it again and whatever its handler did happens again: confirm with --yes, or reset a projection with the app's binary (--truncate or --rebuild)")
	out, err = generic("consumer", "reset", "entry_mail", "--to", strconv.FormatInt(ids[1], 10), "--yes", "--by", "gus")
	require.NoError(t, err, out)
	require.Equal(t, fmt.Sprintf("reset consumer entry_mail to %d by gus: __shared__ from %d; 0 parked streams dropped\n", ids[1], ids[1]), out)
}
