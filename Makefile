# kumiko-go — run `make help` for the targets.
GO            ?= go
GOLANGCI_LINT ?= $(GO) tool golangci-lint
TEST_FLAGS    ?= -count=1 -timeout 15m
BENCH_FLAGS   ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  \033[1m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## Start PostgreSQL, Redis and RabbitMQ when they are not running
	@bash scripts/services.sh

.PHONY: run
run: services ## Serve the task-list sample on :8080 (prints a dev token and a request to try)
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0} RABBITMQ_URL=$${RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672/} KUMIKO_INSTANCE_ID=$${KUMIKO_INSTANCE_ID:-dev} $(GO) run ./samples/tasks/cmd/tasks serve

.PHONY: test
test: services ## Run the whole suite against real PostgreSQL, Redis and RabbitMQ
	$(GO) vet ./...
	$(GO) test -race $(TEST_FLAGS) ./...

.PHONY: bench
bench: services ## Measure the framework next to raw pgx baselines (ratios)
	$(GO) run ./internal/bench $(BENCH_FLAGS)

.PHONY: lint
lint: ## gofmt, go vet and golangci-lint (pinned by the tool directive in go.mod)
	@test -z "$$(gofmt -l .)" || (gofmt -l . && echo "gofmt: the files above need formatting" && exit 1)
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

.PHONY: tidy
tidy: ## go mod tidy, then fail if it changed anything
	$(GO) mod tidy
	@git diff --exit-code go.mod go.sum || (echo "go.mod/go.sum were not tidy" && exit 1)
