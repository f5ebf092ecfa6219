package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/sse"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
)

// view is what a page template sees.
type view struct {
	Title  string
	Page   string
	Prefix string
	CSRF   string
	User   string
	Error  string
	Next   string
	Vars   map[string]string
	// Jobs: the app has jobs, and the console its jobs page.
	Jobs bool
	// JobsPage is the jobs page's state; nil on the other pages.
	JobsPage *jobsView
}

// view is the view of page name, titled title, for s.
func (c *Console) view(r *http.Request, s session, name, title string) view {
	return view{Title: title, Page: name, Prefix: c.cfg.Prefix, CSRF: s.csrf, User: s.user.ID, Jobs: c.hasJobsPage(),
		Vars: map[string]string{"type": r.PathValue("type"), "id": r.PathValue("id")}}
}

// render serves the page template name.
func (c *Console) render(name, title string) func(http.ResponseWriter, *http.Request, session) {
	return func(w http.ResponseWriter, r *http.Request, s session) {
		c.execute(w, http.StatusOK, name, c.view(r, s, name, title))
	}
}

func (c *Console) execute(w http.ResponseWriter, status int, name string, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := c.pages.ExecuteTemplate(w, name, v); err != nil {
		c.cfg.Logger.Error("console: render", "page", name, "err", err)
	}
}

// GET /login: the form.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.execute(w, http.StatusOK, "login", view{Title: "Sign in", Page: "login", Prefix: c.cfg.Prefix, Next: c.next(r.URL.Query().Get("next"))})
}

// POST /login: verifies the token and starts the session. A refused
// sign-in answers the form again with the reason (200, so the browser logs
// no failed request); no cookie is set.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	v := view{Title: "Sign in", Page: "login", Prefix: c.cfg.Prefix, Next: c.next(r.PostFormValue("next"))}
	if !sameOrigin(r) {
		v.Error = "The sign-in did not come from this page."
		c.execute(w, http.StatusForbidden, "login", v)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	token = strings.TrimSpace(strings.TrimPrefix(token, "Bearer "))
	if token == "" {
		v.Error = "Enter a token."
		c.execute(w, http.StatusBadRequest, "login", v)
		return
	}
	u, exp, err := c.cfg.Authenticate(r.Context(), token)
	switch {
	case err != nil || !u.Authenticated:
		v.Error = "The token is not valid (or has expired)."
		c.execute(w, http.StatusOK, "login", v)
		return
	case !u.HasRole(c.cfg.OperatorRole):
		v.Error = "This token does not have the role " + c.cfg.OperatorRole + ", which the console needs."
		c.execute(w, http.StatusOK, "login", v)
		return
	}
	if err := setSession(w, r, c.cfg.Prefix, token, exp); err != nil {
		internal(w, c, "login", err)
		return
	}
	http.Redirect(w, r, v.Next, http.StatusSeeOther)
}

// next is where to go after signing in: a console path, else the consumers.
func (c *Console) next(p string) string {
	if strings.HasPrefix(p, c.cfg.Prefix+"/") && !strings.HasPrefix(p, "//") && !strings.Contains(p, "\\") &&
		!strings.HasPrefix(p, c.cfg.Prefix+"/login") {
		return p
	}
	return c.cfg.Prefix + "/consumers"
}

// POST /logout.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ session) {
	clearSession(w, r, c.cfg.Prefix)
	http.Redirect(w, r, c.cfg.Prefix+"/login", http.StatusSeeOther)
}

// consumersView is the consumers page's state: the shards and the parked
// streams.
type consumersView struct {
	Shards []consumer.ShardStatus  `json:"shards"`
	Parked []consumer.ParkedStream `json:"parked"`
}

// consumerState is what the consumers page shows.
func (c *Console) consumerState(r *http.Request) (any, error) {
	shards, err := c.ops.List(r.Context())
	if err != nil {
		return nil, err
	}
	parked, err := c.ops.Parked(r.Context(), "")
	if err != nil {
		return nil, err
	}
	return consumersView{Shards: shards, Parked: parked}, nil
}

