package jobs_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(childDispatcherEnv); url != "" {
		runChildDispatcher(url) // a subprocess of TestEventJobsSurviveSIGKILL
		return
	}
	if url := os.Getenv(childWorkerEnv); url != "" {
		runChildWorker(url) // a subprocess of TestCrashedProcessesJobIsRescued
		return
	}
	goleak.VerifyTestMain(m)
}
