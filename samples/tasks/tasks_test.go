package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

var (
	ctx    = context.Background()
	tenant = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	user   = kumikotest.User(tenant, "u-1", "User")
)

func do(t *testing.T, run func(context.Context, pipeline.Caller, pipeline.Request) (any, error), typ, payload string) (map[string]any, error) {
	t.Helper()
	out, err := run(ctx, user, pipeline.Request{Type: typ, Payload: json.RawMessage(payload)})
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(out)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m, nil
}

func TestCompleteTask(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	d := app.Executor

	task, err := do(t, d.Write, "task.create", `{"title":"Write docs"}`)
	require.NoError(t, err)
	id := task["id"].(string)

	// A stale version is refused before anything is written.
	_, err = do(t, d.Command, "task.complete", fmt.Sprintf(`{"id":%q,"version":7}`, id))
	var pe *pipeline.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "version_conflict", pe.Code())

	done, err := do(t, d.Command, "task.complete", fmt.Sprintf(`{"id":%q,"version":1,"note":"shipped"}`, id))
	require.NoError(t, err)
	require.Equal(t, float64(3), done["version"], "task.completed and task.updated")

	detail, err := do(t, d.Query, "task.detail", fmt.Sprintf(`{"id":%q}`, id))
	require.NoError(t, err)
	require.Equal(t, true, detail["done"])
	require.Equal(t, float64(3), detail["version"])

	_, err = do(t, d.Command, "task.complete", fmt.Sprintf(`{"id":%q,"version":3}`, id))
	require.True(t, errors.As(err, &pe))
	require.Equal(t, "unprocessable", pe.Code())
	require.Equal(t, "already_done", pe.Reason())

	out, err := d.Query(ctx, user, pipeline.Request{Type: "task.stats", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	month := time.Now().UTC().Format("2006-01")
	require.Equal(t, []tasks.MonthStats{{Month: month, Created: 1, Completed: 1}}, out)

	var stored map[string]any
	require.NoError(t, app.Pool.QueryRow(ctx, "SELECT payload FROM kumiko_events WHERE type = 'task.completed'").Scan(&stored))
	require.Equal(t, map[string]any{"completedBy": "u-1", "note": "shipped"}, stored)
}

// A task.completed event stored by an older release (version 1) reads as
// version 3.
func TestOldCompletedEventsAreUpcast(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	task, err := do(t, app.Executor.Write, "task.create", `{"title":"Old"}`)
	require.NoError(t, err)
	app.Exec(t, `INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload)
		VALUES ($1, 'task', $2, 2, 'task.completed', 1, '{"by":"u-0"}')`, task["id"], tenant)

	evs, err := app.Store.Load(ctx, tenant, uuid.MustParse(task["id"].(string)), eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, 3, evs[1].EventVersion)
	require.JSONEq(t, `{"completedBy":"u-0","note":""}`, string(evs[1].Payload))
}
