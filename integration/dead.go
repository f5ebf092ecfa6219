package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// ErrDeadNotFound is returned (wrapped) when no dead message matches; its
// Code is not_found, its Reason dead_message_not_found.
var ErrDeadNotFound error = deadNotFound{}

type deadNotFound struct{}

func (deadNotFound) Error() string  { return "no such dead message" }
func (deadNotFound) Code() string   { return string(kumikotype.CodeNotFound) }
func (deadNotFound) Reason() string { return string(kumikotype.ReasonDeadMessageNotFound) }
func (deadNotFound) Detail() string { return "no such dead message" }

// DeadMessage is a message a handler failed on every attempt.
type DeadMessage struct {
	Message feature.Message `json:"message"`
	// Handler is the handler that failed ("" over RabbitMQ, where a
	// message is dead for the app).
	Handler string `json:"handler,omitempty"`
	// RawID is the AMQP message_id the message was sent with, when it is
	// not Message.ID (see MessageID); "" when it was none.
	RawID     string    `json:"rawId,omitempty"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError"`
	DeadAt    time.Time `json:"deadAt"`
}

// deadStore holds the dead messages of the in-process transport.
type deadStore struct {
	store *eventstore.Store
	sql   queries
}

func newDeadStore(store *eventstore.Store) *deadStore {
	return &deadStore{store: store, sql: newQueries(store.Schema())}
}

// List returns up to limit dead messages, oldest first.
func (d *deadStore) List(ctx context.Context, limit int) ([]DeadMessage, error) {
	rows, err := d.store.Pool().Query(ctx, d.sql.listDead, limit)
	if err != nil {
		return nil, eventstore.TranslateError(err)
	}
	return collectDead(rows)
}

// Drop deletes the dead message id of handler ("" = of every handler) and
// returns how many it deleted; ErrDeadNotFound when none.
func (d *deadStore) Drop(ctx context.Context, id uuid.UUID, handler string) (int64, error) {
	tag, err := d.store.Pool().Exec(ctx, d.sql.dropDead, id, handler)
	if err != nil {
		return 0, eventstore.TranslateError(err)
	}
	if tag.RowsAffected() == 0 {
		return 0, fmt.Errorf("%w: %s", ErrDeadNotFound, id)
	}
	return tag.RowsAffected(), nil
}

func (d *deadStore) get(ctx context.Context, id uuid.UUID, handler string) ([]DeadMessage, error) {
	rows, err := d.store.Pool().Query(ctx, d.sql.getDead, id, handler)
	if err != nil {
		return nil, eventstore.TranslateError(err)
	}
	out, err := collectDead(rows)
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("%w: %s", ErrDeadNotFound, id)
	}
	return out, err
}

func collectDead(rows pgx.Rows) ([]DeadMessage, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadMessage, error) {
		var (
			dm     DeadMessage
			id     uuid.UUID
			typ    string
			tenant uuid.UUID
			raw    []byte
		)
		if err := r.Scan(&id, &dm.Handler, &typ, &tenant, &raw, &dm.Attempts, &dm.LastError, &dm.DeadAt); err != nil {
			return dm, err
		}
		if err := json.Unmarshal(raw, &dm.Message); err != nil {
			return dm, fmt.Errorf("dead message %s: %w", id, err)
		}
		return dm, nil
	})
}

// retry runs the handler of the dead message id ("" = every handler it is
// dead for) once more; a success removes it from the dead messages, a
// failure keeps it with the new error and returns it.
func (s *Service) retry(ctx context.Context, id uuid.UUID, handler string) error {
	d := newDeadStore(s.store)
	dead, err := d.get(ctx, id, handler)
	if err != nil {
		return err
	}
	var errs []error
	for _, dm := range dead {
		if !s.hasHandler(dm.Message.Type, dm.Handler) {
			errs = append(errs, fmt.Errorf("handler %s of %s is not in this app; drop the message instead", dm.Handler, dm.Message.Type))
			continue
		}
		if herr := s.handle(ctx, dm.Message, dm.Handler)[dm.Handler]; herr != nil {
			errs = append(errs, coded("handler "+dm.Handler, herr))
			if err := s.putDead(ctx, dm.Message, dm.Handler, 1, herr); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if _, err := d.Drop(ctx, id, dm.Handler); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Service) hasHandler(typ, name string) bool {
	for _, h := range s.handlers[typ] {
		if h.Name == name {
			return true
		}
	}
	return false
}

// forgetDead is the pipeline.ForgetStep that nulls a forgotten subject's
// personal fields in the dead messages the in-process transport keeps; nil
// when no contract of reg has personal fields.
func forgetDead(reg *registry.Registry, sql queries) pipeline.ForgetStep {
	type contract struct {
		Subject string         `json:"subject"`
		Nulls   map[string]any `json:"nulls"`
	}
	byType := map[string]contract{}
	for _, c := range reg.Contracts() {
		for field, subject := range c.Personal {
			ct, ok := byType[c.Name]
			if !ok {
				ct = contract{Subject: subject, Nulls: map[string]any{}}
			}
			ct.Nulls[field] = nil
			byType[c.Name] = ct
		}
	}
	if len(byType) == 0 {
		return nil
	}
	arg, _ := json.Marshal(byType)
	return func(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) error {
		if _, err := tx.Exec(ctx, sql.forgetDead, tenant, arg, subject); err != nil {
			return fmt.Errorf("forget the subject's dead messages: %w", err)
		}
		return nil
	}
}
