// Package kumiko is the facade an application uses: [Config], [New] (a
// server; [BuildWorker] for one without the HTTP API) and the [App] it
// returns, with Start and Stop, in plain Go; and the fx [Module], a thin
// wrapper over New for applications that compose their own fx graph.
//
// [Main] is the command line of an app binary (serve, worker and the
// operations commands), a short shim over the commands it shares with
// cmd/kumiko.
//
// Every part New wires is also constructible by hand: eventstore.New,
// registry.Build, pipeline.New, idempotency.NewRedisStore or
// NewMemoryStore, and http.NewServer.
package kumiko

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/search"
)

// SharedInstanceID is the instance id of shared consumer state; no process
// may use it as its own.
const SharedInstanceID = "__shared__"

// DefaultIdleInTransactionTimeout is Config.IdleInTransactionTimeout when
// none is set: far above any transaction a request or a consumer pass keeps
// open between statements, short enough that a stuck one is gone within a
// minute.
const DefaultIdleInTransactionTimeout = 60 * time.Second

// Config configures a server. The zero value is not enough on its own:
// DatabaseURL and JWTSecret must be set (Main fills them from the
// environment, with development defaults).
//
// Each setting is handed to the part that uses it (the HTTP server, the
// job runner, the event dispatcher, …), mapped into that part's config in
// one place, and that part validates it: New runs the part's validator on
// the mapped config before anything connects, so a setting that does not
// fit fails New with the part's message (JWTSecret is http.Config's,
// JobRescueAfter jobs.Config's RescueAfter). The settings New uses itself
// (DatabaseURL, MaxConns, the listeners' addresses and limits, …), and
// those of parts without an exported validator (InstanceID, the
// heartbeat), New validates itself.
type Config struct {
	// Name of the application, used in logs and for the development
	// database Main creates. Default "kumiko".
	Name string
	// DatabaseURL of PostgreSQL (postgres:// URL). Required.
	DatabaseURL string
	// Schema holding the kumiko tables and read tables. Default "public".
	Schema string
	// MaxConns of the database pool. Default 20.
	MaxConns int32
	// RedisURL of the idempotency store (redis:// URL). Empty: an in-memory
	// store serves, which is right for one process only (logged).
	// Its query parameters set the go-redis client's own timeouts
	// (dial_timeout, read_timeout, write_timeout, pool_timeout, …; see
	// docs/operations.md).
	RedisURL string
	// RedisTimeout bounds each call to the idempotency store's Redis on a
	// keyed request: past it the keyed write answers 503 unavailable
	// (idempotency_unavailable), or runs without replay under
	// IdempotencyFailOpen, instead of waiting for go-redis's own timeouts
	// (5 s a read by default) on a Redis that accepts connections and never
	// answers. Default idempotency.DefaultRedisTimeout (1s); negative: only
	// the client's own timeouts apply. Unused without RedisURL.
	RedisTimeout time.Duration
	// DataKey is the key-encryption key of personal data
	// (docs/personal-data.md): base64 of 32 random bytes. After a
	// rotation it lists the new key first and the previous ones after it,
	// comma-separated, until `subject rotate-key` has re-wrapped every
	// data key. Required when a feature declares personal fields, unless
	// DataKeys is set; a wrong key fails the start.
	DataKey string
	// DataKeys wraps the data subjects' keys instead of DataKey: a key
	// management service's eventstore.KeyProvider.
	DataKeys eventstore.KeyProvider
	// RabbitMQURL of the broker integration events travel through
	// (amqp:// URL): the app publishes to the exchange kumiko.events and
	// receives on a quorum queue called Name. Empty: they are delivered in
	// this process, to the app's own handlers.
	RabbitMQURL string
	// IntegrationRetryBackoff is how long a message whose handling failed
	// waits before it is delivered again, doubling after each failure up to
	// IntegrationMaxRetryBackoff (integration.RabbitConfig.RetryBackoff;
	// in process integration.Config.RetryBackoff). Default 100ms.
	IntegrationRetryBackoff time.Duration
	// IntegrationMaxRetryBackoff caps that wait over RabbitMQ; default 1m.
	IntegrationMaxRetryBackoff time.Duration
	// IdempotencyFailOpen lets keyed writes run without idempotency while
	// Redis is down instead of answering 503.
	IdempotencyFailOpen bool
	// Addr the HTTP server listens on. Default ":8080".
	Addr string
	// JWTSecret verifies HS256 bearer tokens, at least 32 bytes. Required
	// unless JWKSURL or OIDCIssuer is set.
	JWTSecret string
	// JWKSURL verifies RS256 and ES256 bearer tokens with the keys of this
	// JWK set (cached, refetched on rotation); see http.Config.JWKSURL.
	JWKSURL string
	// OIDCIssuer verifies RS256 and ES256 bearer tokens with the keys its
	// discovery document names, and requires iss to name it unless
	// JWTIssuer is set; see http.Config.OIDCIssuer.
	OIDCIssuer string
	// CORSOrigins allows browsers on these origins to call the API. Empty
	// (default): no CORS.
	CORSOrigins []string
	// JWTIssuer, when set, must equal every token's iss claim. Empty: not
	// checked.
	JWTIssuer string
	// JWTAudience, when set, must be among every token's aud claim. Empty:
	// not checked.
	JWTAudience string
	// AdminRole is the role that inspects its own tenant's streams
	// (/api/inspect); the operations commands act with it where they read
	// as a tenant's user. Default "Admin".
	AdminRole string
	// OperatorRole is the role that sees app-wide state over HTTP
	// (/api/consumers, /api/projections, and /metrics unless MetricsAddr is
	// set). Default "Operator".
	OperatorRole string
	// MetricsAddr, when set, serves GET /metrics on a listener of its own,
	// without authentication (keep it off the public network), in servers
	// and workers alike; the API listener then has no /metrics. Empty: a
	// server serves /metrics on Addr to the OperatorRole, a worker serves
	// none.
	MetricsAddr string
	// InstanceID names this process among the app's processes (consumer
	// state, metrics). Default: a random UUID, with a warning.
	InstanceID string
	// InstanceHeartbeat is how often the process records its liveness
	// (instance id, host, version, start, last beat) in kumiko_instances:
	// one row write per beat. Default 10s.
	InstanceHeartbeat time.Duration
	// InstanceStaleAfter is how old the process's last beat must be for
	// it to count as stale — its per-instance consumer shards are then
	// reported stale, and `consumer gc` removes them. At least two beats;
	// never effective before three beats are missed. Default 1m.
	InstanceStaleAfter time.Duration
	// CollectStaleInstances makes the dispatcher remove the per-instance
	// consumer shards of stale instances by itself, at most once per
	// InstanceStaleAfter, so that instances gone for good (autoscaled pods)
	// neither hold retention back nor leave lag gauges behind. Shared
	// shards and live instances are never touched. Default off.
	CollectStaleInstances bool
	// ShutdownTimeout bounds a graceful stop: requests, consumer passes,
	// jobs and integration handlers still running then have their contexts
	// cancelled and their database connections closed, so Stop returns
	// within ShutdownTimeout + StopMargin whatever they do. Default 15s.
	ShutdownTimeout time.Duration
	// JobRescueAfter is how long a job may stay running before it counts as
	// held by a process that died and is retried (River's
	// RescueStuckJobsAfter). At least the longest job timeout; default that
	// timeout plus one minute.
	JobRescueAfter time.Duration
	// JobTriggerPartitions partitions the consumer that enqueues the jobs
	// triggered by events (jobs.Config.TriggerPartitions); 0: one shard.
	JobTriggerPartitions int
	// IdleInTransactionTimeout is how long a transaction of the server's
	// pool may sit idle — opened, then waiting on the application — before
	// PostgreSQL ends its session (idle_in_transaction_session_timeout, set
	// on every connection at no cost per request). It bounds what a stuck
	// or leaked write transaction can hold: its row locks, and the event
	// ids it allocated, at which every consumer waits until it ends.
	// Default 60s (DefaultIdleInTransactionTimeout); negative leaves the
	// setting alone — the server's, or one given in DatabaseURL.
	IdleInTransactionTimeout time.Duration
	// Logger for everything the server logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider receives the spans of HTTP requests, writes, commands
	// and queries (with their validate, load, event.append and project
	// steps) and consumer passes. Nil: no spans, unless Main finds the
	// standard OTEL_* variables and exports them over OTLP.
	TracerProvider trace.TracerProvider
	// TraceDatabase adds a span for every SQL statement, batch, copy and
	// connection the server's pool runs, as children of the spans above
	// (otelpgx: the statement text, never its arguments). Off by default:
	// it costs per statement and multiplies the spans. Without a
	// TracerProvider it does nothing.
	TraceDatabase bool

	// Limits of the HTTP server. A negative timeout turns it off.

	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included: a client
	// that trickles or withholds its body is disconnected. Default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its response. Default 60s. GET /api/events is exempt from it and
	// from ReadTimeout: a stream bounds each of its writes instead.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request. Default 120s.
	IdleTimeout time.Duration
	// RequestTimeout bounds the work of one API request (every route but
	// GET /api/events): past it the request's statements are cancelled,
	// its transaction rolls back, its connection returns to the pool, and
	// it answers 503 unavailable (timeout). It must stay below a positive
	// WriteTimeout, so that answer can still be written. Default 30s, or
	// half of a WriteTimeout of 30s or less; negative: no bound.
	RequestTimeout time.Duration
	// MaxHeaderBytes caps the size of a request's headers (net/http allows
	// 4 KiB of slack); larger ones answer 431. Default 64 KiB.
	MaxHeaderBytes int
	// MaxStreamsPerUser and MaxStreams bound the event streams (GET
	// /api/events and the projection channels) open at once, per user of a
	// tenant and per process; past either a new one answers 429
	// rate_limited with Retry-After. Defaults 16 and 1000; negative: no
	// bound. See http.Config.
	MaxStreamsPerUser int
	MaxStreams        int
	// AsOfConcurrency and AsOfTimeout bound lists with "asOf"; see
	// pipeline.Config. Defaults GOMAXPROCS/4 (at least 1, at most 2) and
	// 5s.
	AsOfConcurrency int
	AsOfTimeout     time.Duration
	// SearchEngines are the search engines that searches declared with
	// feature.SearchEngine run on, by the names they give (for example
	// pgsearch.New's, or an adapter of an external engine that passes
	// search/searchtest). Set in code, not from the environment. See
	// docs/search.md, "Engines".
	SearchEngines map[string]search.Engine
	// IdempotencyRetention is how long the keys of keyed writes stay
	// recorded in PostgreSQL, refusing a second apply after the Redis
	// record is gone: a retry of a request older than this applies again.
	// At least 24h (the replay TTL); default 7 days; negative: never pruned.
	IdempotencyRetention time.Duration
	// IdempotencyPruneInterval is how often a server deletes the keys past
	// IdempotencyRetention, first right after it starts. Default 1h.
	IdempotencyPruneInterval time.Duration
	// InboxRetention is how long kumiko_inbox records that an integration
	// handler handled a message (see integration.Config.InboxRetention):
	// longer than the broker redelivers in. Default 7 days; negative: kept
	// forever.
	InboxRetention time.Duration

	// envErr is what FromEnv could not parse; validate reports it.
	envErr error
}

