// Package e2e is the process-level end-to-end suite: its tests build the
// sample binaries (and e2eapp, an app of its own for faults the samples do
// not show), start them as operating-system processes with `serve` and
// `worker` and the environment the README documents, and drive every
// capability from outside — over HTTP, SQL, AMQP and the binaries' own
// command line — including SIGTERM and kill -9 under load. Each capability
// added to the framework gets its line here. The package has no code of
// its own; run it with `go test ./internal/e2e/`.
package e2e
