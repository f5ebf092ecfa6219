package kumiko

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
)

// Development defaults Main uses when the environment does not say.
const (
	devServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	devJWTSecret = "kumiko-development-secret-not-for-production"
	devTenant    = "01900000-0000-7000-8000-000000000001"
)

// Main is the command line of an app binary:
//
//	func main() { kumiko.Main(kumiko.Config{Name: "tasks"}, tasks.Feature) }
//
// Fields left zero are read from the environment (see Config.FromEnv). For a
// development machine it fills in the rest: without DATABASE_URL it uses the
// local PostgreSQL and creates a database named after the app; without
// KUMIKO_JWT_SECRET it uses a development secret and prints a token to try
// the API with. It exits non-zero on failure.
func Main(cfg Config, features ...*feature.Feature) {
	root := NewCommand(cfg, features...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

// NewCommand returns Main's command tree, for binaries that add commands of
// their own.
func NewCommand(cfg Config, features ...*feature.Feature) *cobra.Command {
	name := cfg.WithDefaults().Name
	root := &cobra.Command{Use: name, Short: name + ", a kumiko application", SilenceUsage: true}
	root.AddCommand(&cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API and deliver events to consumers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serveCommand(cmd.Context(), cmd.OutOrStdout(), cfg, features, true)
		},
	}, &cobra.Command{
		Use:   "worker",
		Short: "Only deliver events to consumers (no HTTP API)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serveCommand(cmd.Context(), cmd.OutOrStdout(), cfg, features, false)
		},
	})
	root.AddCommand(OpsCommands(cfg, features...)...)
	return root
}

func serveCommand(ctx context.Context, out io.Writer, cfg Config, features []*feature.Feature, withHTTP bool) error {
	cfg = cfg.FromEnv().WithDefaults()
	dev := false
	if cfg.DatabaseURL == "" {
		u, err := devDatabase(ctx, cfg.Name)
		if err != nil {
			return fmt.Errorf("no DATABASE_URL, and the local PostgreSQL is not usable: %w", err)
		}
		cfg.DatabaseURL, dev = u, true
	}
	if cfg.JWTSecret == "" {
		cfg.Logger.Warn("kumiko: no KUMIKO_JWT_SECRET; using the development secret")
		cfg.JWTSecret, dev = devJWTSecret, true
	}
	build := BuildServer
	if !withHTTP {
		build = BuildWorker
	}
	app, err := build(ctx, cfg, features...)
	if err != nil {
		return err
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
	stopCtx, cancel := context.WithTimeout(context.Background(), cfg.WithDefaults().ShutdownTimeout+5*time.Second)
	defer cancel()
	return app.Stop(stopCtx)
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// devDatabase creates (when missing) a database named after the app on the
// local server and returns its URL.
func devDatabase(ctx context.Context, app string) (string, error) {
	name := "kumiko_" + strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(app), "_"), "_")
	if name == "kumiko_kumiko" {
		name = "kumiko"
	}
	conn, err := pgx.Connect(ctx, devServerURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if err != nil && (!errors.As(err, &pgErr) || pgErr.Code != "42P04") {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, _ := url.Parse(devServerURL)
	u.Path = "/" + name
	return u.String(), nil
}

// devRoles are the roles of the development token: on a development machine
// one person is user, tenant admin and operator.
var devRoles = []string{"Admin", "User", "Operator"}

// printDevHelp prints a development token and a request to paste.
func printDevHelp(out io.Writer, app *App) {
	p := app.Parts()
	token, err := khttp.IssueToken([]byte(p.Config.JWTSecret), "dev", devTenant, devRoles, 24*time.Hour, tokenOptions(p.Config)...)
	if err != nil {
		fmt.Fprintf(out, "could not issue a development token: %v\n", err)
		return
	}
	addr := app.Addr()
	if strings.HasPrefix(addr, "[::]:") || strings.HasPrefix(addr, "0.0.0.0:") {
		addr = "localhost:" + addr[strings.LastIndex(addr, ":")+1:]
	}
	fmt.Fprintf(out, "\n%s is ready on http://%s (database %s)\n", p.Config.Name, addr, redactURL(p.Config.DatabaseURL))
	fmt.Fprintf(out, "Development token for user dev in tenant %s, roles %s, valid 24 h:\n\n", devTenant, strings.Join(devRoles, ", "))
	fmt.Fprintf(out, "export TOKEN=%s\n", token)
	for _, e := range p.Registry.Entities() {
		for _, v := range e.Verbs() {
			if v != feature.VerbCreate {
				continue
			}
			fmt.Fprintf(out, "curl -s http://%s/api/write -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \\\n  -d '{\"type\":\"%s\",\"payload\":{%s}}'\n\n",
				addr, v.HandlerName(e.Name()), examplePayload(e.FieldNames(), func(f string) (feature.FieldSpec, bool) { return e.Field(f) }))
			return
		}
	}
}

// tokenOptions are the iss and aud claims cfg's server checks.
func tokenOptions(cfg Config) []khttp.TokenOption {
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
func examplePayload(fields []string, spec func(string) (feature.FieldSpec, bool)) string {
	var parts []string
	for _, f := range fields {
		s, _ := spec(f)
		if !s.Required {
			continue
		}
		switch s.Type {
		case feature.TypeText:
			parts = append(parts, fmt.Sprintf("%q:%q", f, "Try kumiko"))
		case feature.TypeNumber:
			parts = append(parts, fmt.Sprintf("%q:1", f))
		case feature.TypeBool:
			parts = append(parts, fmt.Sprintf("%q:true", f))
		case feature.TypeTimestamp:
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
