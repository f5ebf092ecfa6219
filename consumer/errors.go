package consumer

import (
	"errors"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// Sentinels of the consumer operations and of the prune guard. Every
// refusal is an *Error whose cause wraps one of them, so errors.Is tells
// them apart and Code/Reason give the error contract.
var (
	// ErrNotFound: no state row exists for the consumer shard (code
	// not_found, reason consumer_not_found).
	ErrNotFound = errors.New("consumer shard not found")
	// ErrWrongState: the shard's status does not allow the operation
	// (code unprocessable, reason wrong_state; Details()["status"] names
	// the current status).
	ErrWrongState = errors.New("consumer shard is in the wrong state")
	// ErrNothingToSkip: Skip found no event after the cursor
	// (code unprocessable, reason nothing_to_skip).
	ErrNothingToSkip = errors.New("no event after the cursor")
	// ErrGapUnsettled: Skip found the next visible event behind ids that a
	// transaction still in flight may yet commit; skipping now could lose
	// such an event (code unprocessable, reason gap_unsettled). Retry once
	// the writers have finished.
	ErrGapUnsettled = errors.New("an earlier event may still commit")
	// ErrLagging: Ops.Prune found a consumer shard that is not disabled
	// and has not processed every event the prune would remove; it removed
	// nothing (code unprocessable, reason consumer_lagging; Details() name
	// the consumer, instanceId, its cursor and the id it would need to
	// reach).
	ErrLagging = errors.New("a consumer has not processed the events to prune")
)

// Reasons of the consumer operations' errors, as strings: the reasons are
// kumikotype's (a new one is added there).
const (
	// ReasonNotFound is kumikotype.ReasonConsumerNotFound.
	ReasonNotFound = string(kumikotype.ReasonConsumerNotFound)
	// ReasonWrongState is kumikotype.ReasonWrongState.
	ReasonWrongState = string(kumikotype.ReasonWrongState)
	// ReasonNothingToSkip is kumikotype.ReasonNothingToSkip.
	ReasonNothingToSkip = string(kumikotype.ReasonNothingToSkip)
	// ReasonGapUnsettled is kumikotype.ReasonGapUnsettled.
	ReasonGapUnsettled = string(kumikotype.ReasonGapUnsettled)
	// ReasonLagging is kumikotype.ReasonConsumerLagging.
	ReasonLagging = string(kumikotype.ReasonConsumerLagging)
)

// Codes of the error contract that the consumer operations answer; the same
// wire names as the executor's (pipeline.CodeNotFound, …).
const (
	codeValidation    = string(kumikotype.CodeValidation)
	codeNotFound      = string(kumikotype.CodeNotFound)
	codeUnprocessable = string(kumikotype.CodeUnprocessable)
)

// Error is a refused consumer operation as a client may see it: a stable
// Code, a finer Reason, a Detail sentence safe to show, and structured
// Details (consumer, instanceId, cursor, …). The cause, which wraps one of
// the sentinels, is kept for logs and errors.Is, never shown. It is
// kumikotype.Error, the one error type of the contract.
type Error = kumikotype.Error

func newError(code string, reason kumikotype.Reason, detail string, cause error) *Error {
	return kumikotype.NewError(kumikotype.Code(code), reason, detail, cause)
}
