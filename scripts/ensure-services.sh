# ensure-services.sh: sourced by test.sh. Installs pgbouncer where missing (each PgBouncer test
# starts its own). Makes the Redis and RabbitMQ servers the redis and
# rabbitmq drivers' tests publish to answer on their usual addresses (127.0.0.1:6379 and
# 127.0.0.1:5672, guest/guest): a server already answering is used as it is; one installed
# but stopped is started (and stopped again by outboxd_services_stop); one missing is
# installed from Debian's packages when running as root with apt-get, its packaged service
# kept from starting. When a server still does not answer, its tests skip and say why,
# unless OUTBOXD_REQUIRE_SERVICES=1, under which they fail (what CI on a machine that runs
# both servers wants: a skip there would hide a broken server).

outboxd_services_started=()

outboxd_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

outboxd_apt_install() {
	local pkg=$1 policy=/usr/sbin/policy-rc.d created= status=0
	if (( EUID != 0 )) || ! command -v apt-get >/dev/null 2>&1; then
		return 1
	fi
	echo "ensure-services: installing $pkg (apt-get), its service not started" >&2
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && created=1
	fi
	{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$pkg"; } >&2 || status=$?
	if [[ -n $created ]]; then rm -f "$policy"; fi
	return "$status"
}

outboxd_wait_port() {
	local port=$1 seconds=$2
	for ((i = 0; i < seconds * 4; i++)); do
		outboxd_port_open "$port" && return 0
		sleep 0.25
	done
	return 1
}

outboxd_ensure_redis() {
	outboxd_port_open 6379 && { echo "ensure-services: using the Redis at 127.0.0.1:6379" >&2; return 0; }
	command -v redis-server >/dev/null 2>&1 || outboxd_apt_install redis-server || true
	if ! command -v redis-server >/dev/null 2>&1; then
		echo "ensure-services: no Redis at 127.0.0.1:6379 and none to start: the redis driver's tests skip (apt-get install redis-server)" >&2
		return 0
	fi
	local dir
	dir=$(mktemp -d)
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir "$dir" \
		--pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >&2 || true
	if outboxd_wait_port 6379 10; then
		echo "ensure-services: started Redis at 127.0.0.1:6379 (stopped at exit)" >&2
		outboxd_services_started+=("redis:$dir")
	else
		echo "ensure-services: Redis did not start (log: $dir/redis.log); the redis driver's tests skip" >&2
	fi
}

outboxd_ensure_rabbitmq() {
	outboxd_port_open 5672 && { echo "ensure-services: using the RabbitMQ at 127.0.0.1:5672" >&2; return 0; }
	command -v rabbitmq-server >/dev/null 2>&1 || outboxd_apt_install rabbitmq-server || true
	if ! command -v rabbitmq-server >/dev/null 2>&1; then
		echo "ensure-services: no RabbitMQ at 127.0.0.1:5672 and none to start: the rabbitmq driver's tests skip (apt-get install rabbitmq-server)" >&2
		return 0
	fi
	rabbitmq-server -detached >&2 || true
	if outboxd_wait_port 5672 90; then
		echo "ensure-services: started RabbitMQ at 127.0.0.1:5672 (stopped at exit)" >&2
		outboxd_services_started+=("rabbitmq:")
	else
		echo "ensure-services: RabbitMQ did not start within 90 s; the rabbitmq driver's tests skip" >&2
	fi
}

outboxd_services_stop() {
	local s
	for s in "${outboxd_services_started[@]}"; do
		case $s in
		redis:*)
			local dir=${s#redis:}
			if [[ -f $dir/redis.pid ]]; then kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; fi
			rm -rf "$dir"
			;;
		rabbitmq:*) rabbitmqctl stop >/dev/null 2>&1 || true ;;
		esac
	done
	outboxd_services_started=()
}

# PgBouncer is not a server to share: each test starts its own (internal/testenv/pgbouncer.go),
# so only its binary must be here.
outboxd_ensure_pgbouncer() {
	if [[ -x /usr/sbin/pgbouncer ]] || command -v pgbouncer >/dev/null 2>&1; then
		echo "ensure-services: using $(command -v pgbouncer || echo /usr/sbin/pgbouncer) (each test starts its own)" >&2
		return 0
	fi
	outboxd_apt_install pgbouncer || true
	if [[ ! -x /usr/sbin/pgbouncer ]] && ! command -v pgbouncer >/dev/null 2>&1; then
		echo "ensure-services: no pgbouncer to start: the PgBouncer tests skip (apt-get install pgbouncer)" >&2
	fi
}

# Chromium is a binary too: the web console's browser test (internal/console) starts it
# headless at /usr/bin/chromium, skipping without it (failing under OUTBOXD_REQUIRE_SERVICES=1).
outboxd_ensure_chromium() {
	if [[ -x /usr/bin/chromium ]]; then
		echo "ensure-services: using /usr/bin/chromium (the console's browser test)" >&2
		return 0
	fi
	outboxd_apt_install chromium || true
	if [[ ! -x /usr/bin/chromium ]]; then
		echo "ensure-services: no /usr/bin/chromium: the console's browser test skips (apt-get install chromium)" >&2
	fi
}

outboxd_ensure_services() {
	outboxd_ensure_redis
	outboxd_ensure_rabbitmq
	outboxd_ensure_pgbouncer
	outboxd_ensure_chromium
}