// StopMargin is how long Stop may take past Config.ShutdownTimeout: the
// time it gives work whose context it cancelled at the deadline to return,
// then to close the connections such work still holds.
const StopMargin = 5 * time.Second

// Defaults of Config's limits.
const (
	DefaultReadHeaderTimeout        = 10 * time.Second
	DefaultReadTimeout              = 30 * time.Second
	DefaultWriteTimeout             = 60 * time.Second
	DefaultIdleTimeout              = 120 * time.Second
	DefaultRequestTimeout           = 30 * time.Second
	DefaultMaxHeaderBytes           = 64 << 10
	DefaultIdempotencyRetention     = 7 * 24 * time.Hour
	DefaultIdempotencyPruneInterval = time.Hour
	// MinIdempotencyRetention is the replay TTL of the idempotency store:
	// a key must stay recorded at least as long as its response is replayed.
	MinIdempotencyRetention = idempotency.DefaultTTL
)

// WithDefaults returns a copy of c with every zero field that has a default
// set to it.
func (c Config) WithDefaults() Config {
	if c.Name == "" {
		c.Name = "kumiko"
	}
	if c.Schema == "" {
		c.Schema = "public"
	}
	if c.MaxConns == 0 {
		c.MaxConns = 20
	}
	if c.Addr == "" {
		c.Addr = ":8080"
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.IdleInTransactionTimeout == 0 {
		c.IdleInTransactionTimeout = DefaultIdleInTransactionTimeout
	}
	if c.AdminRole == "" {
		c.AdminRole = khttp.DefaultAdminRole
	}
	if c.OperatorRole == "" {
		c.OperatorRole = khttp.DefaultOperatorRole
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c.withLimitDefaults()
}

func (c Config) withLimitDefaults() Config {
	def := func(field *time.Duration, d time.Duration) {
		if *field == 0 {
			*field = d
		}
	}
	def(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&c.ReadTimeout, DefaultReadTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
		if c.WriteTimeout > 0 && c.WriteTimeout <= c.RequestTimeout {
			c.RequestTimeout = c.WriteTimeout / 2
		}
	}
	def(&c.InstanceHeartbeat, consumer.DefaultHeartbeat)
	def(&c.InstanceStaleAfter, consumer.DefaultStaleAfter)
	def(&c.IdempotencyRetention, DefaultIdempotencyRetention)
	def(&c.IdempotencyPruneInterval, DefaultIdempotencyPruneInterval)
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return c
}

// resolveInstanceID returns c with an instance id: the configured one, else
// a random UUID, with a warning, since consumer state and metrics keyed by a
// random id do not survive a restart.
func (c Config) resolveInstanceID() Config {
	if c.InstanceID == "" {
		c.InstanceID = uuid.NewString()
		c.Logger.Warn("kumiko: no instance id configured; using a random one (set Config.InstanceID or KUMIKO_INSTANCE_ID)",
			"instance_id", c.InstanceID)
	}
	return c
}

// validate checks c, after WithDefaults, before New connects anything. A
// setting handed to a part that validates it is checked by that part's
// validator on the part's config as mapped (httpConfig, jobsConfig), so
// the check and its message live in one place; validate checks only what
// no part sees, or what it must refuse before the part is built.
func (c Config) validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("Config.DatabaseURL is required"))
	} else if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		errs = append(errs, errors.New("Config.DatabaseURL must be a postgres:// URL"))
	}
	if c.RabbitMQURL != "" {
		if u, err := url.Parse(c.RabbitMQURL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
			errs = append(errs, errors.New("Config.RabbitMQURL must be an amqp:// or amqps:// URL"))
		}
	}
	if c.RedisURL != "" {
		if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			errs = append(errs, errors.New("Config.RedisURL must be a redis:// or rediss:// URL"))
		}
	}
	// JWTSecret, JWKSURL and OIDCIssuer are the HTTP server's (a worker too
	// refuses a config a server would); none of its other checks can fail
	// on what httpConfig maps, defaults set.
	errs = append(errs, c.httpConfig().WithDefaults().Validate())
	if c.InstanceID == SharedInstanceID {
		errs = append(errs, fmt.Errorf("Config.InstanceID %q is reserved", SharedInstanceID))
	}
	if _, err := c.dataKeys(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxConns < 2 {
		errs = append(errs, errors.New("Config.MaxConns must be at least 2"))
	}
	if c.MetricsAddr != "" && c.MetricsAddr == c.Addr && !strings.HasSuffix(c.Addr, ":0") { // :0 picks a free port each
		errs = append(errs, errors.New("Config.MetricsAddr must differ from Config.Addr"))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, errors.New("Config.ShutdownTimeout must not be negative"))
	}
	// JobRescueAfter is the one setting jobs.Config.Validate checks that
	// jobsConfig maps, under jobs' name for it (RescueAfter), so the
	// message gets ours in front; jobs.New checks it against the timeouts.
	if err := c.jobsConfig().WithDefaults().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Config.JobRescueAfter: %w", err))
	}
	errs = append(errs, c.envErr)
	if c.MaxHeaderBytes < 0 {
		errs = append(errs, errors.New("Config.MaxHeaderBytes must not be negative"))
	}
	if c.RequestTimeout > 0 && c.WriteTimeout > 0 && c.RequestTimeout >= c.WriteTimeout {
		errs = append(errs, errors.New("Config.RequestTimeout must be less than Config.WriteTimeout, or negative (off)"))
	}
	if c.IdempotencyRetention > 0 && c.IdempotencyRetention < MinIdempotencyRetention {
		errs = append(errs, fmt.Errorf("Config.IdempotencyRetention must be at least %s (the replay TTL) or negative (never prune)", MinIdempotencyRetention))
	}
	if c.InstanceHeartbeat < 0 || c.InstanceStaleAfter < 2*c.InstanceHeartbeat {
		errs = append(errs, errors.New("Config.InstanceStaleAfter must be at least two Config.InstanceHeartbeat"))
	}
	if c.IdempotencyPruneInterval < 0 {
		errs = append(errs, errors.New("Config.IdempotencyPruneInterval must not be negative"))
	}
	return errors.Join(errs...)
}

