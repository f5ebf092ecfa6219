package lock_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		runChild(mode) // a subprocess of the process tests
		return
	}
	goleak.VerifyTestMain(m)
}
