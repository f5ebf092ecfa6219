package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/registry"
)

// Development defaults used when the environment does not say.
const (
	devServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	devJWTSecret = "kumiko-development-secret-not-for-production"
	devTenant    = "01900000-0000-7000-8000-000000000001"
	defaultName  = "kumiko"
)

// Settings are the values the commands read from an app's configuration,
// resolved for one command: its flags, then the app's Config, then the
// environment, then the defaults.
type Settings struct {
	Name         string // the app's name; the development database is named after it
	DatabaseURL  string // empty: the local development server
	Schema       string // the schema holding the kumiko tables
	JWTSecret    string // empty: the development secret, unless KeySet
	KeySet       bool   // tokens are verified with a JWKS URL or an OIDC issuer
	JWTIssuer    string // iss claim of issued tokens, when set
	JWTAudience  string // aud claim of issued tokens, when set
	AdminRole    string // the tenant admin role
	OperatorRole string // the role that sees consumers, projections and metrics
	RabbitMQURL  string // the integration events' broker; empty: in process
	RedisURL     string // the idempotency store; subject forget removes the subject's records from it
	DataKey      string // KUMIKO_DATA_KEY: the key-encryption key(s) of personal data
	// DataKeys wraps personal data keys instead of DataKey (a KMS).
	DataKeys        eventstore.KeyProvider
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
}

// Server is an app built for serve or worker: validated, with nothing
// created in the database before Start.
type Server interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	// Addr is the HTTP API's listen address once started.
	Addr() string
	// InstanceID is the id the app delivers events as.
	InstanceID() string
	// Registry is the app's compiled features.
	Registry() *registry.Registry
}

// App is what an app binary hands the commands: the kumiko facade builds it
// from its Config and features, so this package does not depend on it.
type App struct {
	// Name is the binary's name, the root command's.
	Name string
	// Features are the app's features; nil gives the generic commands of
	// cmd/kumiko, which see events as stored.
	Features []*feature.Feature
	// Resolve fills the zero fields of s (the flags' values) from the app's
	// configuration, the environment and the defaults. Nil: the environment
	// and the defaults only.
	Resolve func(s Settings) Settings
	// Build builds the app for serve (withHTTP) or worker with the resolved
	// settings' database URL and JWT secret. Nil: no serve and worker.
	Build func(ctx context.Context, s Settings, withHTTP bool) (Server, error)
}

// Execute runs root until SIGINT or SIGTERM cancels its context and exits 1
// when it fails; cobra has printed the error, once, by then.
func Execute(root *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

// stopping is what serve and worker do on SIGINT or SIGTERM, for their help.
const stopping = `On SIGINT or SIGTERM it stops taking new work and lets running work finish
for KUMIKO_SHUTDOWN_TIMEOUT (a duration, default 15s). Then it cancels what is
still running — requests, consumer passes, jobs, integration handlers —, closes
the database connections that work holds (its transactions roll back; it is
delivered again after the next start), logs "kumiko: stopped, abandoned …"
naming it, and exits within 5s more. Exit code 0 for a clean stop, 1 when work
was abandoned or the stop failed.`

// NewCommand is the command tree of a binary: serve and worker when app can
// build a server, and the operations commands.
func NewCommand(app App) *cobra.Command {
	name := app.Name
	if name == "" {
		name = defaultName
	}
	root := &cobra.Command{Use: name, Short: name + ", a kumiko application", SilenceUsage: true}
	if app.Build != nil {
		root.AddCommand(&cobra.Command{
			Use:   "serve",
			Short: "Run the HTTP API and deliver events to consumers",
			Long:  "Run the HTTP API, deliver events to consumers and work jobs.\n\n" + stopping,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return serve(cmd.Context(), cmd.OutOrStdout(), app, true)
			},
		}, &cobra.Command{
			Use:   "worker",
			Short: "Only deliver events to consumers (no HTTP API)",
			Long:  "Deliver events to consumers and work jobs, without the HTTP API.\n\n" + stopping,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return serve(cmd.Context(), cmd.OutOrStdout(), app, false)
			},
		})
	}
	root.AddCommand(commands(app)...)
	return root
}