// POST /consumers/parked/{op}: ask for the parked stream named by the
// fields name and stream to be retried or its failing event skipped; the
// shard's next pass carries it out.
func (c *Console) parkedAction(w http.ResponseWriter, r *http.Request, _ session) {
	consumerOp(w, r, c, "parked stream", "the operations on a parked stream are retry and skip", r.PostFormValue("stream"),
		map[string]func(context.Context, string, string) (consumer.ParkedStream, error){"retry": c.ops.RetryParked, "skip": c.ops.SkipParked})
}

// POST /consumers/{op}: restart, skip, disable or enable the shard named by
// the fields name and instance.
func (c *Console) consumerAction(w http.ResponseWriter, r *http.Request, _ session) {
	instance := r.PostFormValue("instance")
	if instance == consumer.SharedInstance {
		instance = ""
	}
	consumerOp(w, r, c, "consumer", "the operations are restart, skip, disable and enable", instance,
		map[string]func(context.Context, string, string) (consumer.ShardStatus, error){
			"restart": c.ops.Restart, "skip": c.ops.Skip, "disable": c.ops.Disable, "enable": c.ops.Enable,
		})
}

// consumerOp runs the operation of ops that the path value op names on the
// consumer named by the field name and arg (its shard, its stream) and
// answers {"data": its result}, or the refusal (see refuse).
func consumerOp[T any](w http.ResponseWriter, r *http.Request, c *Console, what, known, arg string,
	ops map[string]func(ctx context.Context, name, arg string) (T, error),
) {
	op, ok := ops[r.PathValue("op")]
	if !ok {
		problem(w, kumikotype.CodeNotFound, kumikotype.ReasonUnknownOperation, known)
		return
	}
	name := r.PostFormValue("name")
	if name == "" {
		problem(w, kumikotype.CodeValidation, kumikotype.ReasonMissingName, "name the consumer")
		return
	}
	res, err := op(r.Context(), name, arg)
	if err != nil {
		refuse(w, c, what+" "+r.PathValue("op"), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": res})
}

// projectionState is what the projections page shows: every projection's
// status, with the progress of the rebuilds this process runs.
func (c *Console) projectionState(r *http.Request) (any, error) {
	list, err := c.cfg.Executor.ProjectionStatuses(r.Context())
	if err != nil {
		return nil, err
	}
	type row struct {
		pipeline.ProjectionStatus
		Rebuild *rebuildProgress `json:"rebuild,omitempty"`
	}
	out := make([]row, 0, len(list))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range list {
		rw := row{ProjectionStatus: p}
		if run := c.rebuilds[p.Name]; run != nil {
			pr := run.progress
			rw.Rebuild = &pr
		}
		out = append(out, rw)
	}
	return out, nil
}

// rebuildRun is a rebuild this process started.
type rebuildRun struct {
	progress rebuildProgress
}

// rebuildProgress is a rebuild's progress as the page shows it.
type rebuildProgress struct {
	Done    int64     `json:"done"`
	Total   int64     `json:"total"`
	Percent int       `json:"percent"`
	Running bool      `json:"running"`
	Error   string    `json:"error,omitempty"`
	Started time.Time `json:"started"`
}

// POST /projections/rebuild: starts rebuilding the projection named by the
// field name in the background; 202, or 409 when it is already running.
func (c *Console) rebuild(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PostFormValue("name")
	known := false
	list, err := c.cfg.Executor.ProjectionStatuses(r.Context())
	if err != nil {
		fail(w, c, "rebuild", err)
		return
	}
	for _, p := range list {
		known = known || p.Name == name
	}
	if !known {
		refused(w, kumikotype.CodeNotFound, kumikotype.ReasonProjectionNotFound, fmt.Sprintf("there is no projection %q", name))
		return
	}
	c.mu.Lock()
	if run := c.rebuilds[name]; run != nil && run.progress.Running {
		c.mu.Unlock()
		refused(w, kumikotype.CodeProjectionRebuilding, kumikotype.ReasonRebuildRunning, "the projection is already being rebuilt")
		return
	}
	run := &rebuildRun{progress: rebuildProgress{Running: true, Started: time.Now()}}
	c.rebuilds[name] = run
	c.mu.Unlock()
	c.cfg.Logger.Info("console: rebuild started", "projection", name, "by", s.user.ID)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_, err := c.cfg.Executor.RebuildProjection(c.ctx, name, pipeline.RebuildOptions{
			Progress: func(done, total int64) {
				c.mu.Lock()
				run.progress.Done, run.progress.Total = done, total
				if total > 0 {
					run.progress.Percent = int(min(100, done*100/total))
				}
				c.mu.Unlock()
			},
		})
		c.mu.Lock()
		defer c.mu.Unlock()
		run.progress.Running = false
		if err != nil {
			run.progress.Error = errorText(err)
			c.cfg.Logger.Error("console: rebuild failed", "projection", name, "err", err)
			return
		}
		run.progress.Percent = 100
	}()
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]string{"name": name, "status": "rebuilding"}})
}

