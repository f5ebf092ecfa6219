package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/sse"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// EventsConsumerName is the name of the consumer [Server.EventsConsumer]
// returns.
const EventsConsumerName = "kumiko.sse"

const (
	// DefaultSSEHeartbeat is the default of Config.SSEHeartbeat.
	DefaultSSEHeartbeat = 15 * time.Second
	// DefaultSSEBuffer is the default of Config.SSEBuffer.
	DefaultSSEBuffer = 256
	// DefaultMaxStreamsPerUser is the default of Config.MaxStreamsPerUser.
	DefaultMaxStreamsPerUser = 16
	// DefaultMaxStreams is the default of Config.MaxStreams.
	DefaultMaxStreams = 1000
	// sseMaxTypes is the most event types ?types= may name.
	sseMaxTypes = 100
	// headerLastEventID is the header an EventSource resumes with.
	headerLastEventID = "Last-Event-ID"
)

// Why the hub ended a client's stream.
const (
	sseDropSlow     = "slow"
	sseDropShutdown = "shutdown"
)

// The details of the 429 rate_limited a stream past a cap answers (reasons
// kumikotype.ReasonTooManyStreams and ReasonStreamsExhausted).
const (
	detailTooManyStreams   = "too many open event streams for this user; close one or retry later"
	detailStreamsExhausted = "the server holds as many event streams as it allows; retry later"
)

// sseHub fans the events of the live feed out to the connected clients of
// GET /api/events and of the projection channels. Publishing never blocks:
// each client has a bounded buffer, and a client whose buffer is full is
// dropped (its stream ends with an overflow frame; it resumes with
// Last-Event-ID). It bounds the open streams, per user and in all.
type sseHub struct {
	// guard hides the fields each client may not read; settled reads the
	// id up to which every event has settled (see eventstore.SettledTx).
	// buffer is each client's buffer; maxPerUser and maxTotal bound the
	// open streams (0: no bound). All are set before the first client
	// subscribes.
	guard      readGuard
	settled    func(context.Context) (int64, error)
	buffer     int
	maxPerUser int
	maxTotal   int
	mu         sync.Mutex
	clients    map[*sseClient]struct{}
	// open counts the streams subscribed and not yet unsubscribed, in all
	// and by user: a dropped client's stream still counts until its
	// handler ends.
	open    int
	perUser map[streamOwner]int
	// last is the hub's position: every event with an id up to it has
	// settled — no lower id can still commit — and every event after it
	// will be published. The feed comes from a consumer of the event
	// dispatcher, which delivers in id order and only settled events. It
	// stands by while the hub has no client; the first client moves last
	// up to the settled end of the log, and the events the feed brings up
	// to it are dropped.
	last   int64
	closed bool
}

// streamOwner is whose streams count together against MaxStreamsPerUser.
type streamOwner struct {
	tenant uuid.UUID
	user   string
}

// sseClient is one open stream.
type sseClient struct {
	tenant uuid.UUID
	user   feature.User
	types  *typeFilter // nil: every type
	// accept, when set, selects the events instead of types, and the
	// client gets them unrendered (a projection channel's client).
	accept func(eventstore.Event) bool
	frames chan sseFrame
	// gone is closed when the hub drops the client; reason says why.
	gone   chan struct{}
	reason string
}

// sseFrame is an event rendered once for every client that receives it,
// or the event itself for a client with accept.
type sseFrame struct {
	id  int64
	raw []byte
	ev  eventstore.Event
}

func (cl *sseClient) wants(ev eventstore.Event) bool {
	if ev.TenantID != cl.tenant {
		return false
	}
	if cl.accept != nil {
		return cl.accept(ev)
	}
	return cl.types.match(ev.Type)
}

// typeFilter is what ?types= selects: exact event types, and patterns
// "prefix.*" that match every type starting with "prefix.". A nil filter
// matches every type.
type typeFilter struct {
	exact    map[string]bool
	prefixes []string
}

