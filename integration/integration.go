package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// RelayName is the relay's consumer: its shard in kumiko_event_consumers
// (GET /api/consumers, `consumer list`) shows how far publishing lags.
const RelayName = "kumiko.integration-relay"

// Defaults of Config.
const (
	DefaultMaxAttempts  = 5
	DefaultRetryBackoff = 100 * time.Millisecond
)

// Config configures a Service. The zero value delivers in process.
type Config struct {
	// Transport carries messages to the apps that handle them; nil = in
	// process: the app's own handlers get every message it publishes.
	Transport Transport
	// MaxAttempts is how often the in-process transport runs a failing
	// handler on a message before it keeps the message as dead; default 5.
	MaxAttempts int
	// RetryBackoff is the in-process pause after a first failed attempt,
	// doubling after each further one; default 100ms.
	RetryBackoff time.Duration
	// Logger default slog.Default().
	Logger *slog.Logger
	// Metrics registers the kumiko_integration_* series; nil keeps them
	// unregistered.
	Metrics prometheus.Registerer
	// TracerProvider makes the spans of publishing and handling (see
	// TracerName). Default: none are recorded.
	TracerProvider trace.TracerProvider
	// InboxRetention is how long kumiko_inbox keeps the record that a
	// handler handled a message; a started Service deletes older rows every
	// InboxSweepInterval (first right after Start), InboxSweepBatch rows
	// per statement. It must exceed the time a message may be redelivered
	// in: a message redelivered after its rows are gone runs its handlers
	// again. Default DefaultInboxRetention (7 days); negative keeps the rows
	// forever.
	InboxRetention time.Duration
	// InboxSweepInterval is the pause between two sweeps; default
	// DefaultInboxSweepInterval (1h).
	InboxSweepInterval time.Duration
	// InboxSweepBatch is how many rows one delete statement removes at
	// most; default DefaultInboxSweepBatch (1000).
	InboxSweepBatch int
}

// Transport carries published messages to other processes and apps and
// hands back the ones addressed to this app.
type Transport interface {
	// Publish sends msgs in order and returns nil only once the transport
	// has them safe (a broker confirmed each); the relay advances after it.
	Publish(ctx context.Context, msgs []feature.Message) error
	// Start receives messages of types (the contracts the app handles) and
	// calls handle for each until Stop; a message for which handle fails
	// is delivered again later. A transport may be started with no types,
	// to publish only.
	Start(ctx context.Context, types []string, handle func(context.Context, feature.Message) error) error
	// Stop ends receiving and releases the connections.
	Stop(ctx context.Context) error
}

// Service publishes the app's integration events through a transport and
// runs the app's handlers on the messages it receives.
type Service struct {
	exec     *pipeline.Executor
	store    *eventstore.Store
	cfg      Config
	sql      queries
	metrics  *metrics
	tracer   trace.Tracer
	handlers map[string][]registry.IntegrationHandler // by contract

	stopSweep context.CancelFunc // of the inbox sweep, while started
	swept     chan struct{}      // closed when the sweep has stopped
	running   lifecycle.Work     // the handlers running, by handler and message
}

// New returns the integration service of the executor's app. It touches
// nothing until Start and the relay consumer's passes.
func New(exec *pipeline.Executor, store *eventstore.Store, cfg Config) (*Service, error) {
	if exec == nil || store == nil {
		return nil, errors.New("integration: executor and store are required")
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = noop.NewTracerProvider()
	}
	if cfg.InboxRetention == 0 {
		cfg.InboxRetention = DefaultInboxRetention
	}
	if cfg.InboxSweepInterval <= 0 {
		cfg.InboxSweepInterval = DefaultInboxSweepInterval
	}
	if cfg.InboxSweepBatch <= 0 {
		cfg.InboxSweepBatch = DefaultInboxSweepBatch
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("integration: metrics: %w", err)
	}
	s := &Service{exec: exec, store: store, cfg: cfg, sql: newQueries(store.Schema()), metrics: m,
		tracer: cfg.TracerProvider.Tracer(TracerName), handlers: map[string][]registry.IntegrationHandler{}}
	for _, h := range exec.Registry().IntegrationHandlers() {
		s.handlers[h.Event] = append(s.handlers[h.Event], h)
	}
	if forget := forgetDead(exec.Registry(), s.sql); forget != nil {
		exec.OnForget(forget)
	}
	return s, nil
}

