# outboxd: `make` lists the targets. Needs bash and Go; `make test` finds or starts PostgreSQL.

SHELL := /bin/bash
.DEFAULT_GOAL := help

# Go may be installed without being on PATH (a non-login shell on a fresh machine).
ifeq ($(shell command -v go 2>/dev/null),)
export PATH := /usr/local/go/bin:$(PATH)
endif

GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOFMT ?= gofmt
# Extra arguments for go test, e.g. make test ARGS='-run TestX -v'
ARGS ?=
# Packages for make test (scripts/test.sh reads PKGS), e.g. make test PKGS=./store/
PKGS ?= ./...
export PKGS
# The .go files gofmt looks at: tracked and untracked-but-not-ignored ones that exist.
GOFILES = $(filter-out %/testdata/% testdata/% vendor/%,$(wildcard $(shell git ls-files --cached --others --exclude-standard -- '*.go' 2>/dev/null)))

.PHONY: help demo test vet lint fmt build bench pg-env clean

help: ## List the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-8s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# demo echoes no command: with ARGS=--json its stdout is the summary alone (scripts/demo.sh
# keeps its own chatter on stderr).
demo: ## Produce, dispatch and consume 100,000 messages via embedded NATS JetStream (ARGS= for outboxd demo)
	@bash scripts/demo.sh $(ARGS)

test: ## Full check: PostgreSQL ensured, gofmt, go vet, golangci-lint, go test -race (PKGS=, ARGS= go test's)
	bash scripts/test.sh $(ARGS)

vet: ## go vet ./...
	$(GO) vet ./...

lint: ## golangci-lint with .golangci.yml (installs the pinned version when missing; ARGS= its own)
	bash scripts/lint.sh $(ARGS)

fmt: ## Format the .go files in place (gofmt -w)
	$(if $(GOFILES),$(GOFMT) -l -w $(GOFILES))

# bin/outboxd-bench carries bench and demo with their embedded brokers; bin/outboxd execs it
# for `outboxd bench` and `outboxd demo`, and links none of it. bin/outboxd-floor is the
# bench's floor under a dispatcher's start, timed beside outboxd's (docs/benchmarks.md);
# bin/outboxd-floor-linked is the same with every package outboxd links.
# The image needs outboxd only.
build: ## Build the static binaries bin/outboxd (the build deploy/Dockerfile runs), bin/outboxd-bench and the bench's two floors
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/outboxd ./cmd/outboxd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/outboxd-bench ./cmd/outboxd-bench
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/outboxd-floor ./cmd/outboxd-floor
	CGO_ENABLED=0 $(GO) build -tags linked -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/outboxd-floor-linked ./cmd/outboxd-floor

bench: ## Run the benchmarks against an ensured PostgreSQL (ARGS= passed to go test)
	@set -euo pipefail; trap 'outboxd_pg_stop || true' EXIT; . scripts/ensure-postgres.sh; \
	  $(GO) test -run '^$$' -bench . -benchmem ./... $(ARGS)

chaos: ## Fault-injection suite, full form: 100,000 messages per scenario (docs/chaos.md; ARGS= go test's)
	bash scripts/chaos.sh $(ARGS)

# How long make soak runs: a Go duration.
DURATION ?= 30m

soak: ## Load with faults in rotation for DURATION (default 30m); RSS and goroutines must stay flat
	bash scripts/chaos.sh --soak $(DURATION) $(ARGS)

.PHONY: chaos soak

pg-env: ## Print export OUTBOXD_TEST_DATABASE_URL=... (a server it has to start keeps running)
	@bash scripts/ensure-postgres.sh

clean: ## Remove build output
	rm -rf bin .tmp
	rm -f outboxd