func (f *typeFilter) match(typ string) bool {
	if f == nil || f.exact[typ] {
		return true
	}
	for _, p := range f.prefixes {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

var (
	errStreamsClosed    = errors.New("event streams are closed")
	errTooManyStreams   = errors.New("the user holds the most event streams allowed")
	errStreamsExhausted = errors.New("the server holds the most event streams allowed")
)

// subscribe adds a client of tenant for types (nil: all) and returns it with
// the hub's position: every event after it reaches the client (unless it is
// dropped), none before it does, and every event up to it has settled.
func (h *sseHub) subscribe(ctx context.Context, user feature.User, types *typeFilter) (cl *sseClient, position int64, err error) {
	return h.add(ctx, &sseClient{tenant: user.TenantID, user: user, types: types})
}

// subscribeEvents is subscribe for a client that takes the events of its
// tenant that accept selects, unrendered.
func (h *sseHub) subscribeEvents(ctx context.Context, user feature.User, accept func(eventstore.Event) bool) (cl *sseClient, position int64, err error) {
	return h.add(ctx, &sseClient{tenant: user.TenantID, user: user, accept: accept})
}

// add adds cl. A client of a hub without clients reads where the log has
// settled first: the feed stood by, so the hub's position is behind.
func (h *sseHub) add(ctx context.Context, cl *sseClient) (_ *sseClient, position int64, err error) {
	var settled int64
	if h.idle() {
		if settled, err = h.settled(ctx); err != nil {
			return nil, 0, err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, 0, errStreamsClosed
	}
	owner := streamOwner{cl.tenant, cl.user.ID}
	switch {
	case h.maxPerUser > 0 && h.perUser[owner] >= h.maxPerUser:
		return nil, 0, errTooManyStreams
	case h.maxTotal > 0 && h.open >= h.maxTotal:
		return nil, 0, errStreamsExhausted
	}
	if h.perUser == nil {
		h.perUser = map[streamOwner]int{}
	}
	h.open++
	h.perUser[owner]++
	if len(h.clients) == 0 {
		// Nobody misses the events up to settled that the feed has yet to
		// bring; with a client already there, last is current.
		h.last = max(h.last, settled)
	}
	if h.clients == nil {
		h.clients = map[*sseClient]struct{}{}
	}
	cl.frames, cl.gone = make(chan sseFrame, h.buffer), make(chan struct{})
	h.clients[cl] = struct{}{}
	return cl, h.last, nil
}

// idle reports whether the hub has no client: its feed stands by.
func (h *sseHub) idle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients) == 0
}

// unsubscribe removes cl if the hub still holds it, and frees its place
// among the open streams; it is called once for each client subscribed.
func (h *sseHub) unsubscribe(cl *sseClient) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, cl)
	h.open--
	owner := streamOwner{cl.tenant, cl.user.ID}
	if h.perUser[owner]--; h.perUser[owner] <= 0 {
		delete(h.perUser, owner)
	}
}

// drop ends cl's stream; h.mu is held.
func (h *sseHub) drop(cl *sseClient, reason string) {
	if _, ok := h.clients[cl]; !ok {
		return
	}
	delete(h.clients, cl)
	cl.reason = reason
	close(cl.gone)
}

// publish hands ev to every client that wants it, without ever waiting. An
// event at or below the newest one published is a redelivery (a pass whose
// transaction failed after its handler ran) and is ignored.
func (h *sseHub) publish(ev eventstore.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.ID <= h.last {
		return nil
	}
	h.last = ev.ID
	frames := map[string]sseFrame{} // by the fields hidden from the client
	for cl := range h.clients {
		if !cl.wants(ev) {
			continue
		}
		if cl.accept != nil {
			h.offer(cl, sseFrame{id: ev.ID, ev: ev})
			continue
		}
		hidden := h.guard.hidden(ev.Type, cl.user)
		frame, ok := frames[hiddenKey(hidden)]
		if !ok {
			raw, err := renderFor(ev, hidden)
			if err != nil {
				return err
			}
			frame = sseFrame{id: ev.ID, raw: raw}
			frames[hiddenKey(hidden)] = frame
		}
		h.offer(cl, frame)
	}
	return nil
}

