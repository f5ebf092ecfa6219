package kumikotype_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// Every code has a title and its status; an unknown code is a 500 with no
// title.
func TestCodes(t *testing.T) {
	want := map[kumikotype.Code]int{
		kumikotype.CodeValidation: 400, kumikotype.CodeUnauthenticated: 401, kumikotype.CodeAccessDenied: 403,
		kumikotype.CodeNotFound: 404, kumikotype.CodeMethodNotAllowed: 405, kumikotype.CodeVersionConflict: 409,
		kumikotype.CodeStreamArchived: 409, kumikotype.CodeUniqueViolation: 409, kumikotype.CodeIdempotencyConflict: 409,
		kumikotype.CodeUnprocessable: 422, kumikotype.CodePayloadTooLarge: 413, kumikotype.CodeUnsupportedMediaType: 415,
		kumikotype.CodeRateLimited: 429, kumikotype.CodeClientClosed: 499, kumikotype.CodeUnavailable: 503,
		kumikotype.CodeProjectionRebuilding: 503, kumikotype.CodeInternal: 500,
	}
	require.Len(t, kumikotype.Codes(), len(want))
	for _, c := range kumikotype.Codes() {
		require.Equal(t, want[c], c.Status(""), c)
		require.NotEmpty(t, c.Title(), c)
	}
	require.Equal(t, http.StatusUnprocessableEntity, kumikotype.CodeIdempotencyConflict.Status(kumikotype.ReasonKeyReused))
	require.Equal(t, http.StatusInternalServerError, kumikotype.Code("no_such_code").Status(""))
	require.Empty(t, kumikotype.Code("no_such_code").Title())
}

func TestProblemWrite(t *testing.T) {
	p := kumikotype.NewProblem(kumikotype.CodeNotFound, "", "nothing here")
	require.Equal(t, kumikotype.Problem{Type: "https://kumiko.dev/problems/not_found", Title: "Not found", Status: 404,
		Code: "not_found", Reason: "not_found", Detail: "nothing here"}, p)
	rec := httptest.NewRecorder()
	require.NoError(t, p.Write(rec))
	require.Equal(t, 404, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var got map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.Equal(t, map[string]any{"type": "https://kumiko.dev/problems/not_found", "title": "Not found", "status": float64(404),
		"code": "not_found", "reason": "not_found", "detail": "nothing here", "requestId": ""}, got)
}

// The one error type: its text leaves out what is empty, its status
// follows code and reason, and its cause unwraps.
func TestError(t *testing.T) {
	cause := errors.New("deep cause")
	e := kumikotype.NewError(kumikotype.CodeIdempotencyConflict, kumikotype.ReasonKeyReused, "the key was used before", cause).
		With("key", "k1").WithFields([]kumikotype.FieldError{{Path: "a", Code: "required", Message: "is required"}})
	require.Equal(t, "idempotency_conflict (key_reused): the key was used before: deep cause", e.Error())
	require.Equal(t, http.StatusUnprocessableEntity, e.Status())
	require.Equal(t, map[string]any{"key": "k1"}, e.Details())
	require.Len(t, e.Fields(), 1)
	require.ErrorIs(t, e, cause)

	bare := kumikotype.NewError(kumikotype.CodeNotFound, "", "", nil)
	require.Equal(t, "not_found", bare.Error())
	require.Equal(t, "not_found", bare.Reason())
	require.Equal(t, http.StatusNotFound, bare.Status())
	require.Nil(t, bare.Details())
	require.ErrorIs(t, bare.WithCause(cause), cause)
}