// FromEnv fills the zero fields of c from the environment: DATABASE_URL,
// REDIS_URL, RABBITMQ_URL, KUMIKO_JWT_SECRET, KUMIKO_JWT_ISSUER, KUMIKO_JWT_AUDIENCE,
// KUMIKO_JWKS_URL, KUMIKO_OIDC_ISSUER, KUMIKO_CORS_ORIGINS (comma-separated),
// KUMIKO_ADMIN_ROLE, KUMIKO_OPERATOR_ROLE, KUMIKO_ADDR, KUMIKO_METRICS_ADDR,
// KUMIKO_SCHEMA, KUMIKO_INSTANCE_ID, KUMIKO_TRACE_DATABASE (true or 1:
// TraceDatabase), KUMIKO_SHUTDOWN_TIMEOUT, KUMIKO_JOB_RESCUE_AFTER,
// KUMIKO_INTEGRATION_RETRY_BACKOFF, KUMIKO_INTEGRATION_MAX_RETRY_BACKOFF and
// KUMIKO_REDIS_TIMEOUT (Go durations such as 30s; one that does not parse
// fails New), and KUMIKO_JOB_TRIGGER_PARTITIONS (a whole number). Only Main and the commands call it; the library never reads
// the environment.
func (c Config) FromEnv() Config {
	set := func(field *string, env string) {
		if *field == "" {
			*field = os.Getenv(env)
		}
	}
	set(&c.DatabaseURL, "DATABASE_URL")
	set(&c.RedisURL, "REDIS_URL")
	set(&c.RabbitMQURL, "RABBITMQ_URL")
	set(&c.DataKey, "KUMIKO_DATA_KEY")
	set(&c.JWTSecret, "KUMIKO_JWT_SECRET")
	set(&c.JWTIssuer, "KUMIKO_JWT_ISSUER")
	set(&c.JWTAudience, "KUMIKO_JWT_AUDIENCE")
	set(&c.JWKSURL, "KUMIKO_JWKS_URL")
	set(&c.OIDCIssuer, "KUMIKO_OIDC_ISSUER")
	if c.CORSOrigins == nil {
		for o := range strings.SplitSeq(os.Getenv("KUMIKO_CORS_ORIGINS"), ",") {
			if o = strings.TrimSpace(o); o != "" {
				c.CORSOrigins = append(c.CORSOrigins, o)
			}
		}
	}
	set(&c.AdminRole, "KUMIKO_ADMIN_ROLE")
	set(&c.OperatorRole, "KUMIKO_OPERATOR_ROLE")
	set(&c.MetricsAddr, "KUMIKO_METRICS_ADDR")
	set(&c.Addr, "KUMIKO_ADDR")
	set(&c.Schema, "KUMIKO_SCHEMA")
	set(&c.InstanceID, "KUMIKO_INSTANCE_ID")
	if !c.TraceDatabase {
		c.TraceDatabase, _ = strconv.ParseBool(os.Getenv("KUMIKO_TRACE_DATABASE"))
	}
	duration := func(field *time.Duration, env string) {
		v := os.Getenv(env)
		if *field != 0 || v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			c.envErr = errors.Join(c.envErr, fmt.Errorf("%s=%q: want a duration such as 30s", env, v))
			return
		}
		*field = d
	}
	duration(&c.ShutdownTimeout, "KUMIKO_SHUTDOWN_TIMEOUT")
	duration(&c.JobRescueAfter, "KUMIKO_JOB_RESCUE_AFTER")
	duration(&c.RedisTimeout, "KUMIKO_REDIS_TIMEOUT")
	duration(&c.IntegrationRetryBackoff, "KUMIKO_INTEGRATION_RETRY_BACKOFF")
	duration(&c.IntegrationMaxRetryBackoff, "KUMIKO_INTEGRATION_MAX_RETRY_BACKOFF")
	if v := os.Getenv("KUMIKO_JOB_TRIGGER_PARTITIONS"); c.JobTriggerPartitions == 0 && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			c.envErr = errors.Join(c.envErr, fmt.Errorf("KUMIKO_JOB_TRIGGER_PARTITIONS=%q: want a whole number", v))
		}
		c.JobTriggerPartitions = n
	}
	return c
}

// dataKeys is the KeyProvider of personal data: DataKeys, or DataKey's
// local keys; nil when neither is set.
func (c Config) dataKeys() (eventstore.KeyProvider, error) {
	switch {
	case c.DataKey != "" && c.DataKeys != nil:
		return nil, errors.New("Config.DataKey and Config.DataKeys are both set; set one")
	case c.DataKeys != nil:
		return c.DataKeys, nil
	case c.DataKey == "":
		return nil, nil
	}
	k, err := eventstore.ParseLocalKeys(c.DataKey)
	if err != nil {
		return nil, fmt.Errorf("Config.DataKey (KUMIKO_DATA_KEY): %w", err)
	}
	return k, nil
}
