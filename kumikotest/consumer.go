package kumikotest

import (
	"context"
	"testing"

	"github.com/kumiko-go/kumiko/consumer"
)

// CatchUp runs passes of the named consumers of d, one after the other,
// each until a pass finds nothing more to read, failing the test on the
// first error. It needs no started dispatcher (d.Register is enough), so a
// test decides exactly when events are delivered.
func CatchUp(t testing.TB, d *consumer.Dispatcher, names ...string) {
	t.Helper()
	for _, n := range names {
		for {
			res, err := d.RunPass(context.Background(), n)
			if err != nil {
				t.Fatalf("kumikotest: consumer %s: %v", n, err)
			}
			if !res.More {
				break
			}
		}
	}
}
