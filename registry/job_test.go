package registry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

type digestArgs struct {
	Day string `json:"day"`
}

func digest(feature.JobContext, digestArgs) error { return nil }

// A job's name and settings are checked by Build, with the contract the
// runner checks (internal/jobspec): a cron expression that does not parse
// is a boot error naming the feature and the job, not a failure later at
// server wiring.
func TestJobSettingsAreBootErrors(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(f("a", func(r *feature.Registrar) {
		r.Job("digest.daily", digestArgs{}, digest, feature.Cron("every day"))
		r.Job("digest.weekly", digestArgs{}, digest, feature.Cron("0 7 * * 8"))
		r.Job("digest.bounds", digestArgs{}, digest, feature.JobAttempts(-1), feature.UniqueFor(-time.Second))
		r.Job("Digest", digestArgs{}, digest)
		r.Job("d", digestArgs{}, digest)
		r.Job("digest.", digestArgs{}, digest)
	}))
	require.Nil(t, reg)
	requireBootErrors(t, err,
		want{"a", `job "digest.daily"`, registry.RuleJob, `Cron "every day": expected exactly 5 fields`},
		want{"a", `job "digest.weekly"`, registry.RuleJob, `Cron "0 7 * * 8"`},
		want{"a", `job "digest.bounds"`, registry.RuleJob, "JobAttempts is negative (-1)"},
		want{"a", `job "digest.bounds"`, registry.RuleJob, "UniqueFor is negative (-1s)"},
		want{"a", `job "Digest"`, registry.RuleName, "job names are lowercase letters"},
		want{"a", `job "d"`, registry.RuleName, "ending with a letter or digit"},
		want{"a", `job "digest."`, registry.RuleName, "job names are"},
	)
	require.Len(t, registry.AllBootErrors(err), 7, "one error per problem: %v", err)
}

// Zero settings mean the runner's defaults; every schedule the runner
// accepts passes Build.
func TestJobSettingsThatFitPass(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(f("a", func(r *feature.Registrar) {
		r.Job("digest.daily", digestArgs{}, digest, feature.Cron("0 7 * * *"), feature.JobAttempts(3),
			feature.UniqueFor(time.Hour), feature.JobTimeout(30*time.Second))
		r.Job("digest.hourly", digestArgs{}, digest, feature.Cron("@every 1h"), feature.JobAttempts(0))
		r.Job("digest.nightly", digestArgs{}, digest, feature.Cron("@daily"))
		r.Job("digest_by-hand", digestArgs{}, digest)
	}))
	require.NoError(t, err)
	j, ok := reg.Job("digest.daily")
	require.True(t, ok)
	require.Equal(t, "0 7 * * *", j.Schedule())
	require.Equal(t, 3, j.MaxAttempts())
	require.Equal(t, time.Hour, j.UniqueFor())
	require.Equal(t, 30*time.Second, j.Timeout())
	h, ok := reg.Job("digest_by-hand")
	require.True(t, ok)
	require.Empty(t, h.Schedule())
	require.Zero(t, h.MaxAttempts(), "0 = the runner's default")
	require.Zero(t, h.Timeout(), "0 = the runner's default")
	require.Len(t, reg.Jobs(), 4)
}