// offer queues frame for cl, or drops cl when its buffer is full; h.mu is
// held.
func (h *sseHub) offer(cl *sseClient, frame sseFrame) {
	select {
	case cl.frames <- frame:
	default:
		h.drop(cl, sseDropSlow)
	}
}

// close ends every stream and refuses new ones.
func (h *sseHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for cl := range h.clients {
		h.drop(cl, sseDropShutdown)
	}
}

// feedPassInterval is the most often the /api/events feed's consumer passes
// while writes keep coming: the most a frame waits for commits after it.
const feedPassInterval = 10 * time.Millisecond

// EventsConsumer is the per-instance consumer that feeds GET /api/events:
// add it to the event dispatcher of the process that runs this server. Its
// Handle passes each event to the connected clients and returns at once; it
// never fails and never waits for a client. While no client is connected it
// stands by (consumer.Consumer.Standby): it passes at the dispatcher's poll
// interval instead of on every commit.
func (s *Server) EventsConsumer() consumer.Consumer {
	return consumer.Consumer{
		Name:      EventsConsumerName,
		Delivery:  feature.PerInstance,
		StartFrom: feature.FromNow,
		// The feed keeps nothing in the database: a cursor lost in a crash
		// replays a few events: a hub ignores what it published, a resuming
		// subscriber what it has.
		AsyncCommit: true,
		// Under a steady stream of writes, one pass per 10 ms serves every
		// subscriber: a pass per write would cost each write a pass.
		MinPassInterval: feedPassInterval,
		// With nobody listening, following the log once per poll keeps
		// the cursor near its end; the first client then starts from
		// where the log has settled (see sseHub.add).
		Standby: s.hub.idle,
		Handle: func(_ context.Context, _ pgx.Tx, ev eventstore.Event) error {
			if err := s.hub.publish(ev); err != nil {
				// Cannot happen with a stored (valid JSON) payload; a
				// failure here must not stall the feed.
				s.log.Error("event stream: render event", "eventId", ev.ID, "err", err)
			}
			return nil
		},
	}
}

// CloseStreams ends every open GET /api/events stream; later requests answer
// 503 unavailable. Long-lived streams keep http.Server.Shutdown waiting, so
// register it with http.Server.RegisterOnShutdown (or call it before
// Shutdown).
func (s *Server) CloseStreams() { s.hub.close() }

// wireEvent is the data of an event frame.
type wireEvent struct {
	ID            int64           `json:"id"`
	AggregateID   uuid.UUID       `json:"aggregateId"`
	AggregateType string          `json:"aggregateType"`
	Version       int             `json:"version"`
	Type          string          `json:"type"`
	EventVersion  int             `json:"eventVersion"`
	Payload       json.RawMessage `json:"payload"`
	Metadata      wireMetadata    `json:"metadata"`
	CreatedAt     time.Time       `json:"createdAt"`
}

// wireMetadata is the part of an event's metadata a stream shows: not the
// idempotency key nor the custom headers.
type wireMetadata struct {
	CorrelationID string `json:"correlationId"`
	CausationID   string `json:"causationId"`
	RequestID     string `json:"requestId,omitempty"`
	UserID        string `json:"userId,omitempty"`
}

// renderEvent is ev as an SSE frame: id, event and one data line, then the
// blank line that ends the frame.
func renderEvent(ev eventstore.Event) ([]byte, error) {
	data, err := json.Marshal(wireEvent{
		ID: ev.ID, AggregateID: ev.AggregateID, AggregateType: ev.AggregateType, Version: ev.Version,
		Type: ev.Type, EventVersion: ev.EventVersion, Payload: ev.Payload,
		Metadata: wireMetadata{
			CorrelationID: ev.Metadata.CorrelationID, CausationID: ev.Metadata.CausationID,
			RequestID: ev.Metadata.RequestID, UserID: ev.Metadata.UserID,
		},
		CreatedAt: ev.CreatedAt,
	})
	if err != nil {
		return nil, err
	}
	typ := lineBreaks.Replace(ev.Type)
	b := make([]byte, 0, len(data)+len(typ)+40)
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, ev.ID, 10)
	b = append(b, "\nevent: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...), nil
}

