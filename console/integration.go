package console

import (
	"context"
	"errors"
	"net/http"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// deadLimit is how many dead messages the page lists.
const deadLimit = 200

// jobCountCap is the most jobs of one state the page counts; more show as
// the cap with "+".
const jobCountCap = 1000

// waitingJobStates are the job states the queue depth counts: jobs not yet
// done.
var waitingJobStates = []string{"available", "scheduled", "running", "retryable"}

// queueDepth is one queue's depth as the integration page shows it.
type queueDepth struct {
	Name  string `json:"name"`
	Depth int64  `json:"depth"`
	// AtLeast: the depth is a lower bound (the count stopped at its cap).
	AtLeast bool   `json:"atLeast"`
	Note    string `json:"note"`
}

// integrationView is the integration page's state.
type integrationView struct {
	Dead   []integration.DeadMessage `json:"dead"`
	Queues []queueDepth              `json:"queues"`
	// HasDead is false when the app has no dead letters to show (no
	// integration service).
	HasDead bool `json:"hasDead"`
}

// integrationState is what the integration page shows: the dead messages,
// the relay's backlog and the jobs waiting per state.
func (c *Console) integrationState(r *http.Request) (any, error) {
	ctx := r.Context()
	v := integrationView{Dead: []integration.DeadMessage{}, Queues: []queueDepth{}, HasDead: c.cfg.DeadLetters != nil}
	if c.cfg.DeadLetters != nil {
		dead, err := c.cfg.DeadLetters.List(ctx, deadLimit)
		if err != nil {
			return nil, err
		}
		v.Dead = dead
	}
	shards, err := c.ops.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range shards {
		if s.Name == integration.RelayName {
			v.Queues = append(v.Queues, queueDepth{Name: "integration relay", Depth: s.LagEvents,
				Note: "events not yet published (" + s.Status + ")"})
		}
	}
	if c.cfg.JobsRunner != nil {
		qs, err := jobDepths(ctx, c.cfg.JobsRunner)
		if err != nil {
			return nil, err
		}
		v.Queues = append(v.Queues, qs...)
	}
	return v, nil
}

// jobDepths counts the jobs not yet done, per state.
func jobDepths(ctx context.Context, r *jobs.Runner) ([]queueDepth, error) {
	var out []queueDepth
	for _, st := range waitingJobStates {
		list, err := r.List(ctx, jobs.ListParams{States: []string{st}, Limit: jobCountCap})
		if err != nil {
			return nil, err
		}
		out = append(out, queueDepth{Name: "jobs " + st, Depth: int64(len(list)), AtLeast: len(list) == jobCountCap})
	}
	return out, nil
}

// POST /integration/{op}: retry or drop the dead message named by the
// fields id and handler.
func (c *Console) deadAction(w http.ResponseWriter, r *http.Request, _ session) {
	if c.cfg.DeadLetters == nil {
		problem(w, kumikotype.CodeNotFound, kumikotype.ReasonNoDeadLetters, "the app has no integration dead letters")
		return
	}
	id, err := uuid.Parse(r.PostFormValue("id"))
	if err != nil {
		problem(w, kumikotype.CodeValidation, kumikotype.ReasonInvalidID, "the id must be a UUID")
		return
	}
	handler := r.PostFormValue("handler")
	switch r.PathValue("op") {
	case "retry":
		err = c.cfg.DeadLetters.Retry(r.Context(), id, handler)
		var pe problemError
		if err != nil && !errors.As(err, &pe) {
			// The handler failed again (the error the page already shows as
			// the message's last error): an outcome, not a fault of the
			// console.
			c.cfg.Logger.Warn("console: dead message retry failed", "id", id, "handler", handler, "err", err)
			refused(w, kumikotype.CodeUnprocessable, kumikotype.ReasonRetryFailed, "the retry failed: "+err.Error())
			return
		}
	case "drop":
		_, err = c.cfg.DeadLetters.Drop(r.Context(), id, handler)
	default:
		problem(w, kumikotype.CodeNotFound, kumikotype.ReasonUnknownOperation, "the operations are retry and drop")
		return
	}
	if err != nil {
		refuse(w, c, "dead message "+r.PathValue("op"), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]string{"id": id.String(), "handler": handler}})
}
