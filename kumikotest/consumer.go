package kumikotest

import (
	"context"
	"testing"
	"time"

	"github.com/kumiko-go/kumiko/consumer"
)

// CatchUp runs passes of the named consumers of d, one after the other,
// each until a pass finds nothing more to read, failing the test on the
// first error, a pass's or an event's. It needs no started dispatcher (d.Register is enough), so a
// test decides exactly when events are delivered. A shard another
// transaction holds (a pass still rolling back) is waited for, up to
// catchUpWait.
func CatchUp(t testing.TB, d *consumer.Dispatcher, names ...string) {
	t.Helper()
	for _, n := range names {
		held := time.Now()
		for {
			res, err := d.RunPass(context.Background(), n)
			if err != nil {
				t.Fatalf("kumikotest: consumer %s: %v", n, err)
			}
			if res.Failed != nil {
				t.Fatalf("kumikotest: consumer %s failed at cursor %d: %v", n, res.Cursor, res.Failed)
			}
			if !res.Locked {
				if time.Since(held) > catchUpWait {
					t.Fatalf("kumikotest: consumer %s: its shard stayed held by another transaction for %s", n, catchUpWait)
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			held = time.Now()
			if !res.More {
				break
			}
		}
	}
}

// catchUpWait bounds how long CatchUp waits for a shard another
// transaction holds.
const catchUpWait = 10 * time.Second

// CatchUpAll delivers every committed event to every multi-stream
// projection of the app (Executor.Consumers), each until it has read the
// whole log, so a test can assert what they wrote. Each call sees the events
// committed before it.
func (a *App) CatchUpAll(t testing.TB) {
	t.Helper()
	if a.dispatcher == nil {
		cs := a.Executor.Consumers()
		d, err := consumer.New(a.Store, consumer.Config{InstanceID: "kumikotest"}, cs...)
		if err != nil {
			t.Fatalf("kumikotest: %v", err)
		}
		if err := d.Register(context.Background()); err != nil {
			t.Fatalf("kumikotest: %v", err)
		}
		a.dispatcher = d
		for _, c := range cs {
			a.consumers = append(a.consumers, c.Name)
		}
	}
	CatchUp(t, a.dispatcher, a.consumers...)
}
