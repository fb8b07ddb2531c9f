#!/usr/bin/env bash
# chaos.sh: outboxd's fault-injection suite (internal/chaos, docs/chaos.md) in its full form,
# or the soak.
#
#   scripts/chaos.sh [go test args]             make chaos: every scenario with 100,000 messages
#                                               and 30 s outages (the CI form runs in go test ./...)
#   scripts/chaos.sh --soak DURATION [args]     make soak: load with the faults in rotation for
#                                               DURATION (a Go duration: 30m, 1h30m); RSS and
#                                               goroutines of every replica sampled every ~10 s
#
# PostgreSQL is ensured as scripts/test.sh does (scripts/ensure-postgres.sh; a throwaway server
# it starts is stopped on exit); the suite itself starts private servers for its scenarios.
# outboxd is built once into bin/outboxd (no -race: the replicas are the system under test; the
# race detector watches the harness). The full log goes to .tmp/chaos.log (.tmp/soak.log), the
# results table to .tmp/chaos-report.md (.tmp/soak-report.md), and the table is printed at the end.
# Extra arguments go to go test, e.g. scripts/chaos.sh -run 'TestChaos/scenario/kafka'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null 2>&1 || { echo "chaos.sh: go not found (install Go, see go.mod for the version)" >&2; exit 1; }

soak=''
if [[ ${1:-} == --soak ]]; then
	soak=${2:?"chaos.sh: --soak needs a duration, e.g. --soak 30m"}
	shift 2
fi

# seconds DURATION: a Go duration of hours, minutes and seconds, in whole seconds.
seconds() {
	local d=$1 total=0 n unit
	[[ $d =~ ^([0-9]+(h|m|s))+$ ]] || { echo "chaos.sh: $d is not a duration like 30m or 1h30m" >&2; return 1; }
	while [[ $d =~ ^([0-9]+)(h|m|s)(.*)$ ]]; do
		n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]} d=${BASH_REMATCH[3]}
		case $unit in h) total=$((total + n * 3600)) ;; m) total=$((total + n * 60)) ;; s) total=$((total + n)) ;; esac
	done
	echo "$total"
}

# -race needs cgo, hence a C compiler (scripts/test.sh installs one when root).
if ! command -v "$(go env CC)" >/dev/null 2>&1; then
	echo "chaos.sh: go test -race needs a C compiler: sudo apt-get install -y gcc" >&2
	exit 1
fi
export CGO_ENABLED=1

trap 'if declare -F outboxd_pg_stop >/dev/null; then outboxd_pg_stop || true; fi' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# shellcheck source=scripts/ensure-postgres.sh
. scripts/ensure-postgres.sh
outboxd_pg_ensure_private_binaries chaos.sh || exit 1 # the scenarios' own servers

echo "== go build -o bin/outboxd ./cmd/outboxd" >&2
mkdir -p bin .tmp
CGO_ENABLED=0 go build -ldflags="-s -w" -o bin/outboxd ./cmd/outboxd
export OUTBOXD_TEST_CHAOS_BINARY=$PWD/bin/outboxd

if [[ -n $soak ]]; then
	secs=$(seconds "$soak")
	export OUTBOXD_TEST_SOAK=$soak
	run='^TestSoak$' timeout="$((secs + 1800))s" log=.tmp/soak.log report=.tmp/soak-report.md
else
	export OUTBOXD_TEST_CHAOS=full
	run='^TestChaos$' timeout=4h log=.tmp/chaos.log report=.tmp/chaos-report.md
fi
export OUTBOXD_TEST_CHAOS_REPORT=$PWD/$report
rm -f "$report"

echo "== go test -race -count=1 -timeout $timeout -run '$run' -v ./internal/chaos/ $* (log: $log)" >&2
set +e
go test -race -count=1 -timeout "$timeout" -run "$run" -v ./internal/chaos/ "$@" 2>&1 | tee "$log" |
	grep --line-buffered -E '^\s*(--- |PASS$|FAIL|ok |panic)|fault begins|drained|soak:'
status=${PIPESTATUS[0]}
set -e

if [[ -s $report ]]; then
	echo
	cat "$report"
fi
if (( status != 0 )); then
	echo "chaos.sh: go test failed (exit $status); the whole log is in $log" >&2
fi
exit "$status"
