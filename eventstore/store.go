package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/internal/lazytx"
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

// WithTx runs fn in a new transaction and commits it when fn returns nil. Events
// appended through AppendTx/AppendBatchTx inside fn are announced on
// NotifyChannel after the commit and never when the transaction rolls back.
// Every error, fn's included, passes through TranslateError: a connection
// lost anywhere in the transaction is ErrUnavailable.
//
// The transaction costs no round trip of its own: BEGIN travels with fn's
// first statement and COMMIT with what is still queued (statements queued by
// the packages that share the transaction, such as the pipeline's row
// writes); a transaction that sent nothing ends without one. Savepoints
// (tx.Begin) are queued the same way.
func (s *Store) WithTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	w := &txWake{}
	err := lazytx.Run(ctx, s.pool, func(tx *lazytx.Tx) error {
		w.tx = tx
		return fn(context.WithValue(ctx, txWakeKey{}, w), tx)
	})
	if err != nil {
		return TranslateError(err)
	}
	s.notifier.committed(ctx, w.maxID)
	return nil
}

// txWake records, for a transaction opened by WithTx, the highest event id it
// appended, so the notification can be sent after the commit.
type txWake struct {
	tx    *lazytx.Tx
	maxID int64
}

type txWakeKey struct{}

// owns reports whether tx is the transaction WithTx opened, one of its
// savepoints, or a wrapper of either (on the same connection).
func (w *txWake) owns(tx pgx.Tx) bool {
	if t := lazytx.Of(tx); t != nil {
		return t == w.tx
	}
	return tx.Conn() == w.tx.Conn()
}

// announce arranges the wake-up for events appended in tx: after the commit
// when WithTx owns tx, else with a transactional pg_notify (delivered by
// Postgres only if tx commits).
func (s *Store) announce(ctx context.Context, tx pgx.Tx, maxID int64) error {
	if w, ok := ctx.Value(txWakeKey{}).(*txWake); ok && w.owns(tx) {
		w.maxID = max(w.maxID, maxID)
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.notify, s.NotifyChannel(), fmt.Sprint(maxID)); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}
