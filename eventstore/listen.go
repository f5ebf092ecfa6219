package eventstore

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reconnect pauses of Listen: the ceiling doubles from minListenBackoff up
// to maxListenBackoff while connecting keeps failing.
const (
	minListenBackoff = 100 * time.Millisecond
	maxListenBackoff = 5 * time.Second
)

// Listen calls wake on every notification of committed events on
// NotifyChannel, until ctx ends. It runs on a connection of its own, outside
// the pool (a LISTEN holds its connection for as long as it lasts), and calls
// wake as well each time it starts listening, since events may have
// committed while it was not. A lost connection is logged and reopened after
// a pause with jitter, growing from 100ms to 5s while connecting fails.
//
// wake runs on Listen's goroutine, once per notification (notifications are
// coalesced, see NotifyChannel): it should only signal, and read the events
// elsewhere — with Tail, or the gap handling of a dispatcher.
func (s *Store) Listen(ctx context.Context, wake func()) {
	var ceiling time.Duration
	for ctx.Err() == nil {
		listening, err := s.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		if listening {
			ceiling = 0
		}
		ceiling = min(max(2*ceiling, minListenBackoff), maxListenBackoff)
		wait := ceiling/2 + rand.N(ceiling/2+1)
		s.cfg.Logger.Warn("eventstore: listener lost its connection; reconnecting", "channel", s.NotifyChannel(), "in", wait, "err", err)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
}

// listenOnce listens until the connection fails or ctx ends; listening
// reports whether it got as far as LISTEN.
func (s *Store) listenOnce(ctx context.Context, wake func()) (listening bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, s.sql.listen); err != nil {
		return false, err
	}
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, err
		}
		wake()
	}
}
