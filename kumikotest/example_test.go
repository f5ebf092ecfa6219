package kumikotest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// A feature's test as it reads in the feature's own package: the feature on
// a fresh database, a write as a user of one tenant through the executor,
// and a check of what a query now answers. In a test, t is the test's own
// (func TestCreateTask(t *testing.T)); t.Parallel() is safe, each test has
// its own schema.
func ExampleNewApp() {
	var t *testing.T
	ctx := context.Background()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	alice := kumikotest.User(uuid.New(), "alice", "User")

	created, err := app.Executor.Write(ctx, alice,
		pipeline.Request{Type: "task.create", Payload: json.RawMessage(`{"title":"Write docs"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var task struct {
		ID string `json:"id"`
	}
	raw, _ := json.Marshal(created)
	if err := json.Unmarshal(raw, &task); err != nil {
		t.Fatal(err)
	}

	detail, err := app.Executor.Query(ctx, alice,
		pipeline.Request{Type: "task.detail", Payload: json.RawMessage(fmt.Sprintf(`{"id":%q}`, task.ID))})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = json.Marshal(detail)
	var got struct {
		Title string `json:"title"`
		Done  bool   `json:"done"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Title != "Write docs" || got.Done {
		t.Fatalf("task.detail = %+v, want the new task, not done", got)
	}
}
