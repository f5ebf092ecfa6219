package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kumiko-go/kumiko/feature"
)

// deliverLocally is the in-process transport: it runs the app's handlers on
// each message in order, retrying a failing handler with backoff up to
// MaxAttempts in all, then keeping the message as dead for that handler. A
// message of a contract version the app does not know, or one that breaks
// its contract, is kept dead at once. It returns an error only when a message could not be settled
// either way (the context ended, the database failed): the relay then
// tries the batch again, and the inbox skips what was handled.
func (s *Service) deliverLocally(ctx context.Context, msgs []feature.Message) error {
	for _, m := range msgs {
		pctx, m, span := s.startPublish(ctx, m)
		err := s.settle(pctx, m)
		endSpan(span, err)
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) settle(ctx context.Context, m feature.Message) error {
	pause := s.cfg.RetryBackoff
	failed := s.handle(withAttempt(ctx, 1), m, "")
	attempts := 1
	for ; len(failed) > 0 && attempts < s.cfg.MaxAttempts && !anyFinal(failed); attempts++ {
		if err := wait(ctx, pause); err != nil {
			return err
		}
		pause *= 2
		retry := failed
		failed = nil
		for name := range retry {
			for n, err := range s.handle(withAttempt(ctx, attempts+1), m, name) {
				if failed == nil {
					failed = map[string]error{}
				}
				failed[n] = err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err // cancelled mid-attempt: not the handler's failure
	}
	for name, herr := range failed {
		if err := s.putDead(ctx, m, name, attempts, herr); err != nil {
			return err
		}
		s.cfg.Logger.Warn("integration: handler failed; the message is kept as dead",
			"handler", name, "message_id", m.ID, "type", m.Type, "attempts", attempts, "err", herr)
	}
	return nil
}

func anyFinal(failed map[string]error) bool {
	for _, err := range failed {
		if final(err) {
			return true
		}
	}
	return false
}

func (s *Service) putDead(ctx context.Context, m feature.Message, handler string, attempts int, cause error) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	text := coded("handler "+handler, cause).Error()
	if _, err := s.store.Pool().Exec(ctx, s.sql.putDead, m.ID, handler, m.Type, m.TenantID, raw, attempts, text); err != nil {
		return fmt.Errorf("keep dead message %s: %w", m.ID, err)
	}
	s.metrics.dead.WithLabelValues(handler).Inc()
	return nil
}

// wait pauses for d or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
