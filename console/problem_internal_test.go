package console

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
)

// coded is an error of the contract with a code and reason of the test's.
type coded struct{ code, reason string }

func (e coded) Error() string  { return e.code }
func (e coded) Code() string   { return e.code }
func (e coded) Reason() string { return e.reason }
func (e coded) Detail() string { return "detail of " + e.code }

// The console answers every error of the contract as the API does: the
// status of its code (and reason), the problem's type and title — among
// them the codes it used to answer with 500.
func TestConsoleProblemsMatchTheAPI(t *testing.T) {
	c := &Console{cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	cases := []struct {
		err    error
		code   kumikotype.Code
		status int
	}{
		{eventstore.ErrVersionConflict, kumikotype.CodeVersionConflict, http.StatusConflict},
		{eventstore.ErrStreamArchived, kumikotype.CodeStreamArchived, http.StatusConflict},
		{&pgconn.PgError{Code: "23505"}, kumikotype.CodeUniqueViolation, http.StatusConflict},
		{coded{pipeline.CodeIdempotencyConflict, pipeline.ReasonKeyReused}, kumikotype.CodeIdempotencyConflict, http.StatusUnprocessableEntity},
		{coded{pipeline.CodeIdempotencyConflict, pipeline.ReasonAlreadyApplied}, kumikotype.CodeIdempotencyConflict, http.StatusConflict},
		{eventstore.ErrAggregateNotFound, kumikotype.CodeNotFound, http.StatusNotFound},
		{coded{pipeline.CodeProjectionRebuilding, ""}, kumikotype.CodeProjectionRebuilding, http.StatusServiceUnavailable},
		{eventstore.ErrUnavailable, kumikotype.CodeUnavailable, http.StatusServiceUnavailable},
		{errors.New("boom"), kumikotype.CodeInternal, http.StatusInternalServerError},
	}
	for _, tc := range cases {
		t.Run(string(tc.code), func(t *testing.T) {
			rec := httptest.NewRecorder()
			fail(rec, c, "test", tc.err)
			require.Equal(t, tc.status, rec.Code)
			require.Equal(t, kumikotype.ContentTypeProblem, rec.Header().Get("Content-Type"))
			var p kumikotype.Problem
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			require.Equal(t, string(tc.code), p.Code)
			require.Equal(t, tc.status, p.Status)
			require.Equal(t, kumikotype.ProblemTypeBase+string(tc.code), p.Type)
			require.Equal(t, tc.code.Title(), p.Title)
			require.NotEmpty(t, p.Title)

			// An action the page sent is refused (200) below 500 only.
			rec = httptest.NewRecorder()
			refuse(rec, c, "test", tc.err)
			if tc.status < http.StatusInternalServerError {
				require.Equal(t, http.StatusOK, rec.Code)
				require.Contains(t, rec.Body.String(), `"code":"`+string(tc.code)+`"`)
			} else {
				require.Equal(t, tc.status, rec.Code)
			}
		})
	}
}