// Generic is the command tree of cmd/kumiko: the operations commands that
// need no app features.
func Generic() *cobra.Command {
	root := NewCommand(App{Name: defaultName})
	root.Short = "Operate a kumiko event store"
	return root
}

// resolve fills the zero fields of s through app.Resolve, else from the
// environment and the defaults.
func (app App) resolve(s Settings) Settings {
	if app.Resolve != nil {
		return app.Resolve(s)
	}
	return s.fromEnv()
}

// fromEnv fills the zero fields of s from the environment variables
// kumiko.Config.FromEnv reads, then the defaults of kumiko.Config.
func (s Settings) fromEnv() Settings {
	set := func(field *string, env, def string) {
		if *field == "" {
			*field = os.Getenv(env)
		}
		if *field == "" {
			*field = def
		}
	}
	set(&s.DatabaseURL, "DATABASE_URL", "")
	set(&s.Schema, "KUMIKO_SCHEMA", "public")
	set(&s.JWTSecret, "KUMIKO_JWT_SECRET", "")
	set(&s.RabbitMQURL, "RABBITMQ_URL", "")
	set(&s.RedisURL, "REDIS_URL", "")
	set(&s.DataKey, "KUMIKO_DATA_KEY", "")
	set(&s.JWTIssuer, "KUMIKO_JWT_ISSUER", "")
	set(&s.JWTAudience, "KUMIKO_JWT_AUDIENCE", "")
	set(&s.AdminRole, "KUMIKO_ADMIN_ROLE", khttp.DefaultAdminRole)
	set(&s.OperatorRole, "KUMIKO_OPERATOR_ROLE", khttp.DefaultOperatorRole)
	if s.Name == "" {
		s.Name = defaultName
	}
	if s.Logger == nil {
		s.Logger = DefaultLogger(os.Stderr)
	}
	return s
}

