// Package idempotencytest is the conformance suite of idempotency.Store:
// every store, the bundled ones and yours, must pass Run.
//
//	func TestMyStore(t *testing.T) {
//		idempotencytest.Run(t, func(t *testing.T, ttl, lockTTL time.Duration) idempotency.Store {
//			return mystore.New(…, ttl, lockTTL)
//		})
//	}
package idempotencytest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/idempotency"
)

// Factory returns a store whose completed responses are replayed for ttl
// and whose claims live for lockTTL. Release what the store holds with
// t.Cleanup. Stores may share one backend: the suite gives every subtest
// keys of its own. Subtests run in parallel, so Factory is called
// concurrently.
type Factory func(t *testing.T, ttl, lockTTL time.Duration) idempotency.Store

// Lifetimes the suite uses.
const (
	// long outlives every subtest that does not wait for an expiry.
	long = time.Hour
	// short is the lifetime whose expiry the suite waits for. Calls made
	// right after a claim must land within it, even under -race.
	short = time.Second
	// expiryWait bounds how long the suite waits past short for a record to
	// expire.
	expiryWait = 15 * time.Second
	// goroutines is how many claim one key at once.
	goroutines = 50
)

// Run runs the conformance suite against the stores newStore returns. A
// store that is an idempotency.Remover is checked as one too.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"ClaimCompleteReplay", testClaimCompleteReplay},
		{"ReplayEmptyAndBinaryBodies", testReplayBodies},
		{"ReplayIsACopy", testReplayIsACopy},
		{"InProgress", testInProgress},
		{"KeyReusedWhilePending", testKeyReusedWhilePending},
		{"KeyReusedAfterCompletion", testKeyReusedAfterCompletion},
		{"FingerprintsCompareExactly", testFingerprintsCompareExactly},
		{"ReleaseThenReclaim", testReleaseThenReclaim},
		{"ReleaseOtherFingerprintKeepsClaim", testReleaseOtherFingerprint},
		{"ReleaseKeepsCompleted", testReleaseKeepsCompleted},
		{"CompleteOtherFingerprintDoesNotOverwrite", testCompleteOtherFingerprint},
		{"CompleteTwiceKeepsFirstResponse", testCompleteTwice},
		{"CompleteAfterClaimExpired", testCompleteAfterClaimExpired},
		{"KeysOfUsersAndTenantsAreIndependent", testIndependentKeys},
		{"KeyPartsAreUnambiguous", testUnambiguousKeys},
		{"ClaimExpiryFreesKey", testClaimExpiry},
		{"CompletedRecordExpires", testCompletedExpiry},
		{"CompleteOutlivesLockTTL", testCompleteOutlivesLockTTL},
		{"ConcurrentClaimsHaveOneOwner", testConcurrentClaims},
		{"ConcurrentClaimsOfTwoFingerprints", testConcurrentClaimsTwoFingerprints},
		{"RemoveDeletesOnlyCompletedRecords", testRemove},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore)
		})
	}
}

