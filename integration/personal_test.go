package integration_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// Contacted is a contract carrying personal data: Email belongs to the
// customer CustomerID names.
type Contacted struct {
	CustomerID string `json:"customerId" validate:"required"`
	Email      string `json:"email"`
	Note       string `json:"note"`
}

func contactedContract(r *feature.Registrar) {
	r.IntegrationEvent("customer.contacted", Contacted{}, feature.Personal("email"), feature.SubjectField("customerId"))
}

// crm publishes customer.contacted with what it is given.
var crm = feature.Define("crm", func(r *feature.Registrar) {
	contactedContract(r)
	feature.HandleCommand(r, "customer.contact", feature.AnyUser(), func(ctx feature.CommandContext, in Contacted) (any, error) {
		return nil, ctx.Publish("customer.contacted", in)
	})
})

// mailer is an app that receives customer.contacted and keeps each
// message's payload as it got it; fail, when set, makes it fail instead.
func mailer(fail func(Contacted) bool) *feature.Feature {
	return feature.Define("mailer", func(r *feature.Registrar) {
		contactedContract(r)
		r.OnIntegrationEvent("customer.contacted", "mail", func(ctx feature.CommandContext, m feature.Message) error {
			var p Contacted
			if err := m.Decode(&p); err != nil {
				return err
			}
			if fail != nil && fail(p) {
				return errors.New("mail server refused")
			}
			_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO mailed (customer_id, payload) VALUES ($1, $2)`, p.CustomerID, string(m.Payload))
			return err
		})
	})
}

func contact(t *testing.T, app *kumikotest.App, in Contacted) {
	t.Helper()
	raw, err := json.Marshal(in)
	require.NoError(t, err)
	_, err = app.Executor.Command(ctx, alice, pipeline.Request{Type: "customer.contact", Payload: raw})
	require.NoError(t, err)
}

var (
	ada   = Contacted{CustomerID: "cust-ada", Email: "ada@example.org", Note: "called about the invoice"}
	grace = Contacted{CustomerID: "cust-grace", Email: "grace@example.org", Note: "asked for a demo"}
)

// A message is sealed in the outbox like an event; one whose subject is
// forgotten before the relay sends it reaches another app over the broker
// with its personal fields null, the other subject's intact.
func TestForgottenSubjectsMessageReachesAnotherAppWithoutPlaintext(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	receiving := kumikotest.NewApp(t, []*feature.Feature{mailer(nil)})
	receiving.Exec(t, `CREATE TABLE mailed (customer_id text PRIMARY KEY, payload text NOT NULL)`)
	instance(t, receiving, br.transport(t, "billing", 0))

	publishing := kumikotest.NewApp(t, []*feature.Feature{crm})
	contact(t, publishing, ada)
	contact(t, publishing, grace)
	for _, value := range []string{ada.Email, grace.Email} {
		require.Zero(t, publishing.Count(t, `SELECT count(*) FROM kumiko_events WHERE payload::text LIKE '%' || $1 || '%'`, value),
			"the outbox holds %s sealed", value)
	}
	require.Equal(t, 2, publishing.Count(t, `SELECT count(*) FROM kumiko_events WHERE aggregate_type = $1 AND personal IS NOT NULL`,
		pipeline.MessageStream))

	require.NoError(t, publishing.Executor.ForgetSubject(ctx, alice.User.TenantID, ada.CustomerID))
	publisherOf(t, publishing, integration.Config{Transport: br.transport(t, "orders", 0)}) // the relay starts only now

	waitRows(t, receiving, 2, "SELECT count(*) FROM mailed")
	got := map[string]Contacted{}
	for _, c := range []Contacted{ada, grace} {
		var raw string
		require.NoError(t, receiving.Pool.QueryRow(ctx, `SELECT payload FROM mailed WHERE customer_id = $1`, c.CustomerID).Scan(&raw))
		var p map[string]any
		require.NoError(t, json.Unmarshal([]byte(raw), &p))
		require.Contains(t, p, "email", raw)
		var in Contacted
		require.NoError(t, json.Unmarshal([]byte(raw), &in))
		got[c.CustomerID] = in
		if c == ada {
			require.Nil(t, p["email"], "the forgotten subject's email arrives as null: %s", raw)
			require.NotContains(t, raw, ada.Email)
		}
	}
	require.Equal(t, Contacted{CustomerID: ada.CustomerID, Note: ada.Note}, got[ada.CustomerID])
	require.Equal(t, grace, got[grace.CustomerID], "another subject's message is intact")
}

// The in-process transport's dead messages lose a forgotten subject's
// personal fields in the forget's transaction; another subject's stay.
func TestForgetNullsTheSubjectsDeadMessages(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{crm, mailer(func(Contacted) bool { return true })})
	svc, d := withRelay(t, app, integration.Config{MaxAttempts: 1})

	contact(t, app, ada)
	contact(t, app, grace)
	kumikotest.CatchUp(t, d, integration.RelayName)
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_integration_dead WHERE message::text LIKE '%' || $1 || '%'`, ada.Email),
		"a dead message keeps the payload a retry needs")

	require.NoError(t, app.Executor.ForgetSubject(ctx, alice.User.TenantID, ada.CustomerID))
	dead, err := svc.Dead().List(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dead, 2)
	for _, dm := range dead {
		var p Contacted
		require.NoError(t, dm.Message.Decode(&p))
		switch p.CustomerID {
		case ada.CustomerID:
			require.Equal(t, Contacted{CustomerID: ada.CustomerID, Note: ada.Note}, p)
			require.JSONEq(t, `{"customerId":"cust-ada","email":null,"note":"called about the invoice"}`, string(dm.Message.Payload))
		default:
			require.Equal(t, grace, p)
		}
	}
	require.Zero(t, app.Count(t, `SELECT count(*) FROM kumiko_integration_dead WHERE message::text LIKE '%' || $1 || '%'`, ada.Email))
}
