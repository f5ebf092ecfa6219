package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisTimeout is the default of RedisConfig.Timeout.
const DefaultRedisTimeout = time.Second

// RedisConfig configures a RedisStore. The zero value is usable.
type RedisConfig struct {
	// Prefix starts every key the store writes. Default "kumiko:idem:";
	// give each application its own when several share one Redis.
	Prefix string
	// TTL is how long a completed response is replayed. Default DefaultTTL.
	TTL time.Duration
	// LockTTL is how long a claim lives without Complete or Release.
	// Default DefaultLockTTL.
	LockTTL time.Duration
	// Timeout bounds each call of the store (Claim, Complete, Release —
	// one script each): past it the call fails with ErrUnavailable, so a
	// Redis that accepts connections and never answers costs a keyed
	// request this long, not the client's own timeouts (go-redis waits 5 s
	// per read by default). The bound holds whatever the client's options
	// are: the store stops waiting at it even when the client ignores
	// context deadlines (redis.Options.ContextTimeoutEnabled false, the
	// go-redis default); the abandoned call then ends at the client's own
	// timeouts. A client with ContextTimeoutEnabled ends it at the bound
	// too. The client's own timeouts (DialTimeout, ReadTimeout,
	// PoolTimeout, …) still apply inside the bound: whichever ends first
	// fails the call. Default DefaultRedisTimeout (1s); negative: no bound
	// of the store's own.
	Timeout time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c RedisConfig) WithDefaults() RedisConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultRedisTimeout
	}
	if c.Prefix == "" {
		c.Prefix = "kumiko:idem:"
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	return c
}

func (c RedisConfig) validate() error {
	return validateTTLs("RedisConfig", c.TTL, c.LockTTL)
}

func validateTTLs(name string, ttl, lockTTL time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("idempotency: %s.TTL is negative (%s)", name, ttl)
	}
	if lockTTL < 0 {
		return fmt.Errorf("idempotency: %s.LockTTL is negative (%s)", name, lockTTL)
	}
	return nil
}

// RedisStore is the Store for production: records live in Redis, shared by
// every process of the application, and expire there. It is safe for
// concurrent use.
//
// Each (tenant, user, key) is one Redis string at Prefix followed by the
// hex SHA-256 of the three parts, each length-prefixed, so no choice of
// parts can collide with another and no client key reaches Redis verbatim.
// The value is JSON: {"state":"pending"|"done","fingerprint":…,"response":…}
// with the fingerprint base64-encoded (std, padded), so any byte string
// survives JSON and compares exactly.
// Claim, Complete, Release and each key's Remove are one atomic Lua
// script.
type RedisStore struct {
	client redis.UniversalClient
	cfg    RedisConfig
}

var (
	_ Store   = (*RedisStore)(nil)
	_ Remover = (*RedisStore)(nil)
)

// NewRedisStore returns a store on client, which the caller owns and closes.
// It does not touch the server. It panics when client is nil or a duration
// of cfg is negative.
func NewRedisStore(client redis.UniversalClient, cfg RedisConfig) *RedisStore {
	if client == nil {
		panic("idempotency: NewRedisStore: client is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	return &RedisStore{client: client, cfg: cfg}
}

const (
	statePending = "pending"
	stateDone    = "done"
)

// redisRecord is the stored value of one key.
type redisRecord struct {
	State       string    `json:"state"`
	Fingerprint string    `json:"fingerprint"` // base64 of the caller's
	Response    *Response `json:"response,omitempty"`
}

// The scripts get KEYS[1] = the record's key. Complete and Release get
// ARGV[1] = the caller's fingerprint as encoded in records (base64), so
// they compare strings.
var (
	// claimScript stores ARGV[1] for ARGV[2] ms when the key is free and
	// returns 1, or returns the record that holds the key. Claim decides
	// on that record in Go.
	claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`)

	// completeScript stores ARGV[2] for ARGV[3] ms unless the key belongs
	// to another fingerprint (returns 0) or is already done (keeps the first
	// response); returns 1 otherwise.
	completeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local r = cjson.decode(v)
  if r.fingerprint ~= ARGV[1] then return 0 end
  if r.state ~= 'pending' then return 1 end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`)

	// removeScript deletes the key when it holds a completed record;
	// returns 1 when it deleted.
	removeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if cjson.decode(v).state == 'done' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0`)

	// releaseScript deletes the key only when it is a pending claim of the
	// fingerprint; returns 1 when it deleted.
	releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local r = cjson.decode(v)
if r.fingerprint == ARGV[1] and r.state == 'pending' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0`)
)

