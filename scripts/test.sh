#!/usr/bin/env bash
# test.sh: outboxd's full check, what `make test` and CI run:
#   PostgreSQL ensured (scripts/ensure-postgres.sh; a throwaway server it starts is stopped
#   on exit) · gofmt -l over the repository's .go files (tracked, plus untracked ones not
#   ignored) must print nothing · go vet ./... · go test -race -count=1 -timeout 20m ./...
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

trap 'if declare -F outboxd_pg_stop >/dev/null; then outboxd_pg_stop || true; fi' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# shellcheck source=scripts/ensure-postgres.sh
. scripts/ensure-postgres.sh

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

read -r -a pkgs <<<"${PKGS:-./...}"
echo "== go test -race -count=1 -timeout 20m ${pkgs[*]} $*" >&2
go test -race -count=1 -timeout 20m "${pkgs[@]}" "$@"
