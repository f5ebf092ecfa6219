package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
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

	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumiko"
)

// Development defaults used when the environment does not say.
const (
	devServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	devJWTSecret = "kumiko-development-secret-not-for-production"
	devTenant    = "01900000-0000-7000-8000-000000000001"
)

// Main runs the command line of an app binary (NewCommand) and exits
// non-zero when the command fails.
func Main(cfg kumiko.Config, features ...*feature.Feature) { Execute(NewCommand(cfg, features...)) }

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

// NewCommand is the command tree of an app binary: serve, worker and the
// operations commands with the app's features.
//
// Fields of cfg left zero are read from the environment (see
// kumiko.Config.FromEnv). For a development machine it fills in the rest:
// without DATABASE_URL it uses the local PostgreSQL and creates a database
// named after the app; without KUMIKO_JWT_SECRET it uses a development
// secret and serve prints a token to try the API with.
func NewCommand(cfg kumiko.Config, features ...*feature.Feature) *cobra.Command {
	name := cfg.WithDefaults().Name
	root := &cobra.Command{Use: name, Short: name + ", a kumiko application", SilenceUsage: true}
	root.AddCommand(&cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API and deliver events to consumers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), cmd.OutOrStdout(), cfg, features, true)
		},
	}, &cobra.Command{
		Use:   "worker",
		Short: "Only deliver events to consumers (no HTTP API)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), cmd.OutOrStdout(), cfg, features, false)
		},
	})
	root.AddCommand(commands(cfg, features...)...)
	return root
}

// Generic is the command tree of cmd/kumiko: the operations commands that
// need no app features.
func Generic() *cobra.Command {
	root := &cobra.Command{
		Use:          "kumiko",
		Short:        "Operate a kumiko event store",
		SilenceUsage: true,
	}
	// nil features: the generic commands.
	root.AddCommand(commands(kumiko.Config{Name: "kumiko"})...)
	return root
}

// serve builds the app (validating the configuration and the features
// before anything touches the database), starts it and runs it until ctx
// ends.
func serve(ctx context.Context, out io.Writer, cfg kumiko.Config, features []*feature.Feature, withHTTP bool) error {
	cfg = cfg.FromEnv().WithDefaults()
	devDB, dev := false, false
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL, devDB, dev = devDatabaseURL(cfg.Name), true, true
	}
	if cfg.JWTSecret == "" {
		cfg.Logger.Warn("kumiko: no KUMIKO_JWT_SECRET; using the development secret")
		cfg.JWTSecret, dev = devJWTSecret, true
	}
	build := kumiko.New
	if !withHTTP {
		build = kumiko.BuildWorker
	}
	app, err := build(ctx, cfg, features...)
	if err != nil {
		return err
	}
	if devDB {
		if err := createDevDatabase(ctx, cfg.DatabaseURL); err != nil {
			return errors.Join(err, app.Stop(ctx))
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = app.Start(startCtx)
	cancel()
	if err != nil {
		return err
	}
	if dev && withHTTP {
		printDevHelp(out, app)
	}
	if !withHTTP {
		fmt.Fprintf(out, "%s worker %s is delivering events\n", cfg.Name, app.Parts().Config.InstanceID)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout+5*time.Second)
	defer cancel()
	return app.Stop(stopCtx)
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
func devRoles(cfg kumiko.Config) []string { return []string{cfg.AdminRole, "User", cfg.OperatorRole} }

// printDevHelp prints a development token and a request to paste.
func printDevHelp(out io.Writer, app *kumiko.App) {
	p := app.Parts()
	roles := devRoles(p.Config)
	token, err := khttp.IssueToken([]byte(p.Config.JWTSecret), "dev", devTenant, roles, 24*time.Hour, tokenOptions(p.Config)...)
	if err != nil {
		fmt.Fprintf(out, "could not issue a development token: %v\n", err)
		return
	}
	addr := app.Addr()
	if strings.HasPrefix(addr, "[::]:") || strings.HasPrefix(addr, "0.0.0.0:") {
		addr = "localhost:" + addr[strings.LastIndex(addr, ":")+1:]
	}
	fmt.Fprintf(out, "\n%s is ready on http://%s (database %s)\n", p.Config.Name, addr, redactURL(p.Config.DatabaseURL))
	fmt.Fprintf(out, "Development token for user dev in tenant %s, roles %s, valid 24 h:\n\n", devTenant, strings.Join(roles, ", "))
	fmt.Fprintf(out, "export TOKEN=%s\n", token)
	for _, e := range p.Registry.Entities() {
		for _, v := range e.Verbs() {
			if v != feature.VerbCreate {
				continue
			}
			fmt.Fprintf(out, "curl -s http://%s/api/write -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \\\n  -d '{\"type\":\"%s\",\"payload\":{%s}}'\n\n",
				addr, v.HandlerName(e.Name()), examplePayload(e.FieldNames(), func(f string) (spec.Field, bool) { return e.Field(f) }))
			return
		}
	}
}

// tokenOptions are the iss and aud claims cfg's server checks.
func tokenOptions(cfg kumiko.Config) []khttp.TokenOption {
	var opts []khttp.TokenOption
	if cfg.JWTIssuer != "" {
		opts = append(opts, khttp.TokenIssuer(cfg.JWTIssuer))
	}
	if cfg.JWTAudience != "" {
		opts = append(opts, khttp.TokenAudience(cfg.JWTAudience))
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