var (
	heartbeatFrame = []byte(": ping\n\n")
	// tokenExpiredFrame is the last frame of a stream whose token expired:
	// no id (the client's Last-Event-ID stays its last event), a stable
	// event name, and the problem fields of the 401 a request with that
	// token would now get.
	tokenExpiredFrame = []byte("event: token_expired\n" +
		`data: {"code":"` + string(kumikotype.CodeUnauthenticated) + `","reason":"` + string(kumikotype.ReasonTokenExpired) +
		`","detail":"the token has expired; reconnect with a fresh token and Last-Event-ID to resume"}` +
		"\n\n")
	// overflowFrame is the last frame of a stream that fell a whole buffer
	// behind the live feed: no id either, so the client resumes from the
	// last event it got.
	overflowFrame = []byte("event: overflow\n" +
		`data: {"code":"overflow","reason":"` + string(kumikotype.ReasonSlowClient) + `","detail":"the client fell too far behind the live events; reconnect with Last-Event-ID to resume"}` +
		"\n\n")
	// lineBreaks would end an SSE field early.
	lineBreaks = strings.NewReplacer("\r", "", "\n", "")
)

// GET /api/events: the caller's tenant's events as Server-Sent Events. With
// a resume point (Last-Event-ID, else ?after=) the events after it are
// replayed from the store first; then the stream goes live.
//
// The switch-over has no gap and no duplicate: the client subscribes to the
// live feed before the replay, at the hub's position P. Everything up to P
// has settled (no lower id can still commit), so the replay reads the store
// up to P and the feed brings everything after.
//
// The stream ends when the caller's token expires, with a last
// `event: token_expired` frame: the client reconnects with a fresh token
// and Last-Event-ID.
func (s *Server) events(c echo.Context) error {
	u := userOf(c)
	if !u.Authenticated {
		return unauthenticated("", "sign in to follow events", nil)
	}
	req, err := parseEventsRequest(c)
	if err != nil {
		return err
	}
	cl, position, err := s.hub.subscribe(c.Request().Context(), u, req.filter)
	if err != nil {
		return subscribeFailed(err)
	}
	defer s.hub.unsubscribe(cl)

	var replay func() (eventstore.Event, error, bool)
	if req.resume {
		var stop func()
		replay, stop, err = replayFirst(s.store.ReadAll(c.Request().Context(), req.after,
			eventstore.ReadFilter{TenantID: u.TenantID, Types: req.storeTypes()}))
		defer stop()
		if err != nil {
			return pipeline.AsError(err) // nothing is sent yet: an outage is a 503
		}
	}

	w := startStream(c)
	defer w.Release()
	if err := w.Flush(); err != nil {
		return nil // the client is gone
	}

	// The stream ends when the caller's token does: a stream must not
	// outlive the authority it was opened with.
	st := &sseStream{c: c, cl: cl, w: w}
	if exp, ok := tokenExpiryOf(c); ok {
		t := time.NewTimer(time.Until(exp))
		defer t.Stop()
		st.expired = t.C
	}

	if req.resume {
		if done, err := s.replay(st, replay, req.after, position); done {
			return err
		}
	}
	return s.live(st, req)
}

// subscribeFailed is the answer to a subscription the hub refused: 429
// rate_limited past a cap on open streams (with Retry-After), 503 when the
// streams are closed or the database is out.
func subscribeFailed(err error) error {
	switch {
	case errors.Is(err, errStreamsClosed):
		return newAPIError(pipeline.CodeUnavailable, kumikotype.ReasonShuttingDown, "the server is shutting down; retry later").WithCause(err)
	case errors.Is(err, errTooManyStreams):
		return newAPIError(codeRateLimited, kumikotype.ReasonTooManyStreams, detailTooManyStreams).WithCause(err)
	case errors.Is(err, errStreamsExhausted):
		return newAPIError(codeRateLimited, kumikotype.ReasonStreamsExhausted, detailStreamsExhausted).WithCause(err)
	}
	return pipeline.AsError(err)
}

// eventsRequest is what a GET /api/events asks for: the event types (a nil
// filter means every type) and the resume point, if any.
type eventsRequest struct {
	filter *typeFilter
	after  int64 // the id of the last event the client has
	resume bool  // after is set: replay from the store first
}