func testClaimCompleteReplay(t *testing.T, newStore Factory) {
	s, ctx, key := newStore(t, long, long), t.Context(), newKey()
	resp := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"data":{"id":"x","version":1}}`)}

	mustOwn(t, s, key, "fp")
	require.NoError(t, s.Complete(ctx, key, "fp", resp))
	for range 2 { // replay is repeatable
		requireReplay(t, s, key, "fp", resp)
	}
}

func testReplayBodies(t *testing.T, newStore Factory) {
	s, ctx := newStore(t, long, long), t.Context()
	big := make([]byte, 256<<10)
	_, _ = rand.Read(big)
	for _, resp := range []idempotency.Response{
		{Status: 204},
		{Status: 200, ContentType: "text/plain", Body: []byte{}},
		{Status: 200, ContentType: "application/octet-stream", Body: []byte{0, 0xff, 0xfe, '"', '\\', '\n', 0x7f}},
		{Status: 422, ContentType: "application/problem+json; charset=utf-8", Body: []byte(`{"title":"ünïcödé ✓"}`)},
		{Status: 200, ContentType: "application/octet-stream", Body: big},
	} {
		key := newKey()
		mustOwn(t, s, key, "fp")
		require.NoError(t, s.Complete(ctx, key, "fp", resp))
		requireReplay(t, s, key, "fp", resp)
	}
}

func testReplayIsACopy(t *testing.T, newStore Factory) {
	s, ctx, key := newStore(t, long, long), t.Context(), newKey()
	body := []byte("original")
	mustOwn(t, s, key, "fp")
	require.NoError(t, s.Complete(ctx, key, "fp", idempotency.Response{Status: 200, Body: body}))
	copy(body, "mutated!")

	got, err := s.Claim(ctx, key, "fp")
	require.NoError(t, err)
	require.NotNil(t, got)
	copy(got.Body, "mutated!")

	requireReplay(t, s, key, "fp", idempotency.Response{Status: 200, Body: []byte("original")})
}

func testInProgress(t *testing.T, newStore Factory) {
	s, key := newStore(t, long, long), newKey()
	mustOwn(t, s, key, "fp")
	requireClaimErr(t, s, key, "fp", idempotency.ErrInProgress)
	requireClaimErr(t, s, key, "fp", idempotency.ErrInProgress)
}

func testKeyReusedWhilePending(t *testing.T, newStore Factory) {
	s, key := newStore(t, long, long), newKey()
	mustOwn(t, s, key, "fp-1")
	requireClaimErr(t, s, key, "fp-2", idempotency.ErrKeyReused)
	requireClaimErr(t, s, key, "fp-1", idempotency.ErrInProgress) // still the first request's
}

func testKeyReusedAfterCompletion(t *testing.T, newStore Factory) {
	s, ctx, key := newStore(t, long, long), t.Context(), newKey()
	resp := idempotency.Response{Status: 200, ContentType: "application/json", Body: []byte(`{}`)}
	mustOwn(t, s, key, "fp-1")
	require.NoError(t, s.Complete(ctx, key, "fp-1", resp))
	requireClaimErr(t, s, key, "fp-2", idempotency.ErrKeyReused)
	requireReplay(t, s, key, "fp-1", resp)
}

// testFingerprintsCompareExactly: fingerprints are byte strings; ones a
// lossy encoding (invalid UTF-8 in JSON, case folding, trimming) would merge
// must stay distinct.
func testFingerprintsCompareExactly(t *testing.T, newStore Factory) {
	s := newStore(t, long, long)
	for _, pair := range [][2]string{
		{"\xff", "\xfe"},
		{"abc", "ABC"},
		{"abc", "abc "},
		{"", " "},
		{"a\x00b", "a"},
	} {
		key := newKey()
		mustOwn(t, s, key, pair[0])
		requireClaimErr(t, s, key, pair[1], idempotency.ErrKeyReused)
		requireClaimErr(t, s, key, pair[0], idempotency.ErrInProgress)
	}
}

func testReleaseThenReclaim(t *testing.T, newStore Factory) {
	s, ctx, key := newStore(t, long, long), t.Context(), newKey()
	mustOwn(t, s, key, "fp-1")
	require.NoError(t, s.Release(ctx, key, "fp-1"))
	mustOwn(t, s, key, "fp-1")

	// A released key is free for any request.
	require.NoError(t, s.Release(ctx, key, "fp-1"))
	mustOwn(t, s, key, "fp-2")
	requireClaimErr(t, s, key, "fp-1", idempotency.ErrKeyReused)

	// Releasing a free key is a no-op.
	other := newKey()
	require.NoError(t, s.Release(ctx, other, "fp"))
	mustOwn(t, s, other, "fp")
}

func testReleaseOtherFingerprint(t *testing.T, newStore Factory) {
	s, ctx, key := newStore(t, long, long), t.Context(), newKey()
	mustOwn(t, s, key, "fp-1")
	require.NoError(t, s.Release(ctx, key, "fp-2"))
	requireClaimErr(t, s, key, "fp-1", idempotency.ErrInProgress)
	requireClaimErr(t, s, key, "fp-2", idempotency.ErrKeyReused)
}

func testReleaseKeepsCompleted(t *testing.T, newStore Factory) {
	s, ctx, key := newStore(t, long, long), t.Context(), newKey()
	resp := idempotency.Response{Status: 200, Body: []byte("done")}
	mustOwn(t, s, key, "fp")
	require.NoError(t, s.Complete(ctx, key, "fp", resp))
	require.NoError(t, s.Release(ctx, key, "fp"))
	require.NoError(t, s.Release(ctx, key, "fp-other"))
	requireReplay(t, s, key, "fp", resp)
}

// testRemove checks idempotency.Remover, for stores that are one: the
// completed records of the keys go, claims in progress and other keys
// stay.
func testRemove(t *testing.T, newStore Factory) {
	s, ctx := newStore(t, long, long), t.Context()
	r, ok := s.(idempotency.Remover)
	if !ok {
		return // the store keeps completed records until their TTL
	}
	done, pending, other, never := newKey(), newKey(), newKey(), newKey()
	resp := idempotency.Response{Status: 201, Body: []byte(`{"name":"Ada"}`)}
	for _, k := range []idempotency.Key{done, other} {
		mustOwn(t, s, k, "fp")
		require.NoError(t, s.Complete(ctx, k, "fp", resp))
	}
	mustOwn(t, s, pending, "fp")

	require.NoError(t, r.Remove(ctx, done, pending, never))
	mustOwn(t, s, done, "fp") // free again: the record is gone
	requireClaimErr(t, s, pending, "fp", idempotency.ErrInProgress)
	requireReplay(t, s, other, "fp", resp)
	require.NoError(t, r.Remove(ctx))
	require.NoError(t, r.Remove(ctx, never), "removing what is not there is no error")
}

func testCompleteOtherFingerprint(t *testing.T, newStore Factory) {
	s, ctx := newStore(t, long, long), t.Context()
	theirs := idempotency.Response{Status: 500, Body: []byte("must not be stored")}

	// While pending: the claim stays the owner's, and completes normally.
	key := newKey()
	mustOwn(t, s, key, "fp-1")
	require.ErrorIs(t, s.Complete(ctx, key, "fp-2", theirs), idempotency.ErrKeyReused)
	requireClaimErr(t, s, key, "fp-1", idempotency.ErrInProgress)
	requireClaimErr(t, s, key, "fp-2", idempotency.ErrKeyReused)
	mine := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"mine":true}`)}
	require.NoError(t, s.Complete(ctx, key, "fp-1", mine))
	requireReplay(t, s, key, "fp-1", mine)

	// After completion: the response stays.
	require.ErrorIs(t, s.Complete(ctx, key, "fp-2", theirs), idempotency.ErrKeyReused)
	requireReplay(t, s, key, "fp-1", mine)
	requireClaimErr(t, s, key, "fp-2", idempotency.ErrKeyReused)
}

