package lock

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConfig configures a Redis locker. The zero value is usable.
type RedisConfig struct {
	// Prefix starts the key of every lock. Default "kumiko:lock:"; give
	// each application its own when several share one Redis.
	Prefix string
	// Lease is how long a lock outlives its last renewal. Default 30s.
	Lease time.Duration
	// Renew is how often the holder renews the lease. Default Lease/3.
	Renew time.Duration
	// Retry is how often a waiting Acquire asks again. Default 50ms.
	Retry time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c RedisConfig) WithDefaults() RedisConfig {
	if c.Prefix == "" {
		c.Prefix = "kumiko:lock:"
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.Renew == 0 {
		c.Renew = c.Lease / 3
	}
	if c.Retry == 0 {
		c.Retry = 50 * time.Millisecond
	}
	return c
}

func (c RedisConfig) validate() error {
	switch {
	case c.Lease < time.Millisecond:
		return fmt.Errorf("lock: RedisConfig.Lease is below a millisecond (%s)", c.Lease)
	case c.Renew <= 0 || c.Renew >= c.Lease:
		return fmt.Errorf("lock: RedisConfig.Renew (%s) must be above zero and below Lease (%s)", c.Renew, c.Lease)
	case c.Retry < 0:
		return fmt.Errorf("lock: RedisConfig.Retry is negative (%s)", c.Retry)
	}
	return nil
}

// The lease scripts act only while the key still holds the holder's token,
// so a holder whose lease expired never renews or deletes a successor's.
var (
	renewScript = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0`)
)

// Redis is a Locker on leases: a key set only if absent, holding a random
// token, expiring after Lease unless the holder renews it. A holder that
// crashes frees its locks when their leases run out; a holder paused past
// its lease sees Lost.
type Redis struct {
	client redis.UniversalClient
	cfg    RedisConfig
}

// NewRedis returns a locker on client.
func NewRedis(client redis.UniversalClient, cfg RedisConfig) (*Redis, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Redis{client: client, cfg: cfg}, nil
}

// Acquire implements Locker. A wait above zero asks again every Retry.
func (r *Redis) Acquire(ctx context.Context, name string, wait time.Duration) (*Held, error) {
	if name == "" {
		return nil, ErrEmptyName
	}
	key, token := r.cfg.Prefix+name, rand.Text()
	deadline := time.Now().Add(wait)
	var timer *time.Timer
	for {
		start := time.Now()
		ok, err := r.client.SetNX(ctx, key, token, r.cfg.Lease).Result()
		if err != nil {
			return nil, fmt.Errorf("lock: acquire %q: %w", name, err)
		}
		if ok {
			return r.hold(ctx, name, key, token, start.Add(r.cfg.Lease)), nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		if timer == nil {
			timer = time.NewTimer(min(r.cfg.Retry, left))
			defer timer.Stop()
		} else {
			timer.Reset(min(r.cfg.Retry, left))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock: acquire %q: %w", name, ctx.Err())
		case <-timer.C:
		}
	}
}

// hold renews the lease every Renew until Release. The lease counts as lost
// when a renewal finds the key gone or taken, or when its expiry passes
// without a renewal that succeeded (Redis unreachable, the process paused).
func (r *Redis) hold(ctx context.Context, name, key, token string, validUntil time.Time) *Held {
	stop := make(chan struct{})
	done := make(chan struct{})
	h := newHeld(name, func(ctx context.Context) error {
		close(stop)
		<-done
		if err := releaseScript.Run(ctx, r.client, []string{key}, token).Err(); err != nil {
			return fmt.Errorf("lock: release %q: %w", name, err)
		}
		return nil
	})
	renewCtx := context.WithoutCancel(ctx)
	lease := r.cfg.Lease.Milliseconds()
	go func() {
		defer close(done)
		t := time.NewTicker(r.cfg.Renew)
		defer t.Stop()
		expiry := time.NewTimer(time.Until(validUntil))
		defer expiry.Stop()
		for {
			select {
			case <-stop:
				return
			case <-expiry.C:
				h.markLost()
				return
			case <-t.C:
			}
			start := time.Now()
			if start.After(validUntil) { // the process was paused past the lease
				h.markLost()
				return
			}
			cctx, cancel := context.WithDeadline(renewCtx, validUntil)
			n, err := renewScript.Run(cctx, r.client, []string{key}, token, lease).Int()
			cancel()
			switch {
			case err == nil && n == 1:
				validUntil = start.Add(r.cfg.Lease)
				expiry.Reset(time.Until(validUntil))
			case err == nil:
				h.markLost() // expired, and maybe taken by another holder
				return
			}
		}
	}()
	return h
}
