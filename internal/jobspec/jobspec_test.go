package jobspec_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/jobspec"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"task.remind", "digest-daily", "a1", "mail_out.v2"} {
		require.True(t, jobspec.ValidName(name), name)
	}
	for _, name := range []string{"", "a", "Task", "1task", "task.", "task-", "task remind", "täsk"} {
		require.False(t, jobspec.ValidName(name), name)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	require.Empty(t, jobspec.Settings{}.Check(), "the zero settings are the defaults")
	for _, expr := range []string{"0 7 * * *", "*/5 * * * *", "@daily", "@every 1h"} {
		require.Empty(t, jobspec.Settings{Schedule: expr}.Check(), expr)
	}
	ps := jobspec.Settings{MaxAttempts: -1, UniqueFor: -time.Second, Timeout: -time.Minute, Schedule: "every day"}.Check()
	require.Len(t, ps, 4)
	for i, set := range []jobspec.Setting{jobspec.MaxAttempts, jobspec.UniqueFor, jobspec.Timeout, jobspec.Schedule} {
		require.Equal(t, set, ps[i].Setting)
	}
	require.Equal(t, "MaxAttempts is negative (-1)", ps[0].String())
	require.Equal(t, "UniqueFor is negative (-1s)", ps[1].String())
	require.Equal(t, "Timeout is negative (-1m0s)", ps[2].String())
	require.Contains(t, ps[3].String(), `Schedule "every day": expected exactly 5 fields`)
	for _, expr := range []string{"0 7 * * 8", "* * * *", "0 0 7 * * *", "@fortnightly"} {
		require.Len(t, jobspec.Settings{Schedule: expr}.Check(), 1, expr)
	}
}