// storeTypes narrows the replay's read to the exact types asked for; with
// a pattern among them the read takes every type and the stream filters.
func (r eventsRequest) storeTypes() []string {
	if r.filter == nil || len(r.filter.prefixes) > 0 {
		return nil
	}
	types := make([]string, 0, len(r.filter.exact))
	for t := range r.filter.exact {
		types = append(types, t)
	}
	return types
}

// parseEventsRequest reads ?types=, then Last-Event-ID or ?after=; a
// malformed one is a 400 before anything is subscribed.
func parseEventsRequest(c echo.Context) (eventsRequest, error) {
	types, err := sseTypes(c.QueryParam("types"))
	if err != nil {
		return eventsRequest{}, err
	}
	after, resume, err := sseResumePoint(c)
	if err != nil {
		return eventsRequest{}, err
	}
	req := eventsRequest{after: after, resume: resume}
	if types != nil {
		req.filter = &typeFilter{exact: map[string]bool{}}
		for _, t := range types {
			if prefix, ok := strings.CutSuffix(t, "*"); ok {
				req.filter.prefixes = append(req.filter.prefixes, prefix)
			} else {
				req.filter.exact[t] = true
			}
		}
	}
	return req, nil
}

// startStream answers 200 with the event-stream headers; the caller
// flushes them and calls Release when the stream ends.
func startStream(c echo.Context) *sse.Writer {
	return sse.Start(c.Response(), "no-cache")
}

// sseStream is one open stream: its request, its hub client, its writer
// and when its token expires (nil: never).
type sseStream struct {
	c       echo.Context
	cl      *sseClient
	w       *sse.Writer
	expired <-chan time.Time
}

// replay sends the stored events after the resume point up to the hub's
// position (the live feed brings the rest, in order); done means the stream
// is over and events returns err.
func (s *Server) replay(st *sseStream, next func() (eventstore.Event, error, bool), after, position int64) (done bool, err error) {
	ctx := st.c.Request().Context()
	for ev, err, ok := next(); ok; ev, err, ok = next() {
		if err != nil {
			if ctx.Err() == nil {
				infoOf(st.c).log.Error("event stream: replay failed", "after", after, "err", err)
			}
			return true, nil // the client resumes from what it got
		}
		if ev.ID > position {
			break // the live feed brings the rest, in order
		}
		if !st.cl.types.match(ev.Type) {
			continue
		}
		frame, err := renderFor(ev, s.hub.guard.hidden(ev.Type, st.cl.user))
		if err == nil {
			err = st.w.Write(frame)
		}
		if err != nil {
			return true, nil
		}
		select {
		case <-st.cl.gone:
			return true, s.streamEnded(st)
		case <-st.expired:
			return true, st.w.End(tokenExpiredFrame)
		default:
		}
	}
	if err := st.w.Flush(); err != nil {
		return true, nil
	}
	return false, nil
}

// live sends the hub's frames as they come, skipping those up to the
// client's resume point, flushing once a burst is written, and a heartbeat
// every SSEHeartbeat; it returns when the client goes, the hub drops it or
// its token expires.
func (s *Server) live(st *sseStream, req eventsRequest) error {
	ctx := st.c.Request().Context()
	cl, w := st.cl, st.w
	beat := time.NewTicker(s.cfg.SSEHeartbeat)
	defer beat.Stop()
	dirty := false // frames written but not flushed
	for {
		select {
		case <-cl.gone:
			return s.streamEnded(st)
		default:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-cl.gone:
			return s.streamEnded(st)
		case <-st.expired:
			return w.End(tokenExpiredFrame)
		case <-beat.C:
			if err := w.Write(heartbeatFrame); err != nil {
				return nil
			}
			if err := w.Flush(); err != nil {
				return nil
			}
			dirty = false
		case f := <-cl.frames:
			if !req.resume || f.id > req.after { // else the client had it already
				if err := w.Write(f.raw); err != nil {
					return nil
				}
				dirty = true
			}
			if dirty && len(cl.frames) == 0 { // flush once a burst is written
				if err := w.Flush(); err != nil {
					return nil
				}
				dirty = false
			}
		}
	}
}

