#!/usr/bin/env bash
# test.sh: outboxd's full check, what `make test` and CI run:
#   PostgreSQL ensured (scripts/ensure-postgres.sh; a throwaway server it starts is stopped
#   on exit), with the server binaries the chaos suite's private servers need · gofmt -l over
#   the repository's .go files (tracked, plus untracked ones not ignored) must print nothing ·
#   go vet ./... · golangci-lint (scripts/lint.sh, .golangci.yml) · go test -race -count=1
#   -timeout 20m ./...
# Extra arguments go to go test; PKGS (default ./...) picks the packages:
#   scripts/test.sh -run TestX -v        PKGS=./store/ scripts/test.sh -run TestClaim
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null 2>&1 || { echo "test.sh: go not found (install Go, see go.mod for the version)" >&2; exit 1; }

# -race needs cgo, hence a C compiler.
if ! command -v "$(go env CC)" >/dev/null 2>&1; then
	if (( EUID == 0 )) && command -v apt-get >/dev/null 2>&1; then
		echo "test.sh: no C compiler for go test -race; installing gcc (apt-get)" >&2
		apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev >&2
	else
		echo "test.sh: go test -race needs a C compiler: sudo apt-get install -y gcc" >&2
		exit 1
	fi
fi
export CGO_ENABLED=1

# The metrics test (events/metrics) runs the real Prometheus server and promtool, and the
# alert rules' unit tests (deploy) run promtool: both are in the Debian package prometheus. Its packaged service is kept from starting (policy-rc.d).
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
	if (( EUID == 0 )) && command -v apt-get >/dev/null 2>&1; then
		echo "test.sh: prometheus/promtool missing; installing the prometheus package (apt-get), service not started" >&2
		policy=/usr/sbin/policy-rc.d created_policy= status=0
		if [[ ! -e $policy ]]; then
			printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && created_policy=1
		fi
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; } >&2 || status=$?
		if [[ -n $created_policy ]]; then rm -f "$policy"; fi
		(( status == 0 )) || { echo "test.sh: installing prometheus failed" >&2; exit "$status"; }
	else
		echo "test.sh: the metrics test needs prometheus and promtool: sudo apt-get install -y --no-install-recommends prometheus" >&2
		exit 1
	fi
fi

trap 'if declare -F outboxd_pg_stop >/dev/null; then outboxd_pg_stop || true; fi; if declare -F outboxd_services_stop >/dev/null; then outboxd_services_stop || true; fi' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# shellcheck source=scripts/ensure-postgres.sh
. scripts/ensure-postgres.sh

# The chaos suite's private servers (postgres-restarted restarts one) need the server binaries
# here even when the shared server answers from elsewhere: installed when missing, or exit.
outboxd_pg_ensure_private_binaries test.sh || exit 1

# The redis and rabbitmq drivers' tests publish to real servers, the PgBouncer tests start a
# pgbouncer (scripts/ensure-services.sh).
# shellcheck source=scripts/ensure-services.sh
. scripts/ensure-services.sh
outboxd_ensure_services

echo "== gofmt" >&2
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -t listed < <(git ls-files --cached --others --exclude-standard -- '*.go')
else
	mapfile -t listed < <(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*')
fi
files=()
for f in "${listed[@]}"; do
	case /$f in */testdata/* | */vendor/*) continue ;; esac
	if [[ -f $f ]]; then files+=("$f"); fi # a tracked file may be deleted in the worktree
done
if (( ${#files[@]} )); then
	unformatted=$(gofmt -l -- "${files[@]}") || { echo "gofmt: failed (see above)" >&2; exit 1; }
	if [[ -n $unformatted ]]; then
		printf 'gofmt: these files need formatting (run make fmt):\n%s\n' "$unformatted" >&2
		exit 1
	fi
fi

echo "== go vet ./..." >&2
go vet ./...

# A finding fails the check, like a vet finding (make lint runs the same).
echo "== golangci-lint" >&2
bash scripts/lint.sh

read -r -a pkgs <<<"${PKGS:-./...}"
echo "== go test -race -count=1 -timeout 20m ${pkgs[*]} $*" >&2
go test -race -count=1 -timeout 20m "${pkgs[@]}" "$@"