// Relay is the consumer that publishes the app's messages, in id order, to
// run on the app's dispatcher; ok is false when the app declares no
// integration events. A pass moves the cursor only after the transport
// confirmed the batch; a transport that fails (a broker away) is retried
// with the dispatcher's backoff, never given up on.
func (s *Service) Relay() (c consumer.Consumer, ok bool) {
	contracts := s.exec.Registry().Contracts()
	if len(contracts) == 0 {
		return consumer.Consumer{}, false
	}
	types := make([]string, len(contracts))
	for i, c := range contracts {
		types[i] = c.Name
	}
	return consumer.Consumer{
		Name:        RelayName,
		Delivery:    feature.Shared,
		Types:       types,
		MaxAttempts: math.MaxInt32,
		HandleBatch: s.relay,
	}, true
}

// relay publishes one pass's messages.
func (s *Service) relay(ctx context.Context, _ pgx.Tx, evs []eventstore.Event) error {
	msgs := make([]feature.Message, 0, len(evs))
	for _, ev := range evs {
		if ev.AggregateType == pipeline.MessageStream {
			msgs = append(msgs, messageOf(ev))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	var err error
	if s.cfg.Transport == nil {
		err = s.deliverLocally(ctx, msgs)
	} else {
		spans := make([]trace.Span, len(msgs))
		for i := range msgs {
			_, msgs[i], spans[i] = s.startPublish(ctx, msgs[i])
		}
		err = s.cfg.Transport.Publish(ctx, msgs)
		for _, span := range spans {
			endSpan(span, err)
		}
	}
	if err != nil {
		return err
	}
	for _, m := range msgs {
		s.metrics.published.WithLabelValues(m.Type).Inc()
	}
	return nil
}

// messageOf is the message a published event carries.
func messageOf(ev eventstore.Event) feature.Message {
	m := feature.Message{
		ID: ev.AggregateID, Type: ev.Type, Version: ev.EventVersion, Payload: ev.Payload,
		TenantID: ev.TenantID, UserID: ev.Metadata.UserID, CorrelationID: ev.Metadata.CorrelationID,
		CausationID: ev.Metadata.CausationID, Headers: ev.Metadata.Headers, PublishedAt: ev.CreatedAt,
	}
	if key, ok := m.Headers[pipeline.MessageKeyHeader]; ok {
		m.Key, m.Headers = key, maps.Clone(m.Headers)
		delete(m.Headers, pipeline.MessageKeyHeader)
		if len(m.Headers) == 0 {
			m.Headers = nil
		}
	}
	return m
}

// types are the contracts the app has handlers for that pick picks,
// which a transport subscribes to.
func (s *Service) types(pick picker) []string {
	var out []string
	for _, c := range s.exec.Registry().Contracts() {
		if slices.ContainsFunc(s.handlers[c.Name], pick) {
			out = append(out, c.Name)
		}
	}
	return out
}

// key is the ordering key of m: the one it came with, else its contract's
// key field (see feature.MessageKey).
func (s *Service) key(m feature.Message) string {
	if m.Key != "" {
		return m.Key
	}
	c, _ := s.exec.Registry().Contract(m.Type)
	return c.KeyOf(m.Payload)
}

// Start starts receiving through the transport and, when the app has
// handlers, the inbox sweep (see Config.InboxRetention). In process it
// receives nothing: the relay delivers. Over RabbitMQ it first unbinds the
// app's queue from the contracts its previous start bound and the app no
// longer handles (kumiko_integration_bindings remembers them), so the
// queue is bound to exactly the contracts handled. ctx bounds only the
// start: the transport's receiving and the sweep run until Stop.
func (s *Service) Start(ctx context.Context) error {
	if err := s.startTransport(ctx); err != nil {
		return err
	}
	if len(s.handlers) > 0 && s.cfg.InboxRetention > 0 && s.stopSweep == nil {
		// The sweep outlives the start call (see lifecycle).
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		s.stopSweep, s.swept = cancel, make(chan struct{})
		go func(done chan struct{}) {
			defer close(done)
			s.sweep(sctx)
		}(s.swept)
	}
	return nil
}

func (s *Service) startTransport(ctx context.Context) error {
	if s.cfg.Transport == nil {
		return nil
	}
	r, ok := s.cfg.Transport.(*Rabbit)
	if !ok {
		return s.cfg.Transport.Start(ctx, s.types(every), s.Handle)
	}
	rs := routes{
		{queue: r.cfg.Queue, types: s.types(orderedOnly(false)), handle: s.handling(orderedOnly(false))},
		{queue: r.OrderedQueue(), types: s.types(orderedOnly(true)), handle: s.handling(orderedOnly(true)), key: s.key},
	}
	for _, rt := range rs {
		if err := s.unbindStale(ctx, r, rt); err != nil {
			return err
		}
	}
	if err := r.start(ctx, rs); err != nil {
		return err
	}
	return s.store.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for _, rt := range rs {
			if _, err := tx.Exec(ctx, s.sql.clearBindings, rt.queue, r.cfg.Exchange); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.sql.addBinding, rt.queue, r.cfg.Exchange, rt.types); err != nil {
				return err
			}
		}
		return nil
	})
}

