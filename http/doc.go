// Package http will hold the Echo v4 adapter: routes, JWT auth, tenant
// resolution, the problem+json error contract, SSE, inspect, status, metrics
// and health endpoints. It calls the pipeline; the pipeline never calls it.
package http
