package kumiko

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
	"github.com/kumiko-go/kumiko/internal/ops"
	"github.com/kumiko-go/kumiko/registry"
)

// Main runs the command line of an app binary and exits non-zero when the
// command fails, with its error printed once on stderr:
//
//	func main() { kumiko.Main(kumiko.Config{Name: "tasks"}, tasks.Feature) }
//
// The commands: serve (the HTTP API and event delivery), worker (event
// delivery only), and the operations commands: migrate, consumer, inspect,
// events (tail, asof, prune), snapshot, project, integration (dead
// messages) and token. serve and worker run until SIGINT or SIGTERM, then
// stop within Config.ShutdownTimeout + StopMargin (see App.Stop) and exit
// 0, or 1 when the stop abandoned work (ErrAbandoned) or failed.
//
// Fields of cfg left zero are read from the environment (see
// Config.FromEnv). For a development machine it fills in the rest: without
// DATABASE_URL it uses the local PostgreSQL and creates a database named
// after the app; without KUMIKO_JWT_SECRET it uses a development secret and
// serve prints a token to try the API with. Invalid features or
// configuration fail before anything is created in the database.
func Main(cfg Config, features ...*feature.Feature) { ops.Execute(NewCommand(cfg, features...)) }

// NewCommand returns Main's command tree, for binaries that add commands of
// their own.
func NewCommand(cfg Config, features ...*feature.Feature) *cobra.Command {
	if cfg.Logger == nil {
		cfg.Logger = ops.DefaultLogger(os.Stderr)
	}
	return ops.NewCommand(ops.App{
		Name:     cfg.WithDefaults().Name,
		Features: features,
		Resolve: func(s ops.Settings) ops.Settings {
			c := cfg
			if s.DatabaseURL != "" {
				c.DatabaseURL = s.DatabaseURL
			}
			if s.Schema != "" {
				c.Schema = s.Schema
			}
			return c.FromEnv().WithDefaults().settings()
		},
		Build: func(ctx context.Context, s ops.Settings, withHTTP bool) (ops.Server, error) {
			c := cfg.FromEnv().WithDefaults()
			c.DatabaseURL, c.JWTSecret = s.DatabaseURL, s.JWTSecret
			var tp *sdktrace.TracerProvider
			if c.TracerProvider == nil {
				var err error
				if tp, err = tracerFromEnv(ctx, c.Name); err != nil {
					return nil, err
				}
				if tp != nil {
					c.TracerProvider = tp
				}
			}
			build := New
			if !withHTTP {
				build = BuildWorker
			}
			app, err := build(ctx, c, features...)
			if err != nil {
				if tp != nil {
					err = errors.Join(err, tp.Shutdown(ctx))
				}
				return nil, err
			}
			return opsServer{App: app, tracer: tp}, nil
		},
	})
}

// settings are the values of c the commands read.
func (c Config) settings() ops.Settings {
	return ops.Settings{
		Name: c.Name, DatabaseURL: c.DatabaseURL, Schema: c.Schema,
		JWTSecret: c.JWTSecret, KeySet: c.JWKSURL != "" || c.OIDCIssuer != "", JWTIssuer: c.JWTIssuer, JWTAudience: c.JWTAudience,
		AdminRole: c.AdminRole, OperatorRole: c.OperatorRole, RabbitMQURL: c.RabbitMQURL,
		RedisURL: c.RedisURL, DataKey: c.DataKey, DataKeys: c.DataKeys,
		ShutdownTimeout: c.ShutdownTimeout, Logger: c.Logger,
	}
}

// opsServer is an App as the serve and worker commands run it, with the
// tracer provider Main made from the environment (nil when none), flushed
// when the app stops.
type opsServer struct {
	*App
	tracer *sdktrace.TracerProvider
}

// Stop stops the app, then flushes the traces within what is left of the
// app's bound (ShutdownTimeout + StopMargin).
func (s opsServer) Stop(ctx context.Context) error {
	bound := time.Now().Add(s.parts.Config.ShutdownTimeout + StopMargin)
	err := s.App.Stop(ctx)
	if s.tracer != nil {
		tctx, cancel := context.WithDeadline(ctx, lifecycle.Later(bound, time.Now().Add(minStepWait)))
		defer cancel()
		err = errors.Join(err, s.tracer.Shutdown(tctx))
	}
	return err
}

func (s opsServer) InstanceID() string           { return s.parts.Config.InstanceID }
func (s opsServer) Registry() *registry.Registry { return s.parts.Registry }
