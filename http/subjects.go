package http

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
)

// POST /api/subjects/{subject}/forget: forgets the data subject subject of
// the caller's tenant (pipeline.Executor.ForgetSubject, see
// docs/personal-data.md): its data key is deleted, so its personal values
// in events and snapshots read as null, and the personal fields of entity
// rows that belong to it are set to null, in one transaction. 204 whether
// or not the subject had data, so the answer tells nothing about it. For
// the AdminRole; the tenant is the token's, never the request's, so one
// tenant's admin cannot reach another tenant's keys. A subject that is
// empty, longer than the pipeline allows, not UTF-8 or holding U+0000 is
// 400 validation_error (invalid_subject).
func (s *Server) forgetSubject(c echo.Context) error {
	u := userOf(c)
	switch {
	case !u.Authenticated:
		return unauthenticated("", "sign in to forget data subjects", nil)
	case !u.HasRole(s.cfg.AdminRole):
		return newAPIError(pipeline.CodeAccessDenied, "", "forgetting data subjects needs the role "+s.cfg.AdminRole)
	}
	subject, err := pathParam(c, "subject")
	if err != nil {
		return err
	}
	// The subject reaches a text column: the database cannot compare what
	// it cannot store, and no subject was ever stored with it.
	if !utf8.ValidString(subject) || strings.ContainsRune(subject, 0) {
		return invalidInput(kumikotype.ReasonInvalidSubject, "a subject id is UTF-8 text without the character U+0000")
	}
	if err := s.d.ForgetSubject(c.Request().Context(), u.TenantID, subject); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// GET /api/subjects/{subject}/export: every personal value of the data
// subject subject that the caller's tenant holds (pipeline.Executor.
// ExportSubject, GDPR Art. 15 and 20): 200 with {"data": {subject, events,
// rows}} — the events with its sealed fields, open (field names as
// stored), and the entity rows' personal fields of it. A forgotten
// subject's event fields are null and it has no rows; a subject without
// data exports empty lists, so the answer tells nothing about other
// tenants. For the AdminRole, the tenant being the token's, and with the
// forget route's subject check.
func (s *Server) exportSubject(c echo.Context) error {
	u := userOf(c)
	switch {
	case !u.Authenticated:
		return unauthenticated("", "sign in to export data subjects", nil)
	case !u.HasRole(s.cfg.AdminRole):
		return newAPIError(pipeline.CodeAccessDenied, "", "exporting data subjects needs the role "+s.cfg.AdminRole)
	}
	subject, err := pathParam(c, "subject")
	if err != nil {
		return err
	}
	if !utf8.ValidString(subject) || strings.ContainsRune(subject, 0) {
		return invalidInput(kumikotype.ReasonInvalidSubject, "a subject id is UTF-8 text without the character U+0000")
	}
	out, err := s.d.ExportSubject(c.Request().Context(), u.TenantID, subject)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, data{out})
}
