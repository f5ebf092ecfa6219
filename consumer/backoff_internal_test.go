package consumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The retry backoff doubles its ceiling from minBackoff to maxBackoff and
// pauses a random time in the upper half of it, so processes that failed
// together spread out.
func TestBackoffIsBoundedAndJittered(t *testing.T) {
	t.Parallel()
	var ceiling time.Duration
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for _, w := range want {
		var wait time.Duration
		ceiling, wait = backoff(ceiling)
		require.Equal(t, w, ceiling)
		require.GreaterOrEqual(t, wait, ceiling/2)
		require.LessOrEqual(t, wait, ceiling)
	}

	waits := map[time.Duration]bool{}
	for range 100 {
		next, wait := backoff(maxBackoff)
		require.Equal(t, maxBackoff, next)
		require.GreaterOrEqual(t, wait, maxBackoff/2)
		require.LessOrEqual(t, wait, maxBackoff)
		waits[wait] = true
	}
	require.Greater(t, len(waits), 90, "successive waits differ")
}
