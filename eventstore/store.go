package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a Store. The zero value is usable: schema "public", no
// upcasting, logs to slog.Default().
type Config struct {
	// Schema holding the kumiko_* tables. Default "public".
	Schema string
	// Upcaster brings stored payloads to their current version on every read.
	// Nil reads events as stored.
	Upcaster Upcaster
	// Logger receives the few things the store cannot return as an error
	// (a failed wake-up notification). Default slog.Default().
	Logger *slog.Logger
	// Keys wraps the data subjects' data keys (see NewEvent.Personal and
	// docs/personal-data.md). Nil: the store refuses personal fields, and
	// reads show stored personal values as null.
	Keys KeyProvider
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Schema == "" {
		c.Schema = "public"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if len(c.Schema) > 40 {
		return fmt.Errorf("eventstore: Config.Schema %q is longer than 40 bytes", c.Schema)
	}
	return nil
}

// Upcaster brings a stored event payload to the current version of its type.
// It returns the version and payload unchanged for a current event and an
// *UnknownEventVersionError when no path leads to the current version.
// Implementations must not modify payload in place.
type Upcaster interface {
	Upcast(eventType string, version int, payload json.RawMessage) (int, json.RawMessage, error)
}

// UpcasterFunc adapts a function to Upcaster.
type UpcasterFunc func(eventType string, version int, payload json.RawMessage) (int, json.RawMessage, error)

// Upcast calls f.
func (f UpcasterFunc) Upcast(eventType string, version int, payload json.RawMessage) (int, json.RawMessage, error) {
	return f(eventType, version, payload)
}

// Store is the event store. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	cfg      Config
	sql      queries
	notifier *notifier
	keys     dataKeys
}

// New returns a store on pool. It does not touch the database; call Migrate
// once at start-up (safe from many processes at once).
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("eventstore: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{pool: pool, cfg: cfg, sql: newQueries(cfg.Schema)}
	s.notifier = &notifier{pool: pool, channel: s.NotifyChannel(), log: cfg.Logger}
	return s, nil
}

// Close waits for wake-up notifications still being sent. It does not close
// the pool, which the caller owns.
func (s *Store) Close() { s.notifier.wait() }

// Pool returns the pool the store was built on. The packages that own
// tables next to the store's (consumer, pipeline) run their own statements
// on it, in transactions they share with the store's …Tx methods; they reach
// the store's tables only through the store.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema holding the store's tables, and those of the
// packages that migrate theirs with MigrateOwned.
func (s *Store) Schema() string { return s.cfg.Schema }

// NotifyChannel is the LISTEN channel on which the store announces committed
// events. The payload is the highest committed event id known to the sender,
// in decimal; notifications are coalesced, so one may stand for many events.
func (s *Store) NotifyChannel() string { return notifyChannel(s.cfg.Schema) }

func notifyChannel(schema string) string { return "kumiko_events_" + schema }

// Subscribe returns a channel that receives a signal soon after events
// appended through this store commit, without waiting for the database
// notification: the in-process wake-up of consumers. Signals coalesce; call
// cancel to stop receiving.
func (s *Store) Subscribe() (wake <-chan struct{}, cancel func()) { return s.notifier.subscribe() }

// WithTx runs fn in a new transaction and commits it when fn returns nil: it
// is InTx for code that takes a pgx.Tx. The transaction is a *Tx.
func (s *Store) WithTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.InTx(ctx, func(ctx context.Context, tx *Tx) error { return fn(ctx, tx) })
}

// InTx runs fn in a new Tx and commits it when fn returns nil. Events
// appended in it are announced on NotifyChannel after the commit and never
// when the transaction rolls back. Every error, fn's included, passes
// through TranslateError: a connection lost anywhere in the transaction is
// ErrUnavailable.
//
// The transaction costs no round trip of its own: BEGIN travels with fn's
// first statement and COMMIT with what is still queued (statements queued by
// the packages that share the transaction, such as the pipeline's row
// writes); a transaction that sent nothing ends without one. Savepoints
// (tx.Begin) are queued the same way.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	if err := RunTx(ctx, s.pool, func(tx *Tx) error { return fn(ctx, tx) }); err != nil {
		return TranslateError(err)
	}
	return nil
}

// announce arranges the wake-up for events appended in tx: on a Tx (or one
// of its savepoints or views), after its commit; on any other transaction,
// with a transactional pg_notify, which Postgres delivers only if tx
// commits.
func (s *Store) announce(ctx context.Context, tx pgx.Tx, maxID int64) error {
	if t := TxOf(tx); t != nil {
		t.AfterCommit(func() { s.notifier.committed(ctx, maxID) })
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.notify, s.NotifyChannel(), fmt.Sprint(maxID)); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}