func testCompleteTwice(t *testing.T, newStore Factory) {
	s, ctx, key := newStore(t, long, long), t.Context(), newKey()
	first := idempotency.Response{Status: 201, Body: []byte("first")}
	mustOwn(t, s, key, "fp")
	require.NoError(t, s.Complete(ctx, key, "fp", first))
	require.NoError(t, s.Complete(ctx, key, "fp", idempotency.Response{Status: 200, Body: []byte("second")}))
	requireReplay(t, s, key, "fp", first)
}

// testCompleteAfterClaimExpired: a request that outlived its claim still
// records its response when nobody holds the key, and never takes a key
// another request claimed meanwhile.
func testCompleteAfterClaimExpired(t *testing.T, newStore Factory) {
	s, ctx := newStore(t, long, short), t.Context()
	resp := idempotency.Response{Status: 201, Body: []byte("late")}

	free, taken := newKey(), newKey()
	mustOwn(t, s, free, "fp")
	mustOwn(t, s, taken, "fp-1")
	waitFree(t, s, taken, "fp-2") // both claims expired; fp-2 now holds taken

	require.NoError(t, s.Complete(ctx, free, "fp", resp))
	requireReplay(t, s, free, "fp", resp)

	require.ErrorIs(t, s.Complete(ctx, taken, "fp-1", resp), idempotency.ErrKeyReused)
	requireClaimErr(t, s, taken, "fp-2", idempotency.ErrInProgress)
}

func testIndependentKeys(t *testing.T, newStore Factory) {
	s, ctx := newStore(t, long, long), t.Context()
	base := newKey()
	keys := []idempotency.Key{
		base,
		{Tenant: base.Tenant + "-other", User: base.User, Key: base.Key},
		{Tenant: base.Tenant, User: base.User + "-other", Key: base.Key},
		{Tenant: base.Tenant, User: base.User, Key: base.Key + "-other"},
	}
	for i, k := range keys { // each its own fingerprint: a shared record would be ErrKeyReused
		mustOwn(t, s, k, fmt.Sprintf("fp-%d", i))
	}
	resp := idempotency.Response{Status: 200, Body: []byte("base")}
	require.NoError(t, s.Complete(ctx, base, "fp-0", resp))
	require.NoError(t, s.Release(ctx, keys[1], "fp-1"))
	requireReplay(t, s, base, "fp-0", resp)
	mustOwn(t, s, keys[1], "fp-1")
	for i, k := range keys[2:] {
		requireClaimErr(t, s, k, fmt.Sprintf("fp-%d", i+2), idempotency.ErrInProgress)
	}
}

