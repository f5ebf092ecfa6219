// Package locktest is the conformance suite of lock.Locker: every provider,
// the bundled ones and yours, must pass Run.
//
//	func TestMyLocker(t *testing.T) {
//		locktest.Run(t, func(t *testing.T) locktest.Subject {
//			l := mylock.New(…)
//			return locktest.Subject{Locker: l, Break: func(t *testing.T, h *lock.Held) { … }}
//		})
//	}
package locktest

import (
	"context"
	"crypto/rand"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/lock"
)

// Subject is one locker under test.
type Subject struct {
	// Locker is the locker under test.
	Locker lock.Locker
	// Break takes the lock h holds away behind h's back, as a dropped
	// connection or an expired lease does, so that another holder can take
	// it. h must notice: its Lost closes.
	Break func(t *testing.T, h *lock.Held)
}

// Factory returns a locker of its own (its own connections or client) on the
// backend every other locker of the suite shares, so lockers compete for the
// same names as processes of one application do. Release what it holds with
// t.Cleanup. Subtests run in parallel and use names of their own.
type Factory func(t *testing.T) Subject

const (
	// long bounds every wait that should end well before it.
	long = 20 * time.Second
	// goroutines × lockers compete in the exclusion test.
	goroutines, lockers, rounds = 16, 3, 2
)

// Run runs the conformance suite against the lockers newSubject returns.
func Run(t *testing.T, newSubject Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"AcquireReleaseAcquire", testAcquireRelease},
		{"BusyTryAnswersNil", testBusyTry},
		{"BusyWaitAnswersNil", testBusyWait},
		{"WaiterGetsReleasedLock", testWaiter},
		{"NamesAreIndependent", testNames},
		{"ReleaseTwice", testReleaseTwice},
		{"EmptyName", testEmptyName},
		{"CanceledWhileWaiting", testCanceled},
		{"ReleaseDoesNotCloseLost", testReleaseKeepsLost},
		{"BrokenLockIsLostAndNotReleasedByItsFormerHolder", testBroken},
		{"MutualExclusion", testExclusion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newSubject)
		})
	}
}

func name() string { return "locktest-" + rand.Text() }

func acquire(t *testing.T, l lock.Locker, n string, wait time.Duration) *lock.Held {
	t.Helper()
	h, err := l.Acquire(t.Context(), n, wait)
	require.NoError(t, err)
	if h != nil {
		t.Cleanup(func() { _ = h.Release(context.WithoutCancel(t.Context())) })
	}
	return h
}

func requireHeld(t *testing.T, h *lock.Held, msg string) {
	t.Helper()
	require.NotNil(t, h, msg)
	select {
	case <-h.Lost():
		t.Fatalf("%s: the lock is lost", msg)
	default:
	}
}

func testAcquireRelease(t *testing.T, f Factory) {
	a, b := f(t).Locker, f(t).Locker
	n := name()
	h := acquire(t, a, n, 0)
	requireHeld(t, h, "a free lock is acquired")
	require.Equal(t, n, h.Name())
	require.NoError(t, h.Release(t.Context()))
	requireHeld(t, acquire(t, b, n, 0), "a released lock is free at once for another locker")
}

func testBusyTry(t *testing.T, f Factory) {
	a, b := f(t).Locker, f(t).Locker
	n := name()
	requireHeld(t, acquire(t, a, n, 0), "first holder")
	require.Nil(t, acquire(t, b, n, 0), "a held lock answers nil to a try")
	require.Nil(t, acquire(t, a, n, 0), "a held lock answers nil to its own locker too: locks are not reentrant")
}

func testBusyWait(t *testing.T, f Factory) {
	a, b := f(t).Locker, f(t).Locker
	n := name()
	requireHeld(t, acquire(t, a, n, 0), "first holder")
	require.Nil(t, acquire(t, b, n, 200*time.Millisecond), "a lock held for the whole wait answers nil")
}

