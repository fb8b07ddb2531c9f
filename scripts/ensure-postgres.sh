#!/usr/bin/env bash
# ensure-postgres.sh: make sure a PostgreSQL server for outboxd's tests answers and export
# OUTBOXD_TEST_DATABASE_URL, an admin DSN (tests CREATE and DROP databases through it).
#
#   . scripts/ensure-postgres.sh         sourced (bash): exports the variable into this shell;
#                                         call outboxd_pg_stop when done (scripts/test.sh traps it)
#   scripts/ensure-postgres.sh           prints `export OUTBOXD_TEST_DATABASE_URL='...'` on stdout
#   eval "$(scripts/ensure-postgres.sh)" (a server started this way keeps running: stderr says
#                                         how to stop it)
#
# Which server, first that applies:
#   a. $OUTBOXD_TEST_DATABASE_URL, when set and it answers;
#   b. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable (trust), when it answers;
#   c. a throwaway cluster from the installed server binaries (highest
#      /usr/lib/postgresql/*/bin): data in /var/tmp/outboxd-pg.XXXXXX, 127.0.0.1 only, the first
#      free port from 55432 up, fsync off, max_connections 300; run as the `postgres` OS user
#      when root (created if missing), else as the current user;
#   d. no server binaries: as root, apt-get install postgresql, then c; otherwise fail saying
#      what to install or set.
# "Answers" is checked with psql (pg_isready when psql is missing). Without any client tools
# there is no server install either: root goes to d first, others get instructions.
# Diagnostics go to stderr; stdout carries only the export line (when run, not sourced).
#
# Knobs (environment):
#   OUTBOXD_TEST_DATABASE_URL  step a's DSN
#   OUTBOXD_PG_PROBE_PORT      port step b probes (default 5432); point it at a closed port to
#                              force step c without touching the server on 5432
#   OUTBOXD_PG_PORT_BASE       first port step c tries (default 55432)
#   OUTBOXD_PG_BINDIR          directory holding initdb, pg_ctl and postgres (default: highest
#                              /usr/lib/postgresql/*/bin, then whatever initdb is on PATH)
#   OUTBOXD_PG_TMPDIR          parent of the throwaway cluster's directory (default /var/tmp);
#                              the postgres user must be able to enter it
#
# Needs bash. Leaves the caller's shell options alone when sourced.

if [ -z "${BASH_VERSION:-}" ]; then
	echo "ensure-postgres: needs bash (run it with bash, or source it from bash)" >&2
	# shellcheck disable=SC2317
	return 1 2>/dev/null || exit 1
fi

_outboxd_pg_log() { printf 'ensure-postgres: %s\n' "$*" >&2; }

# _outboxd_pg_redact DSN: the DSN with any password replaced.
_outboxd_pg_redact() {
	printf '%s\n' "$1" | sed -E 's#(://[^:/@?]*):[^@/?]*@#\1:REDACTED@#; s#(password=)[^& ]*#\1REDACTED#Ig'
}

# _outboxd_pg_bindirs: versioned Debian binary directories, highest version first.
_outboxd_pg_bindirs() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[[ -d $d ]] && printf '%s\n' "$d"
	done | sort -t/ -k4,4 -V -r
}

# _outboxd_pg_find_client: sets _outboxd_pg_psql and _outboxd_pg_isready (empty when missing).
_outboxd_pg_find_client() {
	local d tool var found
	_outboxd_pg_psql='' _outboxd_pg_isready=''
	for tool in psql pg_isready; do
		found=''
		for d in ${OUTBOXD_PG_BINDIR:+"$OUTBOXD_PG_BINDIR"} $(_outboxd_pg_bindirs); do
			if [[ -x $d/$tool ]]; then found=$d/$tool && break; fi
		done
		# /usr/bin/psql may be Debian's pg_wrapper, which fails when no client is installed.
		if [[ -z $found ]] && command -v "$tool" >/dev/null 2>&1 && "$tool" --version >/dev/null 2>&1; then
			found=$(command -v "$tool")
		fi
		var=_outboxd_pg_${tool#pg_}
		printf -v "$var" '%s' "$found"
	done
}

# _outboxd_pg_find_server: prints the directory holding initdb, pg_ctl and postgres.
_outboxd_pg_find_server() {
	local d
	for d in ${OUTBOXD_PG_BINDIR:+"$OUTBOXD_PG_BINDIR"} $(_outboxd_pg_bindirs) \
		"$(dirname -- "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")"; do
		if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]; then
			printf '%s\n' "$d"
			return 0
		fi
	done
	return 1
}