// testUnambiguousKeys: keys whose parts concatenate to the same string, with
// or without a separator or an escape, are different keys.
func testUnambiguousKeys(t *testing.T, newStore Factory) {
	s := newStore(t, long, long)
	p := newKey().Tenant // keeps this run's keys apart from others'
	groups := [][]idempotency.Key{
		{{Tenant: p + "a:b", User: "c", Key: "k"}, {Tenant: p + "a", User: "b:c", Key: "k"}, {Tenant: p + "a", User: "b", Key: "c:k"}},
		{{Tenant: p, User: "u:k", Key: "x"}, {Tenant: p, User: "u", Key: "k:x"}, {Tenant: p + ":u", User: "k", Key: "x"}},
		{{Tenant: p + "a", User: "", Key: "b"}, {Tenant: p, User: "a", Key: "b"}, {Tenant: p + "ab", User: "", Key: ""}, {Tenant: p, User: "", Key: "ab"}},
		{{Tenant: p + "a|b", User: "c", Key: "k"}, {Tenant: p + "a", User: "b|c", Key: "k"}},
		{{Tenant: p + "a/b", User: "c", Key: "k"}, {Tenant: p + "a", User: "b/c", Key: "k"}},
		{{Tenant: p + "a\x00b", User: "c", Key: "k"}, {Tenant: p + "a", User: "b\x00c", Key: "k"}},
		{{Tenant: p + "a%3Ab", User: "c", Key: "k"}, {Tenant: p + "a", User: "b%3Ac", Key: "k"}, {Tenant: p + "a%", User: "3Ab:c", Key: "k"}},
		{{Tenant: p + "a\\:b", User: "c", Key: "k"}, {Tenant: p + "a\\", User: "b:c", Key: "k"}, {Tenant: p + "a", User: "\\:b:c", Key: "k"}},
		{{Tenant: p + "{a}", User: "b", Key: "k"}, {Tenant: p + "{a", User: "}b", Key: "k"}},
	}
	seen := make(map[idempotency.Key]bool)
	for g, keys := range groups {
		for i, k := range keys {
			require.False(t, seen[k], "the suite lists %+v twice", k)
			seen[k] = true
			mustOwn(t, s, k, fmt.Sprintf("fp-%d-%d", g, i))
		}
	}
}

func testClaimExpiry(t *testing.T, newStore Factory) {
	s, key := newStore(t, long, short), newKey()
	mustOwn(t, s, key, "fp-1")
	requireClaimErr(t, s, key, "fp-1", idempotency.ErrInProgress)
	// A process that died mid-request frees the key, for any request.
	waitFree(t, s, key, "fp-2")
	requireClaimErr(t, s, key, "fp-2", idempotency.ErrInProgress)

	// The same request, too.
	other := newKey()
	mustOwn(t, s, other, "fp")
	waitFree(t, s, other, "fp")
}

func testCompletedExpiry(t *testing.T, newStore Factory) {
	s, ctx, key := newStore(t, short, long), t.Context(), newKey()
	resp := idempotency.Response{Status: 200, Body: []byte("soon gone")}
	mustOwn(t, s, key, "fp")
	require.NoError(t, s.Complete(ctx, key, "fp", resp))
	requireReplay(t, s, key, "fp", resp)
	waitFree(t, s, key, "fp")
}

// testCompleteOutlivesLockTTL: Complete gives the record the TTL, it does not
// keep the claim's expiry.
func testCompleteOutlivesLockTTL(t *testing.T, newStore Factory) {
	s, ctx := newStore(t, long, short), t.Context()
	key, clock := newKey(), newKey()
	resp := idempotency.Response{Status: 200, Body: []byte("kept")}

	mustOwn(t, s, key, "fp")
	mustOwn(t, s, clock, "fp") // claimed after key, so it expires after key's claim would
	require.NoError(t, s.Complete(ctx, key, "fp", resp))
	waitFree(t, s, clock, "fp")
	requireReplay(t, s, key, "fp", resp)
}