// unbindStale unbinds the route's queue from the contracts its previous
// start bound and the app no longer routes to it.
func (s *Service) unbindStale(ctx context.Context, r *Rabbit, rt route) error {
	rows, err := s.store.Pool().Query(ctx, s.sql.bindings, rt.queue, r.cfg.Exchange)
	if err != nil {
		return fmt.Errorf("integration: bindings: %w", err)
	}
	bound, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("integration: bindings: %w", err)
	}
	var stale []string
	for _, t := range bound {
		if !slices.Contains(rt.types, t) {
			stale = append(stale, t)
		}
	}
	if err := r.unbind(rt.queue, stale); err != nil {
		return fmt.Errorf("rabbitmq: unbind %s from %v: %w", rt.queue, stale, err)
	}
	return nil
}

// Stop stops the inbox sweep and the transport (see Rabbit.Stop), then
// waits until ctx ends for the handlers still running — in process, the
// relay's pass runs them, and the dispatcher's Stop cancels it. It returns
// an error wrapping ctx's that names the handlers it gave up on: their
// transactions roll back with their inbox rows, so the message is
// delivered to them again.
func (s *Service) Stop(ctx context.Context) error {
	var errs []error
	if s.stopSweep != nil {
		s.stopSweep()
		s.stopSweep = nil
		if !lifecycle.Await(ctx, s.swept, nil) {
			errs = append(errs, fmt.Errorf("integration: the inbox sweep did not stop: %w", ctx.Err()))
		}
	}
	if s.cfg.Transport != nil {
		errs = append(errs, s.cfg.Transport.Stop(ctx))
	}
	errs = append(errs, s.running.Drain(ctx, "integration: abandoned the running handlers", nil))
	return errors.Join(errs...)
}

// Handle runs every handler of m that has not handled it yet, each in its
// own transaction with its inbox row, and returns the failures joined (nil
// when every handler has handled m, now or before, or the app handles no
// message of its type). A transport calls it for each message it receives.
//
// Before any handler runs, m is brought to the app's contract version and
// checked against the contract (schema and validate tags); a message that
// fails either is refused as a whole, with an error for which final is
// true. Every error's text starts with its code: validation_error,
// event_schema_unknown_version, or the code of the handler's error
// (internal_error when it has none) followed by "handler <name>:".
func (s *Service) Handle(ctx context.Context, m feature.Message) error {
	return s.handleAll(ctx, m, every)
}

// picker picks integration handlers: every one, the one of a name, the
// ordered or the other ones.
type picker func(registry.IntegrationHandler) bool

func every(registry.IntegrationHandler) bool { return true }

func named(name string) picker {
	return func(h registry.IntegrationHandler) bool { return name == "" || h.Name == name }
}

func orderedOnly(ordered bool) picker {
	return func(h registry.IntegrationHandler) bool { return h.Ordered == ordered }
}

// handling is Handle for the handlers pick picks: what the queue of the
// ordered handlers, or the app's queue for the others, runs.
func (s *Service) handling(pick picker) func(context.Context, feature.Message) error {
	return func(ctx context.Context, m feature.Message) error { return s.handleAll(ctx, m, pick) }
}

// handleAll is Handle for the handlers pick picks.
func (s *Service) handleAll(ctx context.Context, m feature.Message, pick picker) error {
	if !slices.ContainsFunc(s.handlers[m.Type], pick) {
		return nil
	}
	current, err := s.prepare(m)
	if err != nil {
		s.countFailed(m.Type, pick)
		return err
	}
	failed := s.run(ctx, current, pick)
	errs := make([]error, 0, len(failed))
	for _, name := range slices.Sorted(maps.Keys(failed)) {
		errs = append(errs, coded("handler "+name, failed[name]))
	}
	return errors.Join(errs...)
}