// DefaultLogger is the logger of an app binary that configures none: text
// for a person when w is a terminal, one JSON object per line otherwise (in
// production, for the log pipeline), at level Info.
func DefaultLogger(w *os.File) *slog.Logger {
	if term.IsTerminal(int(w.Fd())) {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

// serve builds the app (validating the configuration and the features
// before anything touches the database), starts it and runs it until ctx
// ends (SIGINT or SIGTERM), then stops it: an error, and so exit code 1,
// when the stop abandoned work or failed.
func serve(ctx context.Context, out io.Writer, app App, withHTTP bool) error {
	s := app.resolve(Settings{})
	devDB, dev := false, false
	if s.DatabaseURL == "" {
		s.DatabaseURL, devDB, dev = devDatabaseURL(s.Name), true, true
	}
	if s.JWTSecret == "" && !s.KeySet {
		s.Logger.Warn("kumiko: no KUMIKO_JWT_SECRET; using the development secret")
		s.JWTSecret, dev = devJWTSecret, true
	}
	srv, err := app.Build(ctx, s, withHTTP)
	if err != nil {
		return err
	}
	if devDB {
		if err := createDevDatabase(ctx, s.DatabaseURL); err != nil {
			return errors.Join(err, srv.Stop(ctx))
		}
	}
	// The start is bounded; what it starts runs until Stop, though its
	// context is cancelled right after.
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = srv.Start(startCtx)
	cancel()
	if err != nil {
		return err
	}
	if dev && withHTTP {
		printDevHelp(out, s, srv)
	}
	if !withHTTP {
		fmt.Fprintf(out, "%s worker %s is delivering events\n", s.Name, srv.InstanceID())
	}
	<-ctx.Done()
	// Stop bounds itself: graceful for the shutdown timeout, then it gives
	// up on what still runs, within its margin.
	return srv.Stop(context.WithoutCancel(ctx))
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// devDatabaseURL is the URL of the database named after the app on the
// local development server.
func devDatabaseURL(app string) string {
	name := "kumiko_" + strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(app), "_"), "_")
	if name == "kumiko_kumiko" {
		name = "kumiko"
	}
	u, _ := url.Parse(devServerURL)
	u.Path = "/" + name
	return u.String()
}

// createDevDatabase creates the database of a devDatabaseURL on the local
// server when it is missing.
func createDevDatabase(ctx context.Context, dbURL string) error {
	u, err := url.Parse(dbURL)
	if err != nil {
		return err
	}
	name := strings.TrimPrefix(u.Path, "/")
	conn, err := pgx.Connect(ctx, devServerURL)
	if err != nil {
		return fmt.Errorf("no DATABASE_URL, and the local PostgreSQL is not usable: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if err != nil && (!errors.As(err, &pgErr) || pgErr.Code != "42P04") {
		return fmt.Errorf("no DATABASE_URL, and the local PostgreSQL is not usable: create database %s: %w", name, err)
	}
	return nil
}

// devRoles are the roles of the development token: on a development machine
// one person is user, tenant admin and operator.
func devRoles(s Settings) []string { return []string{s.AdminRole, "User", s.OperatorRole} }

// printDevHelp prints a development token and a request to paste.
func printDevHelp(out io.Writer, s Settings, srv Server) {
	roles := devRoles(s)
	token, err := khttp.IssueToken([]byte(s.JWTSecret), "dev", devTenant, roles, 24*time.Hour, tokenOptions(s)...)
	if err != nil {
		fmt.Fprintf(out, "could not issue a development token: %v\n", err)
		return
	}
	addr := srv.Addr()
	if strings.HasPrefix(addr, "[::]:") || strings.HasPrefix(addr, "0.0.0.0:") {
		addr = "localhost:" + addr[strings.LastIndex(addr, ":")+1:]
	}
	fmt.Fprintf(out, "\n%s is ready on http://%s (database %s)\n", s.Name, addr, redactURL(s.DatabaseURL))
	fmt.Fprintf(out, "Development token for user dev in tenant %s, roles %s, valid 24 h:\n\n", devTenant, strings.Join(roles, ", "))
	fmt.Fprintf(out, "export TOKEN=%s\n", token)
	for _, e := range srv.Registry().Entities() {
		for _, v := range e.Verbs() {
			if v != registry.VerbCreate {
				continue
			}
			fmt.Fprintf(out, "curl -s http://%s/api/write -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \\\n  -d '{\"type\":\"%s\",\"payload\":{%s}}'\n\n",
				addr, v.HandlerName(e.Name()), examplePayload(e.FieldNames(), func(f string) (spec.Field, bool) { return e.Field(f) }))
			return
		}
	}
}

// tokenOptions are the iss and aud claims s's server checks.
func tokenOptions(s Settings) []khttp.TokenOption {
	var opts []khttp.TokenOption
	if s.JWTIssuer != "" {
		opts = append(opts, khttp.TokenIssuer(s.JWTIssuer))
	}
	if s.JWTAudience != "" {
		opts = append(opts, khttp.TokenAudience(s.JWTAudience))
	}
	return opts
}

// examplePayload fills the required fields of a create with sample values.
func examplePayload(fields []string, fs func(string) (spec.Field, bool)) string {
	var parts []string
	for _, f := range fields {
		s, _ := fs(f)
		if !s.Required {
			continue
		}
		switch s.Type {
		case spec.TypeText:
			parts = append(parts, fmt.Sprintf("%q:%q", f, "Try kumiko"))
		case spec.TypeNumber:
			parts = append(parts, fmt.Sprintf("%q:1", f))
		case spec.TypeBool:
			parts = append(parts, fmt.Sprintf("%q:true", f))
		case spec.TypeTimestamp:
			parts = append(parts, fmt.Sprintf("%q:%q", f, time.Now().UTC().Format(time.RFC3339)))
		}
	}
	return strings.Join(parts, ",")
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
