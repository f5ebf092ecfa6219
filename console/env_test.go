package console_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/console"
	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
)

var tenant = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")

// undeliverable makes the archive handler fail on an entry.noted message
// whose note is "undeliverable"; the tests that set it do not run in
// parallel.
var undeliverable atomic.Bool

// poisoned makes entry_log fail on an entry whose note is "poison"; the
// tests that set it do not run in parallel.
var poisoned atomic.Bool

// held, when set, makes entry_log block on an entry whose note is "hold"
// until the channel is closed (or the pass's context ends); the tests that
// set it do not run in parallel.
var held atomic.Pointer[chan struct{}]

// parkable makes entry_mail fail on an entry whose note is "parcel"; the
// tests that set it do not run in parallel.
var parkable atomic.Bool

// mailedParcels counts the "parcel" entries entry_mail handled.
var mailedParcels atomic.Int32

// ledger keeps entries three ways: their table, an inline count and a
// multi-stream log that a poison entry breaks while poisoned is set; and
// mails them (entry_mail: two partitions, parking a stream that fails).
var ledger = feature.Define("ledger", func(r *feature.Registrar) {
	r.Entity("entry", feature.Fields{"note": feature.Text().Required().MaxLen(100)})
	r.Crud("entry", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Projection("entry_counts", feature.InlineProjection{
		Source: "entry",
		Table: feature.TableDef{
			Name: "entry_counts",
			Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "n", Type: "bigint", NotNull: true},
			},
			PrimaryKey: []string{"tenant_id"},
		},
		Apply: map[string]feature.ProjectionApplyFunc{"entry.created": func(ctx feature.ProjectionContext, _ feature.Event) error {
			_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO `+ctx.Table()+` (tenant_id, n) VALUES ($1, 1)
				ON CONFLICT (tenant_id) DO UPDATE SET n = `+ctx.Table()+`.n + 1`, ctx.Tenant())
			return err
		}},
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name:        "entry_log",
		MaxAttempts: 1,
		Table: &feature.TableDef{
			Name: "entry_log",
			Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "entry_id", Type: "uuid", NotNull: true},
				{Name: "note", Type: "text", NotNull: true},
			},
			PrimaryKey: []string{"tenant_id", "entry_id"},
		},
		Apply: map[string]feature.ApplyFunc{"entry.created": func(ctx feature.ApplyContext, e feature.Event) error {
			v, err := feature.Decode[struct {
				Note string `json:"note"`
			}](e)
			if err != nil {
				return err
			}
			if h := held.Load(); v.Note == "hold" && h != nil {
				select {
				case <-*h:
				case <-ctx.Context().Done():
					return ctx.Context().Err()
				}
			}
			if v.Note == "poison" && poisoned.Load() {
				return errors.New("the poison entry cannot be logged")
			}
			_, err = ctx.DB().Exec(ctx.Context(), `INSERT INTO `+ctx.Table()+` (tenant_id, entry_id, note) VALUES ($1, $2, $3)`,
				ctx.Tenant(), e.AggregateID, v.Note)
			if err != nil {
				return err
			}
			return ctx.Publish("entry.noted", noted{Note: v.Note})
		}},
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "entry_mail", Partitions: 2, Park: true, MaxAttempts: 1,
		Apply: map[string]feature.ApplyFunc{"entry.created": func(_ feature.ApplyContext, e feature.Event) error {
			v, err := feature.Decode[struct {
				Note string `json:"note"`
			}](e)
			if err != nil || v.Note != "parcel" {
				return err
			}
			if parkable.Load() {
				return errors.New("the parcel cannot be mailed")
			}
			mailedParcels.Add(1)
			return nil
		}},
	})
	r.IntegrationEvent("entry.noted", noted{})
	r.OnIntegrationEvent("entry.noted", "archive", func(_ feature.CommandContext, m feature.Message) error {
		if strings.Contains(string(m.Payload), "undeliverable") && undeliverable.Load() {
			return errors.New("the archive refuses the entry")
		}
		return nil
	})
})

// noted is the integration event of an entry logged.
type noted struct {
	Note string `json:"note"`
}

// env is the API and the console on a real port over a fresh database,
// with a running dispatcher.
type env struct {
	*kumikotest.App
	url string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	app := kumikotest.NewApp(t, []*feature.Feature{ledger})
	s, err := khttp.NewServer(khttp.Config{JWTSecret: []byte(kumikotest.Secret), Logger: slog.New(slog.DiscardHandler)},
		app.Executor, app.Store)
	require.NoError(t, err)
	svc, err := integration.New(app.Executor, app.Store, integration.Config{MaxAttempts: 1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	relay, _ := svc.Relay()
	c, err := console.New(console.Config{
		Store: app.Store, Executor: app.Executor, Authenticate: s.TokenUser, DeadLetters: svc.Dead(),
		Interval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	s.MountConsole(c.Prefix(), c)
	srv := httptest.NewServer(s.Handler())
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "t", PollInterval: 50 * time.Millisecond, StuckAfter: 300 * time.Millisecond},
		append(app.Executor.Consumers(), relay)...)
	require.NoError(t, err)
	require.NoError(t, svc.Start(context.Background()))
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		c.Close()
		require.NoError(t, d.Stop(context.Background()))
		require.NoError(t, svc.Stop(context.Background()))
	})
	return &env{App: app, url: srv.URL}
}

// token is a token of user with roles.
func token(t *testing.T, user string, roles ...string) string {
	t.Helper()
	tok, err := khttp.IssueToken([]byte(kumikotest.Secret), user, tenant.String(), roles, time.Hour)
	require.NoError(t, err)
	return tok
}

// write sends a write of typ as a user of the tenant and returns its data.
func (e *env) write(t *testing.T, typ string, payload any) map[string]any {
	t.Helper()
	srv := &kumikotest.Server{App: e.App, BaseURL: e.url}
	return kumikotest.Data[map[string]any](srv.As(t, tenant, "wes", "User").Write(typ, payload))
}

// tab is a browser tab for one test. It fails the test on any console error
// or warning and any uncaught exception of its pages, and saves a screenshot
// when the test failed.
type tab struct {
	ctx context.Context
	mu  sync.Mutex
	bad []string
}

func newTab(t *testing.T) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext()) // cookies of its own
	tb := &tab{ctx: ctx}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				tb.mu.Lock()
				tb.bad = append(tb.bad, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				tb.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(90)); err == nil {
				path := filepath.Join(t.ArtifactDir(), "screenshot.png")
				if err := os.WriteFile(path, png, 0o600); err == nil {
					t.Logf("screenshot: %s", path)
				}
			}
		}
		cancel()
		<-done
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, b := range tb.bad {
			t.Errorf("browser console: %s", b)
		}
	})
	return tb
}

// run runs steps in the tab, failing the test on an error.
func (tb *tab) run(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// text is the text of the element at sel, read in one step (the live
// tables change under a test).
func (tb *tab) text(t *testing.T, sel string) string {
	t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(sel)+`).innerText`))
	require.NoError(t, err)
	return s
}

// login signs in with tok through the login form, starting at path.
func (tb *tab) login(t *testing.T, e *env, path, tok string) {
	t.Helper()
	tb.run(t,
		chromedp.Navigate(e.url+path),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SetValue(chromedp.CSS(`#token`), tok),
		chromedp.Click(chromedp.CSS(`form.login button[type=submit]`)),
	)
}

// visible waits until an element matches sel.
func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

// confirm clicks the button at sel and confirms the dialog it opens.
func confirm(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Click(chromedp.CSS(sel)),
		visible(`#confirm-ok`),
		chromedp.Click(chromedp.CSS(`#confirm-ok`)),
	)
}
