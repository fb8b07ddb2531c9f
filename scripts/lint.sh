#!/usr/bin/env bash
# lint.sh: golangci-lint over the repository with .golangci.yml, what `make lint` runs and
# scripts/test.sh runs after go vet. The pinned version is installed with go install into
# $(go env GOPATH)/bin when it is missing there or reports another version; an installed
# one is reused. Extra arguments go to golangci-lint run (default: ./...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GOLANGCI_LINT_VERSION=2.15.0

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null 2>&1 || { echo "lint.sh: go not found (install Go, see go.mod for the version)" >&2; exit 1; }

bin="$(go env GOPATH)/bin/golangci-lint"
have=""
if [[ -x $bin ]]; then
	have=$("$bin" version 2>/dev/null | sed -n 's/.*version \([0-9][0-9.]*\).*/\1/p' | head -n1)
fi
if [[ $have != "$GOLANGCI_LINT_VERSION" ]]; then
	echo "lint.sh: installing golangci-lint v$GOLANGCI_LINT_VERSION (found: ${have:-none})" >&2
	go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$GOLANGCI_LINT_VERSION"
fi

if (( $# == 0 )); then
	set -- ./...
fi
# Several checkouts on one machine may lint at once; without this flag the second
# one fails instead of waiting.
exec "$bin" run --allow-parallel-runners "$@"
