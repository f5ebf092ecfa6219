package kumiko

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/console"
	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

const configTestSecret = "a-config-test-secret-long-enough-for-hs256"

// holds reports whether err is, or wraps (through %w and errors.Join),
// an error that reads exactly like want.
func holds(err, want error) bool {
	if err == nil {
		return false
	}
	if err.Error() == want.Error() {
		return true
	}
	switch u := err.(type) { //nolint:errorlint // walks the wrap tree itself, one level at a time
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if holds(e, want) {
				return true
			}
		}
	case interface{ Unwrap() error }:
		return holds(u.Unwrap(), want)
	}
	return false
}

// A setting handed to a part is checked by the part's validator alone: New
// refuses it with exactly the error the part's Validate gives for the
// mapped config, and with no second message of its own about it.
func TestConfigSettingCheckedByItsPartOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := Config{DatabaseURL: "postgres://x/y", JWTSecret: configTestSecret}
	cases := []struct {
		name, setting string
		mutate        func(*Config)
		part          func(Config) error // the part's error for the mapped config, as New should report it
	}{
		{"JWTSecret short", "JWTSecret", func(c *Config) { c.JWTSecret = "short" },
			func(c Config) error { return c.httpConfig().WithDefaults().Validate() }},
		{"JWTSecret missing", "JWTSecret", func(c *Config) { c.JWTSecret = "" },
			func(c Config) error { return c.httpConfig().WithDefaults().Validate() }},
		{"JobRescueAfter negative", "JobRescueAfter", func(c *Config) { c.JobRescueAfter = -time.Second },
			func(c Config) error {
				return fmt.Errorf("Config.JobRescueAfter: %w", c.jobsConfig().WithDefaults().Validate())
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			want := tc.part(cfg.WithDefaults())
			require.Error(t, want)
			_, err := New(ctx, cfg)
			require.Error(t, err)
			require.True(t, holds(err, want), "New's error %q does not hold the part's %q", err, want)
			require.ErrorContains(t, err, "Config."+tc.setting, "the message names kumiko's setting")
			require.Equal(t, 1, strings.Count(err.Error(), tc.setting), "one check, one message: %q", err)
		})
	}
	// The message kumiko's users match still reads the same.
	_, err := New(ctx, Config{DatabaseURL: "postgres://x/y", JWTSecret: "short"})
	require.ErrorContains(t, err, "Config.JWTSecret must be at least")
}

// Every part config mapped from a Config with nothing but its required
// settings, defaults filled in, fits its part: its Validate passes, or,
// for a part without an exported validator, its constructor (which
// validates and touches no network) accepts it.
func TestConfigPartConfigsValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The zero Config fails the HTTP server's check only for want of a key.
	zero := Config{}.WithDefaults()
	require.ErrorContains(t, zero.httpConfig().WithDefaults().Validate(), "Config.JWTSecret is required")

	c := Config{DatabaseURL: "postgres://127.0.0.1:1/none", JWTSecret: configTestSecret,
		Logger: slog.New(slog.DiscardHandler)}.WithDefaults()
	require.NoError(t, c.validate())
	c = c.resolveInstanceID() // as New does before it wires

	pool, err := newPool(ctx, c, newConnTracker())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reg, err := registry.Build()
	require.NoError(t, err)
	store, err := eventstore.New(pool, c.storeConfig())
	require.NoError(t, err)
	exec, err := pipeline.New(reg, store, c.pipelineConfig())
	require.NoError(t, err)

	cases := map[string]func(Config) error{
		"httpConfig": func(c Config) error { return c.httpConfig().WithDefaults().Validate() },
		"jobsConfig": func(c Config) error { return c.jobsConfig().WithDefaults().Validate() },
		"storeConfig": func(c Config) error {
			_, err := eventstore.New(pool, c.storeConfig())
			return err
		},
		"pipelineConfig": func(c Config) error {
			_, err := pipeline.New(reg, store, c.pipelineConfig())
			return err
		},
		"rabbitConfig": func(c Config) error {
			_, err := integration.NewRabbit(c.rabbitConfig())
			return err
		},
		"integrationConfig": func(c Config) error {
			_, err := integration.New(exec, store, c.integrationConfig())
			return err
		},
		"consumerConfig": func(c Config) error {
			_, err := consumer.New(store, c.consumerConfig())
			return err
		},
		"redisConfig": func(c Config) (err error) {
			client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
			defer func() { _ = client.Close() }()
			defer func() {
				if p := recover(); p != nil { // NewRedisStore panics on a config that does not fit
					err = fmt.Errorf("%v", p)
				}
			}()
			idempotency.NewRedisStore(client, c.redisConfig())
			return nil
		},
		"consoleConfig": func(c Config) error {
			cc := c.consoleConfig()
			cc.Store, cc.Executor = store, exec
			cc.Authenticate = func(context.Context, string) (feature.User, time.Time, error) {
				return feature.User{}, time.Time{}, errors.New("no")
			}
			con, err := console.New(cc)
			if err == nil {
				con.Close()
			}
			return err
		},
	}
	for name, fits := range cases {
		require.NoError(t, fits(c), name)
	}
}
