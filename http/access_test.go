package http_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

// bonusInput is the input of payroll.bonus.
type bonusInput struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
	Bonus   float64   `json:"bonus"`
}

// payroll has a bonus only HR may write and read, and a command any user
// may call that sets it on the employee's stream.
var payroll = feature.Define("payroll", func(r *feature.Registrar) {
	r.Entity("payee", feature.Fields{
		"name":  feature.Text(),
		"bonus": feature.Number().WriteRoles("HR").ReadRoles("HR"),
	})
	r.Crud("payee", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	feature.HandleCommand(r, "payee.bonus", feature.AnyUser(), func(ctx feature.CommandContext, in bonusInput) (any, error) {
		p, err := ctx.FetchForWriting(in.ID, "payee", in.Version)
		if err != nil {
			return nil, err
		}
		return nil, p.Append("payee.updated", map[string]any{"bonus": in.Bonus})
	})
})

// A custom command that sets a field its caller may not write answers 403
// access_denied (field_access, with the field) and writes nothing.
func TestCommandFieldWriteOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{payroll})
	alice, hr := token(t, "alice", tenantA, "User"), token(t, "hanna", tenantA, "HR")
	r := e.post("/api/write", alice, `{"type":"payee.create","payload":{"name":"Bo"}}`)
	require.Equal(t, http.StatusOK, r.status, r.String())
	id := r.data(t)["id"].(string)
	n := e.events()

	bonus := func(tok string) reply {
		return e.post("/api/command", tok, fmt.Sprintf(`{"type":"payee.bonus","payload":{"id":%q,"version":1,"bonus":500}}`, id))
	}
	p := requireProblem(t, bonus(alice), http.StatusForbidden, "access_denied", "field_access")
	require.Equal(t, map[string]any{"field": "bonus"}, p["details"])
	require.Equal(t, n, e.events())

	require.Equal(t, http.StatusOK, bonus(hr).status)
	d := e.post("/api/query", hr, fmt.Sprintf(`{"type":"payee.detail","payload":{"id":%q}}`, id))
	require.Equal(t, float64(500), d.data(t)["bonus"], d.String())
}
