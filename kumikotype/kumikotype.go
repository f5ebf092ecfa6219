// Package kumikotype holds what every layer of kumiko shares and none owns:
// the stored event and its metadata (eventstore.Event and feature.Event are
// Event), the stream and user records (eventstore.Stream, feature.User), the
// error codes of the contract (SPEC §5) with the HTTP status and title of
// each, its reasons and field problem codes, the one error type, and the
// application/problem+json body every error answer has. It imports nothing
// of kumiko, so the event store, feature code, the pipeline, the HTTP
// adapter and the ops console share one record and one vocabulary.
//
// A new error code is added here, and only here: a Code constant, its
// status in Code.Status and its title in Code.Title. So is a new reason (a
// Reason constant) and a new field problem code (a FieldCode constant):
// the packages that answer them use the constants, never the bare string.
package kumikotype

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
)

// Code is a stable error code: the code member of every problem answer.
type Code string

// The error codes. Each names one kind of failure a client can act on;
// finer distinctions are reasons (the reason member).
const (
	CodeValidation           Code = "validation_error"
	CodeUnauthenticated      Code = "unauthenticated"
	CodeAccessDenied         Code = "access_denied"
	CodeNotFound             Code = "not_found"
	CodeMethodNotAllowed     Code = "method_not_allowed"
	CodeVersionConflict      Code = "version_conflict"
	CodeStreamArchived       Code = "stream_archived"
	CodeUniqueViolation      Code = "unique_violation"
	CodeIdempotencyConflict  Code = "idempotency_conflict"
	CodeUnprocessable        Code = "unprocessable"
	CodePayloadTooLarge      Code = "payload_too_large"
	CodeUnsupportedMediaType Code = "unsupported_media_type"
	CodeRateLimited          Code = "rate_limited"
	// CodeClientClosed is what the request log and the metrics record of a
	// request whose client went away before the answer (status 499).
	CodeClientClosed Code = "client_closed"
	CodeUnavailable  Code = "unavailable"
	// CodeProjectionRebuilding answers a read of a projection whose table
	// is still being built for the first time: it would return partial
	// rows. Retry later.
	CodeProjectionRebuilding Code = "projection_rebuild_in_progress"
	CodeInternal             Code = "internal_error"
)

// StatusClientClosed is the status of CodeClientClosed (nginx's 499).
const StatusClientClosed = 499

// ProblemTypeBase prefixes the type member of a problem: the base and
// the code.
const ProblemTypeBase = "https://kumiko.dev/problems/"

// ContentTypeProblem is the media type of a problem answer.
const ContentTypeProblem = "application/problem+json"

// Status is the HTTP status of c with reason; an unknown code is a 500.
func (c Code) Status(reason string) int {
	switch c {
	case CodeValidation:
		return http.StatusBadRequest
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodeAccessDenied:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeVersionConflict, CodeStreamArchived, CodeUniqueViolation:
		return http.StatusConflict
	case CodeIdempotencyConflict:
		if Reason(reason) == ReasonKeyReused {
			return http.StatusUnprocessableEntity
		}
		return http.StatusConflict
	case CodeUnprocessable:
		return http.StatusUnprocessableEntity
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeClientClosed:
		return StatusClientClosed
	case CodeProjectionRebuilding, CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Codes lists every error code, sorted.
func Codes() []Code {
	return slices.Sorted(maps.Keys(titles))
}

// Title is the title member of a problem of c; "" for an unknown code.
func (c Code) Title() string {
	return titles[c]
}

var titles = map[Code]string{
	CodeValidation:           "Validation failed",
	CodeUnauthenticated:      "Unauthenticated",
	CodeAccessDenied:         "Access denied",
	CodeNotFound:             "Not found",
	CodeMethodNotAllowed:     "Method not allowed",
	CodeVersionConflict:      "Version conflict",
	CodeStreamArchived:       "Stream archived",
	CodeUniqueViolation:      "Unique violation",
	CodeIdempotencyConflict:  "Idempotency conflict",
	CodeUnprocessable:        "Unprocessable request",
	CodePayloadTooLarge:      "Payload too large",
	CodeUnsupportedMediaType: "Unsupported media type",
	CodeRateLimited:          "Too many requests",
	CodeClientClosed:         "Client closed request",
	CodeProjectionRebuilding: "Projection rebuild in progress",
	CodeUnavailable:          "Service unavailable",
	CodeInternal:             "Internal server error",
}

// Problem is the application/problem+json body of every error answer (RFC
// 9457 plus the contract's members).
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Code      string         `json:"code"`
	Reason    string         `json:"reason"`
	Detail    string         `json:"detail"`
	RequestID string         `json:"requestId"`
	Fields    []FieldProblem `json:"fields,omitempty"`
	// FieldsTotal counts every problem found, with Fields: Fields may list
	// only the first of them.
	FieldsTotal int            `json:"fieldsTotal,omitempty"`
	Details     map[string]any `json:"details,omitempty"`
}

// FieldProblem is one problem of a payload: the path of the field, a
// validation code (required, max, …) and a message.
type FieldProblem struct {
	Path    string `json:"path"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// NewProblem is the problem of code with reason (the code when empty) and
// detail, its type, title and status filled in.
func NewProblem(code Code, reason, detail string) Problem {
	if reason == "" {
		reason = string(code)
	}
	return Problem{Type: ProblemTypeBase + string(code), Title: code.Title(), Status: code.Status(reason),
		Code: string(code), Reason: reason, Detail: detail}
}

// Write answers p on w with its status, as application/problem+json, not
// to be cached.
func (p Problem) Write(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	return json.NewEncoder(w).Encode(p)
}
