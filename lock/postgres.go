package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresConfig configures a Postgres locker. The zero value is usable.
type PostgresConfig struct {
	// Namespace keeps the locks of applications that share one database
	// apart: the advisory key is hashed from Namespace and the lock's name.
	// Default "kumiko".
	Namespace string
	// CheckInterval is how often a holder pings its connection, so that
	// Lost closes soon after the connection dropped. Default 5s. A ping
	// unanswered after CheckInterval (2s at least) counts as a dropped
	// connection.
	CheckInterval time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c PostgresConfig) WithDefaults() PostgresConfig {
	if c.Namespace == "" {
		c.Namespace = "kumiko"
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = 5 * time.Second
	}
	return c
}

func (c PostgresConfig) validate() error {
	if c.CheckInterval < 0 {
		return fmt.Errorf("lock: PostgresConfig.CheckInterval is negative (%s)", c.CheckInterval)
	}
	return nil
}

// Postgres is the default Locker: a session advisory lock held on a
// connection opened for it alone and closed by Release, so the pool's
// connections never carry a lock and a holder that crashes frees its locks
// as soon as the server sees its connection drop.
type Postgres struct {
	conn *pgx.ConnConfig
	cfg  PostgresConfig
}

// NewPostgres returns a locker that connects like pool (same server,
// database and credentials) but outside it.
func NewPostgres(pool *pgxpool.Pool, cfg PostgresConfig) (*Postgres, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Postgres{conn: pool.Config().ConnConfig, cfg: cfg}, nil
}

// Acquire implements Locker. A wait above zero waits in the server's lock
// queue (lock_timeout), so waiters are served in order.
func (p *Postgres) Acquire(ctx context.Context, name string, wait time.Duration) (*Held, error) {
	if name == "" {
		return nil, ErrEmptyName
	}
	key := p.cfg.Namespace + ":" + name
	conn, err := pgx.ConnectConfig(ctx, p.conn.Copy())
	if err != nil {
		return nil, fmt.Errorf("lock: acquire %q: connect: %w", name, err)
	}
	ok, err := tryOrWait(ctx, conn, key, wait)
	if err != nil || !ok {
		closeConn(ctx, conn)
		if err != nil {
			return nil, fmt.Errorf("lock: acquire %q: %w", name, err)
		}
		return nil, nil
	}
	return p.hold(ctx, conn, name, key), nil
}

func tryOrWait(ctx context.Context, conn *pgx.Conn, key string, wait time.Duration) (bool, error) {
	if wait <= 0 {
		var ok bool
		err := conn.QueryRow(ctx, sqlTryLock, key).Scan(&ok)
		return ok, err
	}
	ms := max(wait.Milliseconds(), 1)
	if _, err := conn.Exec(ctx, sqlLockTimeout, strconv.FormatInt(ms, 10)); err != nil {
		return false, err
	}
	_, err := conn.Exec(ctx, sqlLock, key)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return false, nil
	}
	return err == nil, err
}

// minPingTimeout is the least time a holder's ping gets: on a busy server
// or machine, a slow answer is not a dropped connection, and giving the
// lock up for it would hand it to another locker for nothing.
const minPingTimeout = 2 * time.Second

// hold watches conn until Release: a failed ping means the server dropped
// the session and with it the lock.
func (p *Postgres) hold(ctx context.Context, conn *pgx.Conn, name, key string) *Held {
	var mu sync.Mutex // conn is used by the watcher and by Release
	stop := make(chan struct{})
	done := make(chan struct{})
	var h *Held
	h = newHeld(name, func(ctx context.Context) error {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		defer closeConn(ctx, conn)
		select {
		case <-h.Lost():
			return nil // the session is gone, and its lock with it
		default:
		}
		if _, err := conn.Exec(ctx, sqlUnlock, key); err != nil {
			return fmt.Errorf("lock: release %q: %w", name, err)
		}
		return nil
	})
	watchCtx := context.WithoutCancel(ctx)
	go func() {
		defer close(done)
		t := time.NewTicker(p.cfg.CheckInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			mu.Lock()
			pctx, cancel := context.WithTimeout(watchCtx, max(p.cfg.CheckInterval, minPingTimeout))
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				closeConn(watchCtx, conn) // whatever the server still holds goes with it
				mu.Unlock()
				h.markLost()
				return
			}
			mu.Unlock()
		}
	}()
	return h
}

func closeConn(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = conn.Close(cctx)
}