// handle runs the handlers of m (only the one called only, when set) and
// returns the failures by handler: when m cannot be prepared (see
// Handle), that failure for each of them.
func (s *Service) handle(ctx context.Context, m feature.Message, only string) map[string]error {
	pick := named(only)
	current, err := s.prepare(m)
	if err == nil {
		return s.run(ctx, current, pick)
	}
	failed := map[string]error{}
	for _, h := range s.handlers[m.Type] {
		if pick(h) {
			failed[h.Name] = err
		}
	}
	s.countFailed(m.Type, pick)
	return failed
}

// countFailed counts a failed attempt of the handlers of typ that pick
// picks, which never ran.
func (s *Service) countFailed(typ string, pick picker) {
	for _, h := range s.handlers[typ] {
		if pick(h) {
			s.metrics.failed.WithLabelValues(h.Name).Inc()
		}
	}
}

// run runs the handlers of m, already prepared, that pick picks, and
// returns the failures by handler.
func (s *Service) run(ctx context.Context, m feature.Message, pick picker) map[string]error {
	var failed map[string]error
	for _, h := range s.handlers[m.Type] {
		if !pick(h) {
			continue
		}
		ran, err := s.runHandler(ctx, h, m)
		switch {
		case err != nil:
			s.metrics.failed.WithLabelValues(h.Name).Inc()
			if failed == nil {
				failed = map[string]error{}
			}
			failed[h.Name] = err
		case ran:
			s.metrics.handled.WithLabelValues(h.Name).Inc()
		}
	}
	return failed
}

// prepare brings m to the app's version of its contract and checks its
// payload against the contract. A version the app does not know (newer
// than its own) is an error that starts with the code
// event_schema_unknown_version and wraps the
// *eventstore.UnknownEventVersionError: the message is kept dead, for a
// retry once the app knows the version. A payload that breaks the
// contract is a validation_error with the paths of its problems, wrapping
// the *registry.ValidationError.
func (s *Service) prepare(m feature.Message) (feature.Message, error) {
	v, p, err := s.exec.Registry().UpcastMessage(m.Type, m.Version, m.Payload)
	var unknown *eventstore.UnknownEventVersionError
	switch {
	case errors.As(err, &unknown):
		return m, fmt.Errorf("%s: message %s of %s has contract version %d, this app knows version %d; "+
			"retry it once the app knows version %d: %w", unknown.Code(), m.ID, m.Type, m.Version, unknown.Current, m.Version, err)
	case err != nil:
		return m, coded(fmt.Sprintf("message %s", m.ID), err)
	case v != m.Version:
		m.PublishedVersion, m.Version, m.Payload = m.Version, v, p
	}
	if _, err := s.exec.Registry().DecodePayload(m.Type, m.Payload); err != nil {
		return m, invalid(fmt.Sprintf("message %s of %s version %d", m.ID, m.Type, m.Version), err)
	}
	return m, nil
}

// runHandler runs h on m in a transaction of its own that claims the inbox
// row first, under a consumer span that is a child of the publisher's: ran
// is false when h had handled m before.
func (s *Service) runHandler(ctx context.Context, h registry.IntegrationHandler, m feature.Message) (ran bool, err error) {
	defer s.running.Begin(h.Name + " (message " + m.ID.String() + ")")()
	ctx, span := s.startHandle(ctx, h.Name, m)
	defer func() {
		if err == nil && !ran {
			span.SetAttributes(attribute.Bool("kumiko.skipped", true)) // handled before: the inbox has it
		}
		endSpan(span, err)
	}()
	headers := withSpan(ctx, span, m.Headers)
	err = s.store.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var claimed bool
		if err := tx.QueryRow(ctx, s.sql.claim, m.ID, h.Name).Scan(&claimed); errors.Is(err, pgx.ErrNoRows) {
			return nil
		} else if err != nil {
			return err
		}
		ran = true
		c := pipeline.Caller{
			User:          feature.User{ID: m.UserID, TenantID: m.TenantID, Authenticated: m.UserID != ""},
			CorrelationID: m.CorrelationID,
			Headers:       headers,
		}
		return s.exec.RunInTx(ctx, tx, c, h.Feature, m.ID.String(), func(cc feature.CommandContext) error {
			return h.Handle(cc, m)
		})
	})
	return ran && err == nil, err
}
