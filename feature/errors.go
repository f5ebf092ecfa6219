package feature

import "github.com/kumiko-go/kumiko/kumikotype"

// RefusedError is a handler refusing a request on business grounds: a state
// transition that is not allowed, a rule of the domain. It reaches the client
// as 422 unprocessable with the reason, and nothing the request wrote is kept.
type RefusedError struct {
	reason string
	detail string
}

// Refuse returns a *RefusedError. reason is a stable, lowercase code the
// client can branch on (e.g. "already_done"); detail is a human sentence.
func Refuse(reason, detail string) error {
	return &RefusedError{reason: reason, detail: detail}
}

// Error is "refused: <reason>: <detail>".
func (e *RefusedError) Error() string {
	if e.detail == "" {
		return "refused: " + e.reason
	}
	return "refused: " + e.reason + ": " + e.detail
}

// Code is the stable error code "unprocessable".
func (e *RefusedError) Code() string { return string(kumikotype.CodeUnprocessable) }

// Reason is the code given to Refuse.
func (e *RefusedError) Reason() string { return e.reason }

// Detail is the sentence given to Refuse.
func (e *RefusedError) Detail() string { return e.detail }