func testWaiter(t *testing.T, f Factory) {
	a, b := f(t).Locker, f(t).Locker
	n := name()
	h := acquire(t, a, n, 0)
	requireHeld(t, h, "first holder")
	got := make(chan *lock.Held, 1)
	go func() {
		w, err := b.Acquire(t.Context(), n, long)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- w
	}()
	select {
	case w := <-got:
		t.Fatalf("the waiter got %v while the lock was held", w)
	case <-time.After(100 * time.Millisecond): // the waiter is waiting; no result yet
	}
	require.NoError(t, h.Release(t.Context()))
	w := <-got
	requireHeld(t, w, "the waiter gets the released lock")
	require.NoError(t, w.Release(t.Context()))
}

func testNames(t *testing.T, f Factory) {
	a, b := f(t).Locker, f(t).Locker
	requireHeld(t, acquire(t, a, name(), 0), "one name")
	requireHeld(t, acquire(t, b, name(), 0), "another name at the same time")
}

func testReleaseTwice(t *testing.T, f Factory) {
	a := f(t).Locker
	n := name()
	h := acquire(t, a, n, 0)
	requireHeld(t, h, "holder")
	require.NoError(t, h.Release(t.Context()))
	require.NoError(t, h.Release(t.Context()), "a second Release answers like the first")
	h2 := acquire(t, a, n, 0)
	requireHeld(t, h2, "reacquired")
	require.NoError(t, h.Release(t.Context()))
	require.Nil(t, acquire(t, f(t).Locker, n, 0), "the old handle's Release does not free the new holder's lock")
}

func testEmptyName(t *testing.T, f Factory) {
	h, err := f(t).Locker.Acquire(t.Context(), "", 0)
	require.ErrorIs(t, err, lock.ErrEmptyName)
	require.Nil(t, h)
}

func testCanceled(t *testing.T, f Factory) {
	a, b := f(t).Locker, f(t).Locker
	n := name()
	requireHeld(t, acquire(t, a, n, 0), "holder")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		h, err := b.Acquire(ctx, n, long)
		if h != nil {
			t.Errorf("a canceled waiter got the lock")
		}
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		require.Error(t, err, "a canceled wait is an error, not a busy lock")
	case <-time.After(long):
		t.Fatal("Acquire did not return after its context was canceled")
	}
}

func testReleaseKeepsLost(t *testing.T, f Factory) {
	h := acquire(t, f(t).Locker, name(), 0)
	requireHeld(t, h, "holder")
	require.NoError(t, h.Release(t.Context()))
	select {
	case <-h.Lost():
		t.Fatal("Release closed Lost")
	default:
	}
}

func testBroken(t *testing.T, f Factory) {
	s := f(t)
	other, third := f(t).Locker, f(t).Locker
	n := name()
	h := acquire(t, s.Locker, n, 0)
	requireHeld(t, h, "holder")
	s.Break(t, h)
	select {
	case <-h.Lost():
	case <-time.After(long):
		t.Fatal("Lost did not close after the lock was taken away")
	}
	successor := acquire(t, other, n, long)
	requireHeld(t, successor, "another locker takes the broken lock")
	_ = h.Release(t.Context()) // may fail: its connection or lease is gone
	require.Nil(t, acquire(t, third, n, 0), "the former holder's Release left the successor's lock alone")
	requireHeld(t, successor, "the successor still holds")
}

// testExclusion lets goroutines × lockers take one lock again and again and
// counts who is inside at once.
func testExclusion(t *testing.T, f Factory) {
	n := name()
	var inside, overlaps, entered atomic.Int64
	var wg sync.WaitGroup
	for range lockers {
		l := f(t).Locker
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					h, err := l.Acquire(t.Context(), n, long)
					if err != nil || h == nil {
						t.Errorf("acquire: %v, %v", h, err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					entered.Add(1)
					runtime.Gosched()
					inside.Add(-1)
					if err := h.Release(t.Context()); err != nil && !errors.Is(err, context.Canceled) {
						t.Errorf("release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	require.Zero(t, overlaps.Load(), "two holders were inside at once")
	require.Equal(t, int64(goroutines*lockers*rounds), entered.Load())
}
