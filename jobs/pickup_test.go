package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// Every committed enqueue wakes the workers, also one that River's own
// insert notification leaves out: River sends it at most once per
// FetchCooldown and process, and the enqueuing process here has a
// cooldown of an hour, so only its first enqueue would be notified. The
// working process polls once an hour: a job that is not notified waits
// that long.
func TestEveryEnqueueWakesTheWorkers(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ran := make(chan string, 8)
	job := func(name string) jobs.Job {
		return jobs.Job{Name: name, On: []string{"thing.made"}, Work: func(_ context.Context, run jobs.Run) error {
			ran <- run.Name
			return nil
		}}
	}
	hour := jobs.Config{PollInterval: time.Hour}
	newRunner(t, db, hour, true, job("woken"))
	hour.FetchCooldown = time.Hour
	enqueuer := newRunner(t, db, hour, false, job("woken"))

	await := func(what string) {
		t.Helper()
		select {
		case <-ran:
		case <-time.After(30 * time.Second): // the next poll is an hour away
			t.Fatalf("%s was not picked up", what)
		}
	}
	for _, what := range []string{"the first enqueue (River notifies it)", "the second enqueue (River's limiter drops its notification)"} {
		_, err := enqueuer.Enqueue(t.Context(), "woken", nil, jobs.Options{})
		require.NoError(t, err)
		await(what)
	}

	c, _ := enqueuer.Consumer()
	d, err := consumer.New(db.Store, consumer.Config{InstanceID: "d"}, c)
	require.NoError(t, err)
	require.NoError(t, d.Register(t.Context()))
	appendBurst(t, db.Store, 1)
	res, err := d.RunPass(t.Context(), jobs.ConsumerName)
	require.NoError(t, err)
	require.Equal(t, 1, res.Handled)
	await("the job the event trigger enqueued")
}
