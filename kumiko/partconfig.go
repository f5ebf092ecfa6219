package kumiko

import (
	"github.com/kumiko-go/kumiko/console"
	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/pipeline"
)

// The configs of the parts New wires, each mapped from Config in one place.
// What comes from a built part (the pool, the metrics registry, the
// registry as upcaster, the idempotency store, the transport, readiness)
// is left out: wire and wireHTTP fill it in where they build that part.
// validate checks the parts' own settings with these very configs.

// storeConfig is the event store's config; wire adds the registry as
// Upcaster. validate has checked the data key.
func (c Config) storeConfig() eventstore.Config {
	keys, _ := c.dataKeys()
	return eventstore.Config{Schema: c.Schema, Logger: c.Logger, Keys: keys}
}

// pipelineConfig is the executor's config; wire adds Metrics.
func (c Config) pipelineConfig() pipeline.Config {
	return pipeline.Config{
		Logger: c.Logger, TracerProvider: c.TracerProvider,
		AsOfConcurrency: c.AsOfConcurrency, AsOfTimeout: c.AsOfTimeout,
		SearchEngines: c.SearchEngines,
	}
}

// jobsConfig is the job runner's config; wire adds Metrics.
func (c Config) jobsConfig() jobs.Config {
	return jobs.Config{Logger: c.Logger, TracerProvider: c.TracerProvider, RescueAfter: c.JobRescueAfter, TriggerPartitions: c.JobTriggerPartitions}
}

// rabbitConfig is the RabbitMQ transport's config, used when RabbitMQURL is
// set: the queue is the app's name.
func (c Config) rabbitConfig() integration.RabbitConfig {
	return integration.RabbitConfig{
		URL: c.RabbitMQURL, Queue: c.Name, Logger: c.Logger,
		RetryBackoff: c.IntegrationRetryBackoff, MaxRetryBackoff: c.IntegrationMaxRetryBackoff,
	}
}

// integrationConfig is the integration service's config; wire adds
// Transport and Metrics.
func (c Config) integrationConfig() integration.Config {
	return integration.Config{
		Logger: c.Logger, TracerProvider: c.TracerProvider,
		InboxRetention: c.InboxRetention, RetryBackoff: c.IntegrationRetryBackoff,
	}
}

// consumerConfig is the event dispatcher's config, with the process's host
// and version for its liveness record; wire adds Metrics. InstanceID is
// resolved (resolveInstanceID) before wire maps it.
func (c Config) consumerConfig() consumer.Config {
	return consumer.Config{
		InstanceID: c.InstanceID, Logger: c.Logger, TracerProvider: c.TracerProvider,
		Heartbeat: c.InstanceHeartbeat, StaleAfter: c.InstanceStaleAfter, CollectStale: c.CollectStaleInstances,
		Host: hostname(), Version: buildVersion(),
	}
}

// redisConfig is the Redis idempotency store's config, used when RedisURL
// is set.
func (c Config) redisConfig() idempotency.RedisConfig {
	return idempotency.RedisConfig{Timeout: c.RedisTimeout}
}

// httpConfig is the HTTP server's config; wireHTTP adds Idempotency,
// Metrics, Gatherer and Ready. A negative RequestTimeout (off) is the
// server's zero.
func (c Config) httpConfig() khttp.Config {
	return khttp.Config{
		Title:               c.Name,
		JWTSecret:           []byte(c.JWTSecret),
		JWKSURL:             c.JWKSURL,
		OIDCIssuer:          c.OIDCIssuer,
		CORSOrigins:         c.CORSOrigins,
		Issuer:              c.JWTIssuer,
		Audience:            c.JWTAudience,
		AdminRole:           c.AdminRole,
		OperatorRole:        c.OperatorRole,
		SeparateMetrics:     c.MetricsAddr != "",
		IdempotencyFailOpen: c.IdempotencyFailOpen,
		Logger:              c.Logger,
		TracerProvider:      c.TracerProvider,
		RequestTimeout:      max(c.RequestTimeout, 0),
		MaxStreamsPerUser:   c.MaxStreamsPerUser,
		MaxStreams:          c.MaxStreams,
	}
}

// consoleConfig is the ops console's config; mountConsole adds the store,
// the executor, Authenticate, the jobs and the dead letters.
func (c Config) consoleConfig() console.Config {
	return console.Config{OperatorRole: c.OperatorRole, Logger: c.Logger}
}
