package testenv

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// The servers the redis and rabbitmq drivers' tests publish to, on their usual addresses
// unless the environment names others.
const (
	defaultRedisAddr   = "127.0.0.1:6379"
	defaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/" //nolint:gosec // G101: RabbitMQ's well-known local test account
)

// RedisAddr returns the Redis server's host:port (OUTBOXD_TEST_REDIS_ADDR, or
// 127.0.0.1:6379), skipping t when nothing answers there, or failing it under
// OUTBOXD_REQUIRE_SERVICES=1 (scripts/ensure-services.sh).
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := envOr("OUTBOXD_TEST_REDIS_ADDR", defaultRedisAddr)
	requireListening(t, "Redis", addr, "redis-server --daemonize yes --port 6379 --save ''")
	return addr
}

// RabbitMQURL returns the RabbitMQ server's AMQP URL (OUTBOXD_TEST_RABBITMQ_URL, or
// guest/guest at 127.0.0.1:5672), skipping or failing t as RedisAddr does.
func RabbitMQURL(t testing.TB) string {
	t.Helper()
	url := envOr("OUTBOXD_TEST_RABBITMQ_URL", defaultRabbitMQURL)
	host := "127.0.0.1:5672"
	if url != defaultRabbitMQURL {
		host = hostOf(url)
	}
	requireListening(t, "RabbitMQ", host, "rabbitmq-server -detached")
	return url
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// hostOf returns the host:port of an amqp:// URL, or the text itself when it is none.
func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return raw
}

// requireListening skips t (or fails it under OUTBOXD_REQUIRE_SERVICES=1) unless a TCP
// connection to addr opens within two seconds.
func requireListening(t testing.TB, what, addr, start string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		_ = c.Close()
		return
	}
	msg := what + " is not reachable at " + addr + " (" + err.Error() + "); start one (" + start +
		") or run scripts/test.sh, which starts or installs it"
	if os.Getenv("OUTBOXD_REQUIRE_SERVICES") == "1" {
		t.Fatal(msg + "; OUTBOXD_REQUIRE_SERVICES=1 makes this a failure")
	}
	t.Skip(msg)
}
