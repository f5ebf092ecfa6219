package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/pipeline"
)

// The default number of as-of lists at once follows the cores: one per
// four, at least one and at most DefaultAsOfConcurrency.
func TestDefaultAsOfConcurrencyFor(t *testing.T) {
	t.Parallel()
	for procs, want := range map[int]int{0: 1, 1: 1, 2: 1, 4: 1, 7: 1, 8: 2, 16: 2, 128: 2} {
		require.Equal(t, want, pipeline.DefaultAsOfConcurrencyFor(procs), "GOMAXPROCS %d", procs)
	}
}

// An executor with no AsOfConcurrency runs as many as-of lists at once as
// DefaultAsOfConcurrencyFor(GOMAXPROCS) allows and refuses one more.
func TestAsOfListDefaultConcurrency(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	write(t, app, alice, "task.create", `{"title":"then"}`)
	d, err := pipeline.New(app.Registry, app.Store, pipeline.Config{AsOfTimeout: time.Minute})
	require.NoError(t, err)
	asOf := req("task.list", fmt.Sprintf(`{"asOf":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)))

	n := pipeline.DefaultAsOfConcurrencyFor(runtime.GOMAXPROCS(0))
	waiting, release := holdEvents(t, app)
	held := make(chan error, n)
	for range n {
		go func() { _, err := d.Query(ctx, alice, asOf); held <- err }()
	}
	waiting(n)
	quick, cancel := context.WithTimeout(ctx, 10*time.Second) // fails cleanly instead of hanging
	defer cancel()
	_, err = d.Query(quick, bob, asOf)
	c, pe := code(t, err)
	require.Equal(t, pipeline.CodeUnavailable, c, err)
	require.Equal(t, "as_of_busy", pe.Reason(), "list %d of a default of %d", n+1, n)
	release()
	for range n {
		require.NoError(t, <-held)
	}
}

// A fold split into chunks of a few events, so chunks end in the middle of
// streams whose events interleave, answers what one chunk holding the whole
// history answers, and what the detail as of the same time answers for
// each row: as of a time in the middle of the history and after its end.
func TestAsOfListChunkedFold(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	const tasks, updates = 9, 8
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"task %d"}`, i))["id"].(string)
	}
	var mid time.Time
	for v := 1; v <= updates; v++ {
		for i, id := range ids {
			write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":%d,"changes":{"title":"task %d v%d","done":%t}}`, id, v, i, v+1, v%2 == 0))
		}
		if v == updates/2 {
			mid = rdLastEventTime(t, app)
		}
	}
	write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q,"version":%d}`, ids[3], updates+1))
	write(t, app, bob, "task.create", `{"title":"another tenant's"}`) // in the chunks, not in the rows

	list := func(chunk int, asOf time.Time, includeDeleted bool) []map[string]any {
		t.Helper()
		d, err := pipeline.New(app.Registry, app.Store, pipeline.Config{})
		require.NoError(t, err)
		pipeline.SetAsOfChunk(d, chunk)
		out, err := d.Query(ctx, alice, req("task.list",
			fmt.Sprintf(`{"asOf":%q,"includeDeleted":%t,"limit":100}`, rdAt(asOf), includeDeleted)))
		require.NoError(t, err)
		rows, _ := row(t, out)["rows"].([]any)
		got := make([]map[string]any, len(rows))
		for i, r := range rows {
			got[i] = r.(map[string]any)
		}
		return got
	}
	for _, asOf := range []time.Time{mid, rdLastEventTime(t, app)} {
		for _, deleted := range []bool{false, true} {
			whole := list(1<<20, asOf, deleted)
			wantRows := tasks
			if !deleted && asOf != mid {
				wantRows-- // ids[3] is deleted at the end
			}
			require.Len(t, whole, wantRows, "as of %s, includeDeleted %t", rdAt(asOf), deleted)
			for _, chunk := range []int{1, 2, 7, 10} {
				require.Equal(t, whole, list(chunk, asOf, deleted), "chunks of %d as of %s, includeDeleted %t", chunk, rdAt(asOf), deleted)
			}
			for _, r := range whole {
				if r["deletedAt"] != nil {
					continue // a detail does not show a deleted row
				}
				require.Equal(t, rdDetail(t, app, alice, "task", rdDetailAsOf(r["id"].(string), asOf)), r, "the detail as of the same time")
			}
		}
	}
	require.Equal(t, fmt.Sprintf("task 0 v%d", updates/2+1), rowByID(list(3, mid, false), ids[0])["title"], "the middle of the history")
}

func rowByID(rows []map[string]any, id string) map[string]any {
	for _, r := range rows {
		if r["id"] == id {
			return r
		}
	}
	return nil
}