// tailEvent is one event of the live tail.
type tailEvent struct {
	ID            int64           `json:"id"`
	Type          string          `json:"type"`
	AggregateType string          `json:"aggregateType"`
	AggregateID   uuid.UUID       `json:"aggregateId"`
	TenantID      uuid.UUID       `json:"tenantId"`
	Version       int             `json:"version"`
	CreatedAt     time.Time       `json:"createdAt"`
	Payload       json.RawMessage `json:"payload"`
}

// tailBacklog is how many past events the tail starts with.
const tailBacklog = 50

// GET /events/live?type=&aggregate=: the settled events matching the
// filters, the last 50 first, then each new one, over SSE.
func (c *Console) tail(w http.ResponseWriter, r *http.Request, _ session) {
	q := r.URL.Query()
	var f eventstore.ReadFilter
	if t := strings.TrimSpace(q.Get("type")); t != "" {
		f.Types = []string{t}
	}
	if a := strings.TrimSpace(q.Get("aggregate")); a != "" {
		f.AggregateTypes = []string{a}
	}
	ctx := r.Context()
	pos, err := c.cfg.Store.TailStart(ctx, f, tailBacklog)
	if err != nil {
		fail(w, c, "tail", err)
		return
	}
	stream, ok := startSSE(w)
	if !ok {
		return
	}
	defer stream.Release()
	wake, cancel := c.cfg.Store.Subscribe()
	defer cancel()
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		pos, err = c.cfg.Store.Tail(ctx, pos, f, func(e eventstore.Event) error {
			return stream.send(e.ID, tailEvent{ID: e.ID, Type: e.Type, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
				TenantID: e.TenantID, Version: e.Version, CreatedAt: e.CreatedAt, Payload: e.Payload})
		})
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Logger.Warn("console: tail", "err", err)
			}
			return
		}
		stream.ping()
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-tick.C:
		}
	}
}

