#!/usr/bin/env bash
# demo.sh: what `make demo` runs. Finds or starts PostgreSQL (as the tests do), builds
# bin/outboxd and bin/outboxd-bench, then runs `outboxd demo`, which execs outboxd-bench:
# an embedded NATS server with JetStream, the dispatcher, concurrent producers and a
# consumer, ending with a summary. Arguments go to `outboxd demo`:
#   scripts/demo.sh --messages 20000 --json
# OUTBOXD_DATABASE_URL, when set, names the database to use instead (the demo writes only
# to its own schema, outboxd_demo, which it drops and recreates).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null 2>&1 || { echo "demo.sh: go not found (install Go, see go.mod for the version)" >&2; exit 1; }

if [[ -z "${OUTBOXD_DATABASE_URL:-}" ]]; then
	trap 'if declare -F outboxd_pg_stop >/dev/null; then outboxd_pg_stop || true; fi' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	# shellcheck source=scripts/ensure-postgres.sh
	. scripts/ensure-postgres.sh
	export OUTBOXD_DATABASE_URL="$OUTBOXD_TEST_DATABASE_URL"
fi
mkdir -p bin
# outboxd demo execs the outboxd-bench beside it, which carries the demo and its embedded
# NATS server; building both and calling outboxd keeps that path in use.
go build -o bin/outboxd ./cmd/outboxd
go build -o bin/outboxd-bench ./cmd/outboxd-bench
bin/outboxd demo "$@"