# _outboxd_pg_query DSN SQL: leaves the single value SQL returns in _outboxd_pg_out; fails
# when the server does not answer, leaving its error in _outboxd_pg_err.
_outboxd_pg_query() {
	_outboxd_pg_out='' _outboxd_pg_err=''
	if _outboxd_pg_out=$(PGCONNECT_TIMEOUT=5 "$_outboxd_pg_psql" -X -w -A -t -q -v ON_ERROR_STOP=1 \
		-d "$1" -c "$2" </dev/null 2>&1); then
		return 0
	fi
	_outboxd_pg_err=$(printf '%s\n' "$_outboxd_pg_out" | grep -v '^[[:space:]]*$' | head -n 1)
	_outboxd_pg_err=${_outboxd_pg_err#psql: }
	_outboxd_pg_out=''
	return 1
}

# _outboxd_pg_answers DSN: does a server answer there (and let us in)?
_outboxd_pg_answers() {
	_outboxd_pg_err=''
	if [[ -n $_outboxd_pg_psql ]]; then
		_outboxd_pg_query "$1" "SELECT current_setting('server_version_num')::int >= 130000
			AND (SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user)" || return 1
		if [[ $_outboxd_pg_out != t ]]; then
			_outboxd_pg_log "warning: $(_outboxd_pg_redact "$1"): tests need PostgreSQL >= 13 and a role that may CREATE DATABASE"
		fi
		return 0
	fi
	if [[ -n $_outboxd_pg_isready ]]; then
		_outboxd_pg_err=$("$_outboxd_pg_isready" -t 5 -d "$1" 2>&1) && return 0
		return 1
	fi
	_outboxd_pg_err='no PostgreSQL client tools (psql, pg_isready) to check with'
	return 1
}

# _outboxd_pg_install: step d's package install (root with apt-get only).
_outboxd_pg_install() {
	if (( EUID != 0 )) || ! command -v apt-get >/dev/null 2>&1; then
		return 1
	fi
	_outboxd_pg_log "installing the Debian package postgresql (apt-get; output follows on stderr)"
	if ! { apt-get update >&2 &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2; }; then
		_outboxd_pg_log "apt-get install postgresql failed"
		return 1
	fi
	# The package's postinst may or may not have started a cluster on 5432: not relied on.
}

_outboxd_pg_instructions() {
	cat >&2 <<-EOF
	ensure-postgres: $1
	  Either install PostgreSQL so a throwaway test server can be started (Debian/Ubuntu):
	      sudo apt-get install -y postgresql
	  (or set OUTBOXD_PG_BINDIR to a directory holding initdb, pg_ctl and postgres), or point
	  the tests at a disposable server whose role may CREATE DATABASE (checking it needs psql:
	  sudo apt-get install -y postgresql-client):
	      export OUTBOXD_TEST_DATABASE_URL='postgres://USER:PASSWORD@HOST:5432/postgres?sslmode=disable'
	EOF
}

# _outboxd_pg_port_busy PORT: does anything accept TCP connections on 127.0.0.1:PORT?
_outboxd_pg_port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# _outboxd_pg_alive PID: is that process running (a zombie is not)?
_outboxd_pg_alive() {
	local stat
	kill -0 "$1" 2>/dev/null || return 1
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# _outboxd_pg_as_owner CMD...: runs CMD as the cluster's owner, from the cluster's directory.
_outboxd_pg_as_owner() {
	(cd "$_outboxd_pg_base" && "${_outboxd_pg_runas[@]}" "$@")
}

_outboxd_pg_ensure_os_user() {
	id -u postgres >/dev/null 2>&1 && return 0
	_outboxd_pg_log "creating the system user postgres to run the throwaway cluster"
	local group=(--user-group)
	getent group postgres >/dev/null 2>&1 && group=(--gid postgres)
	useradd --system "${group[@]}" --home-dir /var/lib/postgresql --no-create-home \
		--shell /usr/sbin/nologin --comment 'PostgreSQL administrator' postgres >&2
}

# _outboxd_pg_discard: removes a cluster directory this script created.
_outboxd_pg_discard() {
	if [[ -n ${_outboxd_pg_base:-} && $_outboxd_pg_base == */outboxd-pg.* ]]; then
		rm -rf -- "$_outboxd_pg_base" || true
	fi
	_outboxd_pg_base=''
	return 0
}

# _outboxd_pg_start BINDIR: step c. Sets _outboxd_pg_url on success.
_outboxd_pg_start() {
	local bindir=$1 parent=${OUTBOXD_PG_TMPDIR:-/var/tmp} port=${OUTBOXD_PG_PORT_BASE:-55432}
	local data log dsn pid attempt version i
	version=$("$bindir/postgres" --version 2>/dev/null | awk '{print $3}')
	if [[ -z $_outboxd_pg_psql && -x $bindir/psql ]]; then _outboxd_pg_psql=$bindir/psql; fi
	if [[ -z $_outboxd_pg_psql ]]; then
		_outboxd_pg_log "no psql next to $bindir/postgres to check the throwaway server with"
		return 1
	fi
	_outboxd_pg_runas=()
	if (( EUID == 0 )); then
		_outboxd_pg_ensure_os_user || { _outboxd_pg_log "could not create the postgres OS user"; return 1; }
		_outboxd_pg_runas=(runuser -u postgres --)
	fi
	_outboxd_pg_base=$(mktemp -d "$parent/outboxd-pg.XXXXXX") || {
		_outboxd_pg_log "cannot create a directory under $parent (set OUTBOXD_PG_TMPDIR)"
		return 1
	}
	_outboxd_pg_base=$(cd "$_outboxd_pg_base" && pwd -P)
	data=$_outboxd_pg_base/data log=$_outboxd_pg_base/server.log
	if (( EUID == 0 )); then
		if ! { chown postgres: "$_outboxd_pg_base" && chmod 700 "$_outboxd_pg_base"; }; then
			_outboxd_pg_discard
			return 1
		fi
	fi
	if ! _outboxd_pg_as_owner test -w "$_outboxd_pg_base" 2>/dev/null; then
		_outboxd_pg_log "the postgres user cannot enter $_outboxd_pg_base: set OUTBOXD_PG_TMPDIR to a directory it can reach"
		_outboxd_pg_discard
		return 1
	fi
	if ! _outboxd_pg_as_owner "$bindir/initdb" --no-sync --no-instructions -A trust -U postgres \
		-E UTF8 --locale=C -D "$data" >"$_outboxd_pg_base/initdb.log" 2>&1; then
		_outboxd_pg_log "initdb failed:"
		tail -n 20 "$_outboxd_pg_base/initdb.log" >&2
		_outboxd_pg_discard
		return 1
	fi
	cat >>"$data/postgresql.conf" <<-EOF

	# outboxd throwaway test cluster (scripts/ensure-postgres.sh); the port is given to pg_ctl
	listen_addresses = '127.0.0.1'
	unix_socket_directories = '$_outboxd_pg_base'
	max_connections = 300
	fsync = off
	synchronous_commit = off
	full_page_writes = off
	EOF

	for (( attempt = 0; attempt < 100; attempt++, port++ )); do
		_outboxd_pg_port_busy "$port" && continue
		rm -f -- "$log"
		_outboxd_pg_as_owner "$bindir/pg_ctl" -D "$data" -l "$log" -o "-p $port" -w -t 60 start \
			>"$_outboxd_pg_base/pg_ctl.log" 2>&1
		# Whatever pg_ctl said: is our postmaster alive and is the server on the port ours?
		dsn="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
		for (( i = 0; i < 50; i++ )); do
			pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null) || pid=''
			if ! [[ $pid =~ ^[0-9]+$ ]] || ! _outboxd_pg_alive "$pid"; then break; fi
			if _outboxd_pg_query "$dsn" 'SHOW data_directory' && [[ $_outboxd_pg_out == "$data" ]]; then
				_outboxd_pg_pid=$pid _outboxd_pg_port=$port _outboxd_pg_bindir=$bindir
				_outboxd_pg_url=$dsn
				_outboxd_pg_log "started throwaway PostgreSQL $version at $dsn (data $data)"
				return 0
			fi
			sleep 0.2
		done
		# Not ours or not up: stop whatever we started before deciding.
		_outboxd_pg_as_owner "$bindir/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1
		if grep -qE 'could not bind|Address already in use|could not create any TCP/IP sockets' "$log" 2>/dev/null; then
			_outboxd_pg_log "port $port was taken between probe and bind; trying the next one"
			continue
		fi
		_outboxd_pg_log "throwaway PostgreSQL on port $port did not come up; last server log lines:"
		tail -n 20 "$log" "$_outboxd_pg_base/pg_ctl.log" >&2 2>/dev/null
		_outboxd_pg_discard
		return 1
	done
	_outboxd_pg_log "no free port in $((port - attempt))..$((port - 1)) for a throwaway PostgreSQL (set OUTBOXD_PG_PORT_BASE)"
	_outboxd_pg_discard
	return 1
}

# outboxd_pg_stop: stops and removes the throwaway cluster this shell started; no-op otherwise.
outboxd_pg_stop() {
	[[ -n ${_outboxd_pg_base:-} && -n ${_outboxd_pg_pid:-} ]] || return 0
	local data=$_outboxd_pg_base/data i
	if ! _outboxd_pg_as_owner "$_outboxd_pg_bindir/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1; then
		kill -KILL "$_outboxd_pg_pid" 2>/dev/null || true
	fi
	for (( i = 0; i < 50; i++ )); do
		_outboxd_pg_alive "$_outboxd_pg_pid" || break
		sleep 0.1
	done
	_outboxd_pg_log "stopped throwaway PostgreSQL on port $_outboxd_pg_port (pid $_outboxd_pg_pid), removed $_outboxd_pg_base"
	_outboxd_pg_discard
	_outboxd_pg_pid=''
	if [[ ${OUTBOXD_TEST_DATABASE_URL:-} == "${_outboxd_pg_url:-}" ]]; then
		if [[ -n ${_outboxd_pg_prev_url:-} ]]; then
			export OUTBOXD_TEST_DATABASE_URL=$_outboxd_pg_prev_url
		else
			unset OUTBOXD_TEST_DATABASE_URL
		fi
	fi
	return 0
}

# outboxd_pg_ensure_private_binaries WHO: makes sure a test may start a PostgreSQL server of
# its own (internal/testenv/private.go; the chaos suite's postgres-restarted scenario stops and
# starts one, never the shared server): the server binaries (initdb, pg_ctl, postgres), even
# where the shared server answers from elsewhere (a CI service container), and as root the
# postgres user to run them as. Installs the postgresql package only when they are missing,
# as root with apt-get, its packaged service kept from starting; otherwise fails saying the
# command to run. WHO prefixes the messages.
outboxd_pg_ensure_private_binaries() {
	local who=${1:-ensure-postgres} policy=/usr/sbin/policy-rc.d created_policy='' status=0
	if ! _outboxd_pg_find_server >/dev/null; then
		if (( EUID != 0 )) || ! command -v apt-get >/dev/null 2>&1; then
			printf '%s: tests start PostgreSQL servers of their own and need initdb, pg_ctl and postgres: sudo apt-get install -y --no-install-recommends postgresql (or set OUTBOXD_PG_BINDIR)\n' "$who" >&2
			return 1
		fi
		printf '%s: no PostgreSQL server binaries for the tests'"'"' own servers; installing the postgresql package (apt-get), service not started\n' "$who" >&2
		if [[ ! -e $policy ]]; then
			printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && created_policy=1
		fi
		_outboxd_pg_install || status=1
		if [[ -n $created_policy ]]; then rm -f "$policy"; fi
		if (( status != 0 )) || ! _outboxd_pg_find_server >/dev/null; then
			printf '%s: installing postgresql gave no initdb, pg_ctl and postgres\n' "$who" >&2
			return 1
		fi
	fi
	if (( EUID == 0 )) && ! _outboxd_pg_ensure_os_user; then
		printf '%s: could not create the postgres user the tests'"'"' own servers run as\n' "$who" >&2
		return 1
	fi
}

# _outboxd_pg_main: steps a-d; sets and exports OUTBOXD_TEST_DATABASE_URL.
_outboxd_pg_main() {
	local bindir probe=${OUTBOXD_PG_PROBE_PORT:-5432} local_dsn installed=''
	_outboxd_pg_url=''
	# The value outboxd_pg_stop restores (not when sourced again while our server runs).
	if [[ -z ${_outboxd_pg_pid:-} ]]; then _outboxd_pg_prev_url=${OUTBOXD_TEST_DATABASE_URL:-}; fi

	_outboxd_pg_find_client
	if [[ -z $_outboxd_pg_psql && -z $_outboxd_pg_isready ]]; then
		# No client tools means no server install either (d); install, then check a and b too.
		if ! _outboxd_pg_install; then
			_outboxd_pg_instructions "no PostgreSQL client tools (psql) to check a server with, and no server binaries."
			return 1
		fi
		installed=1
		_outboxd_pg_find_client
	fi

	# a. The caller's server.
	if [[ -n ${OUTBOXD_TEST_DATABASE_URL:-} ]]; then
		if _outboxd_pg_answers "$OUTBOXD_TEST_DATABASE_URL"; then
			_outboxd_pg_url=$OUTBOXD_TEST_DATABASE_URL
			export OUTBOXD_TEST_DATABASE_URL
			_outboxd_pg_log "using OUTBOXD_TEST_DATABASE_URL $(_outboxd_pg_redact "$_outboxd_pg_url")"
			return 0
		fi
		_outboxd_pg_log "OUTBOXD_TEST_DATABASE_URL $(_outboxd_pg_redact "$OUTBOXD_TEST_DATABASE_URL") does not answer (${_outboxd_pg_err:-?}); looking for another server"
	fi

	# b. The local server, trust auth.
	local_dsn="postgres://postgres@127.0.0.1:$probe/postgres?sslmode=disable"
	if _outboxd_pg_answers "$local_dsn"; then
		_outboxd_pg_url=$local_dsn
		export OUTBOXD_TEST_DATABASE_URL=$_outboxd_pg_url
		_outboxd_pg_log "using the local server $local_dsn"
		return 0
	fi

	# c, after d when the server binaries are missing.
	if ! bindir=$(_outboxd_pg_find_server); then
		if [[ -n $installed ]] || ! _outboxd_pg_install || ! bindir=$(_outboxd_pg_find_server); then
			_outboxd_pg_instructions "no PostgreSQL server answers (tried ${OUTBOXD_TEST_DATABASE_URL:+\$OUTBOXD_TEST_DATABASE_URL and }$local_dsn) and no server binaries (initdb, pg_ctl) are installed."
			return 1
		fi
	fi
	_outboxd_pg_start "$bindir" || return 1
	export OUTBOXD_TEST_DATABASE_URL=$_outboxd_pg_url
}

if [[ ${BASH_SOURCE[0]} != "$0" ]]; then
	# Sourced: export into the caller's shell; the caller stops the cluster (outboxd_pg_stop).
	_outboxd_pg_main || return 1
	if [[ -n ${_outboxd_pg_pid:-} && $- == *i* ]]; then
		_outboxd_pg_log "the throwaway server runs until you call outboxd_pg_stop"
	fi
	true
else
	set -uo pipefail
	case ${1:-} in
	-h | --help) sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
	'') ;;
	*) echo "usage: $0 [--help]" >&2; exit 2 ;;
	esac
	_outboxd_pg_main || exit 1
	if [[ -n ${_outboxd_pg_pid:-} ]]; then
		_outboxd_pg_log "it keeps running; stop it with: ${_outboxd_pg_runas[*]}${_outboxd_pg_runas[*]:+ }$_outboxd_pg_bindir/pg_ctl -D $_outboxd_pg_base/data -m immediate stop && rm -rf $_outboxd_pg_base"
	fi
	printf "export OUTBOXD_TEST_DATABASE_URL='%s'\n" "${OUTBOXD_TEST_DATABASE_URL//\'/\'\\\'\'}"
fi
