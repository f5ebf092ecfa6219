// Package idempotency makes a keyed HTTP write run once: the first response
// to an Idempotency-Key is recorded and replayed to every retry with the same
// key and request, a concurrent duplicate is told the request is in progress,
// and the same key with a different request is refused.
//
// A [Store] keeps the records: [NewRedisStore] for production (go-redis),
// [NewMemoryStore] for development and tests in one process. Both pass the
// conformance suite in package idempotencytest. The store is a fast path;
// the pipeline also records each key in the write transaction, so a retry
// whose record was lost (Redis flushed) can still never apply twice.
package idempotency

import (
	"context"
	"errors"
	"time"
)

// Defaults of the store configurations.
const (
	// DefaultTTL is how long a completed response is replayed.
	DefaultTTL = 24 * time.Hour
	// DefaultLockTTL is how long a claim lives without Complete or Release:
	// a process that dies mid-request frees the key after this.
	DefaultLockTTL = 30 * time.Second
)

// Errors of Claim. Backend failures are returned wrapped in ErrUnavailable.
var (
	// ErrInProgress: another request holds the key and has not completed.
	ErrInProgress = errors.New("idempotency: request in progress")
	// ErrKeyReused: the key belongs to a request with another fingerprint.
	ErrKeyReused = errors.New("idempotency: key reused with a different request")
	// ErrUnavailable: the store cannot be reached.
	ErrUnavailable = errors.New("idempotency: store unavailable")
)

// Key identifies a request: the same key sent by another user or tenant is a
// different request.
type Key struct {
	Tenant string
	User   string
	Key    string
}

// Response is what the first request answered, replayed to retries.
type Response struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	Body        []byte `json:"body"`
}

// Store records idempotent requests. Implementations are safe for concurrent
// use across processes sharing the backend, and every method returns backend
// failures wrapped in ErrUnavailable — but a call that failed because the
// caller's context ended returns an error wrapping the context's error
// instead: a client that went away is no outage.
type Store interface {
	// Claim reserves key for the request whose fingerprint (a hash of
	// method, path and body) is given. It returns
	//   - (nil, nil) when the caller now owns the key and must Complete or
	//     Release it;
	//   - (resp, nil) when the key completed with the same fingerprint:
	//     replay resp;
	//   - ErrInProgress when another request holds it with the same
	//     fingerprint;
	//   - ErrKeyReused when the key is held or completed for another
	//     fingerprint;
	//   - an error wrapping ErrUnavailable when the backend fails.
	//
	// A claim neither completed nor released expires after the store's lock
	// TTL, freeing the key for any request.
	Claim(ctx context.Context, key Key, fingerprint string) (*Response, error)
	// Complete records the response of the claimed key, replayed for the
	// store's TTL (counted from Complete, not from Claim). It never touches
	// a record of another fingerprint: it returns ErrKeyReused when another
	// request holds or completed the key. A key already completed for
	// fingerprint keeps its first response (nil is returned). When the claim
	// expired and nobody holds the key, the response is still recorded, so
	// retries replay it instead of running again.
	Complete(ctx context.Context, key Key, fingerprint string, resp Response) error
	// Release gives up a claim without a response (the request failed in a
	// way a retry may fix), so the next Claim owns the key. Only a pending
	// claim of fingerprint is removed: a completed record or another
	// request's claim is left alone, and nil returned. Fingerprints are the
	// only identity, so a request whose claim expired and was claimed again
	// by a retry of the same request releases the retry's claim; the record
	// the write transaction keeps still stops a second apply.
	Release(ctx context.Context, key Key, fingerprint string) error
}

// Remover is a Store that can remove completed records before their TTL.
// When a data subject is forgotten (docs/personal-data.md), the kumiko
// facade removes the records of the requests that wrote the subject's
// personal data from a store that is a Remover; a store that is not keeps
// them until its TTL. Both bundled stores are Removers.
type Remover interface {
	// Remove deletes the completed records of keys, so a retry with one of
	// them is answered by the write transaction's own record (409
	// already_applied) instead of a replay. A key without a completed
	// record — none, or a claim in progress — is left as it is.
	Remove(ctx context.Context, keys ...Key) error
}
