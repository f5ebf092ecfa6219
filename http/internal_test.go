package http

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// Every code of the error contract maps to its status; codes no request
// produces yet (rate_limited) included.
func TestStatusOfEveryCode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code       string
		reason     kumikotype.Reason
		status     int
		retryAfter bool
	}{
		{"validation_error", "", 400, false},
		{"unauthenticated", "", 401, false},
		{"access_denied", "", 403, false},
		{"not_found", "", 404, false},
		{"method_not_allowed", "", 405, false},
		{"version_conflict", "", 409, false},
		{"stream_archived", "", 409, false},
		{"unique_violation", "", 409, false},
		{"idempotency_conflict", "request_in_progress", 409, true},
		{"idempotency_conflict", "already_applied", 409, false},
		{"idempotency_conflict", "key_reused", 422, false},
		{"unprocessable", "", 422, false},
		{"payload_too_large", "", 413, false},
		{"unsupported_media_type", "content_encoding", 415, false},
		{"client_closed", "", 499, false},
		{"rate_limited", "", 429, true},
		{"projection_rebuild_in_progress", "", 503, true},
		{"unavailable", "", 503, true},
		{"internal_error", "", 500, false},
		{"some_future_code", "", 500, false},
	} {
		p, h, _ := toProblem(newAPIError(c.code, c.reason, "d"))
		require.Equal(t, c.status, p.Status, c.code)
		require.Equal(t, c.retryAfter, h.Get("Retry-After") != "", c.code)
		if c.status == http.StatusInternalServerError {
			require.Equal(t, "internal_error", p.Code)
			require.Equal(t, "internal error", p.Detail)
		} else {
			require.Equal(t, c.code, p.Code)
			require.NotEmpty(t, p.Title, c.code)
		}
	}
	// Any error with the contract's methods maps by them, whichever
	// package it comes from.
	p, _, _ := toProblem(fmt.Errorf("load: %w", eventstore.ErrAggregateNotFound))
	require.Equal(t, problem{Type: problemTypeBase + "not_found", Title: "Not found", Status: 404,
		Code: "not_found", Reason: "aggregate_not_found", Detail: "no such aggregate"}, p)
	p, h, _ := toProblem(eventstore.TranslateError(io.ErrUnexpectedEOF))
	require.Equal(t, 503, p.Status)
	require.Equal(t, "database_unavailable", p.Reason)
	require.Equal(t, "1", h.Get("Retry-After"))

	p, _, cause := toProblem(errors.New("pgx: SELECT boom"))
	require.Equal(t, 500, p.Status)
	require.NotContains(t, p.Detail, "SELECT")
	require.EqualError(t, cause, "pgx: SELECT boom")
}

// scanJSON never panics, and what it accepts is one valid JSON object.
func FuzzScanJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2,{"b":null}]}`, `[]`, `{} x`, `{"a":"\u0000"}`, `{"a":` + strings.Repeat(`[`, 30), `"s"`, ``, `{"a":1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if scanJSON(body, 5) != nil {
			return
		}
		var obj map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(body, &obj), "%q", body)
		require.NotNil(t, obj)
	})
}

func TestScanJSON(t *testing.T) {
	t.Parallel()
	for body, reason := range map[string]string{
		`{}`:                         "",
		` {"a":[{"b":[1]}]} `:        "",
		`{"a":[{"b":[[1]]}]}`:        "too_deep",
		`{"a":1e400}`:                "",
		``:                           "invalid_json",
		`   `:                        "invalid_json",
		`[]`:                         "invalid_json",
		`null`:                       "invalid_json",
		`"x"`:                        "invalid_json",
		`{"a":}`:                     "invalid_json",
		`{"a":1}}`:                   "trailing_data",
		`{"a":1} {"b":2}`:            "trailing_data",
		`{"a":1} garbage`:            "trailing_data",
		`{"a":"x\u0000y"}`:           "invalid_character",
		`{"a\u0000":1}`:              "invalid_character",
		`{"a":"\ud800"}`:             "",
		`{"a":[1,2,3],"b":{"c":{}}}`: "",
	} {
		err := scanJSON([]byte(body), 4)
		if reason == "" {
			require.NoError(t, err, body)
			continue
		}
		var ae *apiError
		require.ErrorAs(t, err, &ae, body)
		require.Equal(t, reason, ae.Reason(), body)
	}
}
