package tasks_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// The typed forms answer byte for byte what the map forms answered: the
// bodies of task.complete and task.stats over HTTP equal the answers built
// the way the handlers built them before (the rows read as maps and copied
// into the result structs by hand).
func TestTypedFormsAnswerAsBefore(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{tasks.Feature})
	tenant := uuid.New()
	alice := srv.As(t, tenant, "alice", "User")
	type created struct {
		ID      uuid.UUID `json:"id"`
		Version int       `json:"version"`
	}
	first := kumikotest.Data[created](alice.Write("task.create", map[string]any{"title": "one"}))
	kumikotest.Data[created](alice.Write("task.create", map[string]any{"title": "two"}))

	done := alice.Command("task.complete", tasks.CompleteTask{ID: first.ID, Version: first.Version})
	require.Equal(t, 200, done.Status, "%s", done.Body)
	before, err := json.Marshal(map[string]any{"data": tasks.Completed{ID: first.ID, Version: 3}})
	require.NoError(t, err)
	require.Equal(t, string(before), string(done.Body))

	stats := alice.Query("task.stats", map[string]any{})
	require.Equal(t, 200, stats.Status, "%s", stats.Body)
	rows, err := srv.Pool.Query(context.Background(), "SELECT month, created, completed FROM tasks_by_month WHERE tenant_id = $1 ORDER BY month DESC", tenant)
	require.NoError(t, err)
	maps, err := pgx.CollectRows(rows, pgx.RowToMap)
	require.NoError(t, err)
	require.NotEmpty(t, maps)
	out := make([]tasks.MonthStats, len(maps))
	for i, r := range maps {
		out[i] = tasks.MonthStats{Month: r["month"].(string), Created: r["created"].(int64), Completed: r["completed"].(int64)}
	}
	before, err = json.Marshal(map[string]any{"data": out})
	require.NoError(t, err)
	require.Equal(t, string(before), string(stats.Body))
}
