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
	goleak.VerifyTestMain(m)
}
