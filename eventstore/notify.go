package eventstore

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// notifier sends the post-commit wake-up. A transactional NOTIFY serialises
// every committing writer on Postgres' notify queue lock; sending it after the
// commit on a separate statement, coalesced to at most one in flight and one
// per notifyInterval, keeps appends at full speed and still never announces an
// uncommitted event.
type notifier struct {
	pool    *pgxpool.Pool
	channel string
	log     *slog.Logger

	mu      sync.Mutex
	pending int64 // highest committed id not yet announced; 0 = none
	running bool
	wg      sync.WaitGroup
	subs    map[chan struct{}]struct{} // in-process listeners
}

// committed records that events up to maxID are committed and makes sure a
// sender goroutine is running. It never blocks on the database.
func (n *notifier) committed(ctx context.Context, maxID int64) {
	if maxID <= 0 {
		return
	}
	n.mu.Lock()
	for ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	n.pending = max(n.pending, maxID)
	if n.running {
		n.mu.Unlock()
		return
	}
	n.running = true
	n.wg.Add(1)
	n.mu.Unlock()
	go n.run(context.WithoutCancel(ctx))
}

func (n *notifier) run(ctx context.Context) {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		id := n.pending
		if id == 0 {
			n.running = false
			n.mu.Unlock()
			return
		}
		n.pending = 0
		n.mu.Unlock()

		sendCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := n.pool.Exec(sendCtx, "SELECT pg_notify($1, $2)", n.channel, strconv.FormatInt(id, 10))
		cancel()
		if err != nil {
			// Consumers fall back to polling; the events themselves are safe.
			n.log.Warn("eventstore: wake-up notification failed", "channel", n.channel, "err", err)
		}
		// Commits arriving meanwhile share the next notification.
		time.Sleep(notifyInterval)
	}
}

func (n *notifier) wait() { n.wg.Wait() }

func (n *notifier) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.subs == nil {
		n.subs = map[chan struct{}]struct{}{}
	}
	n.subs[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.subs, ch)
		n.mu.Unlock()
	}
}

// notifyInterval bounds the notification rate to what listeners need: a
// wake-up at most this much later, instead of one statement per commit.
const notifyInterval = 2 * time.Millisecond
