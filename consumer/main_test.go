package consumer_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/uuid"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(childDispatcherEnv); url != "" {
		runChildDispatcher(url) // a subprocess of TestDispatcherSurvivesSIGKILL
		return
	}
	if id := os.Getenv(childInstanceEnv); id != "" {
		runChildInstance(id, os.Getenv(childInstanceURL)) // a subprocess of TestStaleInstanceIsCollected
		return
	}
	if id := os.Getenv(childPartitionEnv); id != "" {
		runChildPartition(id, os.Getenv(childPartitionURL)) // a subprocess of TestPartitionsAcrossProcesses
		return
	}
	goleak.VerifyTestMain(m)
}

var (
	tenantA = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	ctx     = context.Background()
)