func testConcurrentClaims(t *testing.T, newStore Factory) {
	s, key := newStore(t, long, long), newKey()
	errs := claimConcurrently(t, s, key, func(int) string { return "fp" })

	owners := 0
	for i, err := range errs {
		if err == nil {
			owners++
			continue
		}
		require.ErrorIs(t, err, idempotency.ErrInProgress, "claim %d", i)
	}
	require.Equal(t, 1, owners, "owners of one key")
}

func testConcurrentClaimsTwoFingerprints(t *testing.T, newStore Factory) {
	s, key := newStore(t, long, long), newKey()
	fp := func(i int) string { return fmt.Sprintf("fp-%d", i%2) }
	errs := claimConcurrently(t, s, key, fp)

	owner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, owner, "claims %d and %d both own the key", owner, i)
			owner = i
		}
	}
	require.NotEqual(t, -1, owner, "nobody owns the key")
	for i, err := range errs {
		switch {
		case i == owner:
		case fp(i) == fp(owner):
			require.ErrorIs(t, err, idempotency.ErrInProgress, "claim %d", i)
		default:
			require.ErrorIs(t, err, idempotency.ErrKeyReused, "claim %d", i)
		}
	}
}

// claimConcurrently starts goroutines claims of key at once and returns
// their errors; a claim that answers a replay fails the test.
func claimConcurrently(t *testing.T, s idempotency.Store, key idempotency.Key, fp func(int) string) []error {
	t.Helper()
	ctx := t.Context()
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		errs    = make([]error, goroutines)
		replays = make([]*idempotency.Response, goroutines)
	)
	for i := range goroutines {
		wg.Go(func() {
			<-start
			replays[i], errs[i] = s.Claim(ctx, key, fp(i))
		})
	}
	close(start)
	wg.Wait()
	for i, r := range replays {
		require.Nil(t, r, "claim %d replayed a response nobody completed", i)
	}
	return errs
}

// newKey returns a key no other test uses.
func newKey() idempotency.Key {
	return idempotency.Key{Tenant: "tenant-" + rand.Text(), User: "user-1", Key: "key-1"}
}

// mustOwn claims key and requires that the caller owns it.
func mustOwn(t *testing.T, s idempotency.Store, key idempotency.Key, fp string) {
	t.Helper()
	resp, err := s.Claim(t.Context(), key, fp)
	require.NoError(t, err, "claim %+v with %q", key, fp)
	require.Nil(t, resp, "claim %+v with %q replayed a response", key, fp)
}

func requireClaimErr(t *testing.T, s idempotency.Store, key idempotency.Key, fp string, want error) {
	t.Helper()
	resp, err := s.Claim(t.Context(), key, fp)
	require.ErrorIs(t, err, want, "claim %+v with %q", key, fp)
	require.Nil(t, resp)
}

// requireReplay requires that claiming key answers want, field by field
// (an empty body may come back nil).
func requireReplay(t *testing.T, s idempotency.Store, key idempotency.Key, fp string, want idempotency.Response) {
	t.Helper()
	got, err := s.Claim(t.Context(), key, fp)
	require.NoError(t, err, "claim %+v with %q", key, fp)
	require.NotNil(t, got, "claim %+v with %q owns the key instead of replaying", key, fp)
	require.Equal(t, want.Status, got.Status, "status")
	require.Equal(t, want.ContentType, got.ContentType, "content type")
	require.Equal(t, want.Body, got.Body, "body") // bytes.Equal: nil equals empty
}

// waitFree claims key with fp until the caller owns it, failing the test if
// that takes longer than short+expiryWait or if a claim answers anything but
// ErrInProgress, ErrKeyReused or a replay, which a record still alive gives.
func waitFree(t *testing.T, s idempotency.Store, key idempotency.Key, fp string) {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(short + expiryWait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := s.Claim(ctx, key, fp)
		switch {
		case err == nil && resp == nil:
			return
		case err == nil, errors.Is(err, idempotency.ErrInProgress), errors.Is(err, idempotency.ErrKeyReused):
		default:
			require.NoError(t, err, "claim %+v while waiting for it to expire", key)
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "record did not expire", "key %+v still held %s after its lifetime %s ended", key, expiryWait, short)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			require.FailNow(t, "test context done while waiting for expiry", "%v", ctx.Err())
		}
	}
}