// GET /aggregates/{type}/{id}/data: the aggregate's timeline, across
// tenants (the console is the operator's), with an entity's state after
// each event (states, null for other aggregates).
func (c *Console) timeline(w http.ResponseWriter, r *http.Request, _ session) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil || id == uuid.Nil {
		problem(w, kumikotype.CodeValidation, kumikotype.ReasonInvalidID, "the id must be a non-nil UUID")
		return
	}
	tenant, err := c.cfg.Store.StreamTenant(r.Context(), id)
	if err != nil {
		fail(w, c, "timeline", err)
		return
	}
	tl, err := pipeline.Inspect(r.Context(), c.cfg.Store, tenant, r.PathValue("type"), id, time.Time{})
	if err != nil {
		fail(w, c, "timeline", err)
		return
	}
	states, err := c.cfg.Executor.States(tl)
	if err != nil {
		fail(w, c, "timeline", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": tl, "states": states})
}

// live streams state(r) over SSE every interval while it changes.
func (c *Console) live(state func(*http.Request) (any, error)) func(http.ResponseWriter, *http.Request, session) {
	return func(w http.ResponseWriter, r *http.Request, _ session) {
		first, err := state(r)
		if err != nil {
			fail(w, c, "live", err)
			return
		}
		stream, ok := startSSE(w)
		if !ok {
			return
		}
		defer stream.Release()
		tick := time.NewTicker(c.cfg.Interval)
		defer tick.Stop()
		v := first
		var n int64
		for {
			n++
			if err := stream.send(n, v); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
			if v, err = state(r); err != nil {
				if r.Context().Err() == nil {
					c.cfg.Logger.Warn("console: live state", "err", err)
				}
				return
			}
		}
	}
}

// problemError is an error of the contract: consumer.Error, pipeline.Error.
type problemError interface {
	error
	Code() string
	Reason() string
	Detail() string
}

// refuse answers err of an action the page sent: an operation the state
// refuses (an error of the contract below 500) is an outcome the page shows,
// so it answers 200 {"refused": {code, reason, detail}} and the browser does
// not log a failed request; anything else is answered as fail does.
func refuse(w http.ResponseWriter, c *Console, what string, err error) {
	if pe := contractOf(err); pe != nil && statusOf(pe.Code(), pe.Reason()) < http.StatusInternalServerError {
		refused(w, kumikotype.Code(pe.Code()), kumikotype.Reason(pe.Reason()), pe.Detail())
		return
	}
	fail(w, c, what, err)
}

// contractOf is err as an error of the contract, classified as the API
// does (pipeline.AsError); nil for an internal error.
func contractOf(err error) problemError {
	var pe problemError
	if errors.As(err, &pe) {
		return pe
	}
	if ae := pipeline.AsError(err); ae != nil && ae.Code() != pipeline.CodeInternal {
		return ae
	}
	return nil
}

// fail answers err: an error of the contract as problem+json with its code,
// anything else as 500 internal, logged.
func fail(w http.ResponseWriter, c *Console, what string, err error) {
	if pe := contractOf(err); pe != nil {
		problem(w, kumikotype.Code(pe.Code()), kumikotype.Reason(pe.Reason()), pe.Detail())
		return
	}
	internal(w, c, what, err)
}

// refused answers a refusal of the page's action (see refuse).
func refused(w http.ResponseWriter, code kumikotype.Code, reason kumikotype.Reason, detail string) {
	writeJSON(w, http.StatusOK, map[string]any{"refused": map[string]string{"code": string(code), "reason": string(reason), "detail": detail}})
}

func internal(w http.ResponseWriter, c *Console, what string, err error) {
	c.cfg.Logger.Error("console: "+what, "err", err)
	problem(w, kumikotype.CodeInternal, "", "something went wrong; the server log has the cause")
}

// statusOf is the HTTP status of an error code and reason: the API's
// (kumikotype's) mapping.
func statusOf(code, reason string) int { return kumikotype.Code(code).Status(reason) }

// errorText is what an operator is shown of err.
func errorText(err error) string {
	var pe problemError
	if errors.As(err, &pe) && pe.Detail() != "" {
		return pe.Detail()
	}
	return err.Error()
}

// problem writes an application/problem+json answer, as the API writes
// it (the status follows the code).
func problem(w http.ResponseWriter, code kumikotype.Code, reason kumikotype.Reason, detail string) {
	_ = kumikotype.NewProblem(code, string(reason), detail).Write(w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sseWriter writes the console's server-sent events through the API's
// stream writer, each write with its deadline (sse.WriteTimeout).
type sseWriter struct{ *sse.Writer }

// startSSE starts the stream; false when its headers cannot be sent. The
// caller defers release.
func startSSE(w http.ResponseWriter) (sseWriter, bool) {
	s := sseWriter{sse.Start(w, "no-store")}
	return s, s.Flush() == nil
}

func (s sseWriter) send(id int64, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := s.Write(fmt.Appendf(nil, "id: %d\ndata: %s\n\n", id, b)); err != nil {
		return err
	}
	return s.Flush()
}

func (s sseWriter) ping() {
	if s.Write([]byte(": ping\n\n")) == nil {
		_ = s.Flush()
	}
}
