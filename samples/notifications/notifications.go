// Package notifications is the delivery sample: a notification is sent to a
// webhook by a job, and its delivery status is an aggregate of its own whose
// events — delivery.requested, attempted, failed, retried, succeeded — are
// the whole history. Retries are planned from that history: the number of
// failed attempts decides the next delay and when to give up.
package notifications

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
)

// Send is the input of "notification.send".
type Send struct {
	URL     string `json:"url" validate:"required,url"`
	Message string `json:"message" validate:"required,max=2000"`
}

// DeliveryRequested starts a delivery stream.
type DeliveryRequested struct {
	URL     string `json:"url" validate:"required"`
	Message string `json:"message"`
}

// DeliveryAttempted, DeliveryFailed, DeliveryRetried and DeliverySucceeded
// record one attempt and its outcome.
type (
	DeliveryAttempted struct {
		Attempt int `json:"attempt" validate:"min=1"`
	}
	DeliveryFailed struct {
		Attempt int    `json:"attempt" validate:"min=1"`
		Error   string `json:"error"`
	}
	DeliveryRetried struct {
		Attempt int       `json:"attempt" validate:"min=1"` // the attempt planned next
		At      time.Time `json:"at"`
	}
	DeliverySucceeded struct {
		Attempt int `json:"attempt" validate:"min=1"`
		Status  int `json:"status"`
	}
)

// DeliverArgs are the args of "delivery.send": the attempt the history
// planned. A run whose attempt the history has already seen does nothing.
type DeliverArgs struct {
	DeliveryID uuid.UUID `json:"deliveryId"`
	Attempt    int       `json:"attempt"`
}

// StatusQuery is the input of "delivery.status".
type StatusQuery struct {
	ID uuid.UUID `json:"id" validate:"required"`
}

// Status is the answer of "delivery.status", folded from the stream.
type Status struct {
	ID        uuid.UUID `json:"id"`
	State     string    `json:"state"` // pending, retrying, succeeded, failed
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError,omitempty"`
}

// Config tunes the sample.
type Config struct {
	// MaxAttempts before a delivery is failed for good; default 5.
	MaxAttempts int
	// Delay before attempt n+1 after n failures; default 2^(n-1) seconds.
	Delay func(failures int) time.Duration
	// Client sends the webhooks; default a client with a 10 s timeout.
	Client *http.Client
}

// New returns the notifications feature.
func New(cfg Config) *feature.Feature {
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Delay == nil {
		cfg.Delay = func(n int) time.Duration { return time.Second << (n - 1) }
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	d := deliverer{cfg}
	return feature.Define("notifications", func(r *feature.Registrar) {
		r.DefineEvent("delivery.requested", DeliveryRequested{})
		r.DefineEvent("delivery.attempted", DeliveryAttempted{})
		r.DefineEvent("delivery.failed", DeliveryFailed{})
		r.DefineEvent("delivery.retried", DeliveryRetried{})
		r.DefineEvent("delivery.succeeded", DeliverySucceeded{})
		r.Command("notification.send", Send{}, feature.Roles("User"), send)
		r.Query("delivery.status", StatusQuery{}, feature.Roles("User"), status)
		// The first attempt follows the request; retries are enqueued by
		// the attempts themselves, at the time the history says.
		r.Job("delivery.start", DeliveryRequested{}, d.start, feature.OnEvent("delivery.requested"))
		r.Job("delivery.send", DeliverArgs{}, d.send, feature.UniqueFor(time.Hour))
	})
}

func send(ctx feature.CommandContext, in Send) (any, error) {
	ref, err := ctx.AppendEvent(feature.AppendSpec{AggregateType: "delivery", Type: "delivery.requested",
		Payload: DeliveryRequested(in)})
	if err != nil {
		return nil, err
	}
	return map[string]any{"id": ref.AggregateID}, nil
}

func status(ctx feature.CommandContext, in StatusQuery) (any, error) {
	agg, err := ctx.LoadAggregate(in.ID, "delivery", feature.LoadOptions{})
	if err != nil || agg.Version() == 0 {
		return nil, err
	}
	h := fold(agg.Events())
	return Status{ID: in.ID, State: h.state, Attempts: h.attempts, LastError: h.lastError}, nil
}

// history is what a delivery's events say.
type history struct {
	url, message, state, lastError string
	attempts, failures             int
}

func fold(evs []feature.Event) history {
	var h history
	for _, e := range evs {
		switch e.Type {
		case "delivery.requested":
			p, _ := feature.Decode[DeliveryRequested](e)
			h.url, h.message, h.state = p.URL, p.Message, "pending"
		case "delivery.attempted":
			h.attempts++
		case "delivery.failed":
			p, _ := feature.Decode[DeliveryFailed](e)
			h.failures++
			h.lastError, h.state = p.Error, "failed"
		case "delivery.retried":
			h.state = "retrying"
		case "delivery.succeeded":
			h.state = "succeeded"
		}
	}
	return h
}

type deliverer struct{ cfg Config }

func (d deliverer) start(ctx feature.JobContext, _ DeliveryRequested) error {
	ev, ok := ctx.Event()
	if !ok {
		return nil
	}
	return d.attempt(ctx, ev.AggregateID, 1)
}

func (d deliverer) send(ctx feature.JobContext, in DeliverArgs) error {
	return d.attempt(ctx, in.DeliveryID, in.Attempt)
}

// attempt makes the next attempt the history calls for and records it with
// its outcome; a failure plans the next attempt or gives up. It returns nil
// in both cases: the events, not River's retries, carry the retry logic.
func (d deliverer) attempt(ctx feature.JobContext, id uuid.UUID, planned int) error {
	stream, err := ctx.LoadAggregate(id, "delivery", feature.LoadOptions{})
	if err != nil {
		return err
	}
	h := fold(stream.Events())
	n := h.attempts + 1
	if (h.state != "pending" && h.state != "retrying") || n != planned {
		return nil // succeeded, given up, or this attempt was made: a duplicate run changes nothing
	}
	if err := stream.Append("delivery.attempted", DeliveryAttempted{Attempt: n}); err != nil {
		return err
	}
	code, postErr := d.post(ctx.Context(), h.url, h.message)
	if postErr == nil {
		return stream.Append("delivery.succeeded", DeliverySucceeded{Attempt: n, Status: code})
	}
	if err := stream.Append("delivery.failed", DeliveryFailed{Attempt: n, Error: postErr.Error()}); err != nil {
		return err
	}
	if n >= d.cfg.MaxAttempts {
		return nil
	}
	at := time.Now().Add(d.cfg.Delay(h.failures + 1))
	if err := stream.Append("delivery.retried", DeliveryRetried{Attempt: n + 1, At: at}); err != nil {
		return err
	}
	return ctx.Enqueue("delivery.send", DeliverArgs{DeliveryID: id, Attempt: n + 1}, at)
}

func (d deliverer) post(ctx context.Context, url, message string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(fmt.Sprintf("{\"message\":%q}", message))))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}