// Remove implements Remover: one script per key, each a GET and, when
// the record is completed, a DEL.
func (s *RedisStore) Remove(ctx context.Context, keys ...Key) error {
	for _, k := range keys {
		_, err := bounded(ctx, s.cfg.Timeout, func(ctx context.Context) (any, error) {
			return nil, removeScript.Run(ctx, s.client, []string{s.key(k)}).Err()
		})
		if err != nil {
			return backendError(ctx, "remove", err)
		}
	}
	return nil
}

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, key Key, fingerprint string) (*Response, error) {
	fp := encodeFingerprint(fingerprint)
	pending, err := json.Marshal(redisRecord{State: statePending, Fingerprint: fp})
	if err != nil {
		return nil, fmt.Errorf("%w: claim: encode record: %w", ErrUnavailable, err)
	}
	res, err := bounded(ctx, s.cfg.Timeout, func(ctx context.Context) (any, error) {
		return claimScript.Run(ctx, s.client, []string{s.key(key)}, pending, millis(s.cfg.LockTTL)).Result()
	})
	if err != nil {
		return nil, backendError(ctx, "claim", err)
	}
	var raw string
	switch v := res.(type) {
	case int64:
		return nil, nil // the key was free; the caller owns it now
	case string:
		raw = v
	default:
		return nil, fmt.Errorf("%w: claim: unexpected reply %T", ErrUnavailable, res)
	}
	var rec redisRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("%w: claim: decode record: %w", ErrUnavailable, err)
	}
	switch {
	case rec.Fingerprint != fp:
		return nil, ErrKeyReused
	case rec.State == stateDone && rec.Response != nil:
		return rec.Response, nil
	case rec.State == statePending:
		return nil, ErrInProgress
	default:
		return nil, fmt.Errorf("%w: claim: record in unknown state %q", ErrUnavailable, rec.State)
	}
}

// Complete implements Store.
func (s *RedisStore) Complete(ctx context.Context, key Key, fingerprint string, resp Response) error {
	fp := encodeFingerprint(fingerprint)
	done, err := json.Marshal(redisRecord{State: stateDone, Fingerprint: fp, Response: &resp})
	if err != nil {
		return fmt.Errorf("%w: complete: encode record: %w", ErrUnavailable, err)
	}
	n, err := bounded(ctx, s.cfg.Timeout, func(ctx context.Context) (int, error) {
		return completeScript.Run(ctx, s.client, []string{s.key(key)}, fp, done, millis(s.cfg.TTL)).Int()
	})
	if err != nil {
		return backendError(ctx, "complete", err)
	}
	if n == 0 {
		return ErrKeyReused
	}
	return nil
}

// Release implements Store.
func (s *RedisStore) Release(ctx context.Context, key Key, fingerprint string) error {
	_, err := bounded(ctx, s.cfg.Timeout, func(ctx context.Context) (any, error) {
		return nil, releaseScript.Run(ctx, s.client, []string{s.key(key)}, encodeFingerprint(fingerprint)).Err()
	})
	if err != nil {
		return backendError(ctx, "release", err)
	}
	return nil
}

// errNoAnswer is the cause of a call that reached its Timeout.
var errNoAnswer = errors.New("no answer within the store's timeout")

// bounded runs call on a context that ends after d (no bound when d is
// negative) and returns at d even when call does not: a client that
// ignores context deadlines keeps running the abandoned call in its
// goroutine until its own timeouts end it, and its result is dropped.
// A call that returned by then wins over the bound.
func bounded[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error)) (T, error) {
	if d < 0 {
		return call(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf("%w (%s)", errNoAnswer, d))
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call(ctx)
		done <- result{v, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done:
		default:
			return r.v, context.Cause(ctx)
		}
	}
	if cause := context.Cause(ctx); r.err != nil && errors.Is(cause, errNoAnswer) {
		r.err = fmt.Errorf("%w: %w", cause, r.err) // a client that honours deadlines says only "deadline exceeded"
	}
	return r.v, r.err
}

// backendError is the error of a failed Redis call, the store's own
// Timeout included: wrapped in ErrUnavailable, unless the caller's context
// ended — a client that went away or ran out of time is not an outage, and
// must not make a keyed request answer 503 or run without idempotency
// under fail-open.
func backendError(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("idempotency: %s: %w (%w)", op, ctxErr, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}

// key returns the Redis key of k: Prefix + hex SHA-256 of the
// length-prefixed parts.
func (s *RedisStore) key(k Key) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, part := range [...]string{k.Tenant, k.User, k.Key} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		h.Write([]byte(part))
	}
	return s.cfg.Prefix + hex.EncodeToString(h.Sum(nil))
}

// encodeFingerprint is the form of a fingerprint in records and scripts.
func encodeFingerprint(fp string) string {
	return base64.StdEncoding.EncodeToString([]byte(fp))
}

// millis rounds d up to whole milliseconds, at least one, for PX.
func millis(d time.Duration) int64 {
	return max(1, int64((d+time.Millisecond-1)/time.Millisecond))
}
