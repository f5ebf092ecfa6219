// Package lock gives work that must not run twice at once, across the
// processes of an application, a named lock: a nightly run started by hand
// while the scheduled run still works, a job that two instances picked up.
//
//	held, err := locker.Acquire(ctx, "invoice-run", 0)
//	if err != nil {
//		return err
//	}
//	if held == nil {
//		return nil // another process is at it
//	}
//	defer held.Release(ctx)
//
// Two providers implement Locker: Postgres (the default; a session advisory
// lock on a connection of its own, freed by the server the moment a crashed
// holder's connection drops) and Redis (a lease that expires unless its
// holder renews it). Both pass the conformance suite in lock/locktest.
package lock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Locker hands out named locks. Implementations are safe for concurrent use.
type Locker interface {
	// Acquire takes the lock name, waiting up to wait while another holder
	// has it. It returns nil and no error when the lock stayed busy for wait
	// (wait <= 0: try once); an error only when the backend failed or ctx
	// ended.
	Acquire(ctx context.Context, name string, wait time.Duration) (*Held, error)
}

// ErrEmptyName is returned by Acquire for the empty lock name.
var ErrEmptyName = errors.New("lock: empty name")

// Held is a lock this process holds until Release, or until Lost closes.
// Its methods are safe for concurrent use.
type Held struct {
	name    string
	lost    chan struct{}
	lostFn  sync.Once
	release func(ctx context.Context) error
	once    sync.Once
	err     error
}

func newHeld(name string, release func(ctx context.Context) error) *Held {
	return &Held{name: name, lost: make(chan struct{}), release: release}
}

// Name is the name the lock was acquired under.
func (h *Held) Name() string { return h.name }

// Lost is closed when the lock slipped away before Release: the Postgres
// connection holding it dropped, or a Redis lease could not be renewed before
// it expired. Another process may hold the lock from then on, so work guarded
// by it should stop. Release never closes it.
func (h *Held) Lost() <-chan struct{} { return h.lost }

// Release gives the lock back. Only the lock this Held acquired is given
// back: a lock that was lost and taken by another holder stays theirs.
// Calls after the first return the first call's result.
func (h *Held) Release(ctx context.Context) error {
	h.once.Do(func() { h.err = h.release(ctx) })
	return h.err
}

func (h *Held) markLost() { h.lostFn.Do(func() { close(h.lost) }) }