// streamEnded ends a stream the hub dropped: a client too slow gets a last
// overflow frame (the frames still buffered for it are not sent), and the
// drop is logged. The response is complete either way.
func (s *Server) streamEnded(st *sseStream) error {
	if st.cl.reason != sseDropSlow {
		return nil
	}
	infoOf(st.c).log.Warn("event stream: client too slow; disconnected (it resumes with Last-Event-ID)", "buffer", s.hub.buffer)
	return st.w.End(overflowFrame)
}

// sseTypes parses ?types=a.b,c.*; nil means every type. A pattern ends in
// ".*" and matches every type with that prefix ("task.*": task.created,
// task.completed, …).
func sseTypes(q string) ([]string, error) {
	if strings.TrimSpace(q) == "" {
		return nil, nil
	}
	var types []string
	seen := map[string]bool{}
	for _, t := range strings.Split(q, ",") {
		t = strings.TrimSpace(t)
		if t == "" || seen[t] {
			continue
		}
		if strings.Contains(strings.TrimSuffix(t, ".*"), "*") || t == "*" {
			return nil, invalidInput(kumikotype.ReasonInvalidTypes, "a pattern in types ends in .* after a prefix, e.g. task.*",
				registry.FieldError{Path: "types", Code: string(kumikotype.FieldCodePattern), Message: "* only as the last segment: task.*"})
		}
		seen[t] = true
		types = append(types, t)
	}
	if len(types) > sseMaxTypes {
		return nil, invalidInput(kumikotype.ReasonInvalidTypes, "types names at most "+strconv.Itoa(sseMaxTypes)+" event types",
			registry.FieldError{Path: "types", Code: string(kumikotype.FieldCodeMax), Message: "at most " + strconv.Itoa(sseMaxTypes) + " event types"})
	}
	if len(types) == 0 {
		return nil, nil
	}
	return types, nil
}

// replayFirst pulls seq's first element at once, so its first page is read
// before the answer starts, and returns that element's error; next yields
// the element again, then the rest.
func replayFirst(seq iter.Seq2[eventstore.Event, error]) (next func() (eventstore.Event, error, bool), stop func(), err error) {
	pull, stop := iter.Pull2(seq)
	ev, err, ok := pull()
	first := true
	return func() (eventstore.Event, error, bool) {
		if first {
			first = false
			return ev, err, ok
		}
		return pull()
	}, stop, err
}

// sseResumePoint is the Last-Event-ID header, else ?after=: the id of the
// last event the client has. The header wins: an EventSource sends it on
// reconnecting, to the URL it first opened.
func sseResumePoint(c echo.Context) (after int64, resume bool, err error) {
	raw, path := strings.TrimSpace(c.Request().Header.Get(headerLastEventID)), headerLastEventID
	if raw == "" {
		raw, path = strings.TrimSpace(c.QueryParam("after")), "after"
	}
	if raw == "" {
		return 0, false, nil
	}
	after, err = strconv.ParseInt(raw, 10, 64)
	if err != nil || after < 0 {
		return 0, false, invalidInput(kumikotype.ReasonInvalidResumePoint, path+" must be an event id (a non-negative integer)",
			registry.FieldError{Path: path, Code: string(kumikotype.FieldCodeType), Message: "must be a non-negative integer"})
	}
	return after, true, nil
}

// settlePoll is how often the first client of the event streams looks
// whether the transactions writing events when it came have ended.
const settlePoll = 2 * time.Millisecond

// settled reads the highest event id and waits until every lower id has
// settled: the transactions that may still commit one have ended.
func (s *Server) settled(ctx context.Context) (int64, error) {
	var h eventstore.Horizon
	err := pgx.BeginTxFunc(ctx, s.store.Pool(), pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		h, err = s.store.SettledTx(ctx, tx, settlePoll)
		return err
	})
	if err != nil {
		return 0, eventstore.TranslateError(fmt.Errorf("event streams: settled position: %w", err))
	}
	return h.LastID, nil
}
