package app

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
)

// TestBothEndsOfADatabaseConnectionNoticeADeadPeerWithinSeconds connects over TCP as the
// dispatcher does and reads the settings back from the server (which alone can release a
// dead session's advisory locks) and from our own socket.
func TestBothEndsOfADatabaseConnectionNoticeADeadPeerWithinSeconds(t *testing.T) {
	t.Parallel()
	cc, err := pgx.ParseConfig(testenv.SharedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	if cc.Host == "" || cc.Host[0] == '/' {
		t.Skip("the test database is reached over a Unix socket, where TCP keepalive does not apply")
	}
	d := config.Database{KeepaliveIdle: 7 * time.Second, KeepaliveInterval: 3 * time.Second, KeepaliveCount: 4, UserTimeout: 9 * time.Second}
	deadPeers(&cc.Config, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	for setting, want := range map[string]string{"tcp_keepalives_idle": "7", "tcp_keepalives_interval": "3",
		"tcp_keepalives_count": "4", "tcp_user_timeout": "9000"} {
		var got string
		if err := conn.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = $1`, setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("server's %s = %s; want %s", setting, got, want)
		}
	}

	tc, ok := conn.PgConn().Conn().(*net.TCPConn)
	if !ok {
		t.Skipf("the connection is a %T, not TCP (TLS wraps it): the server's side was checked", conn.PgConn().Conn())
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]struct {
		level, opt, want int
	}{
		"SO_KEEPALIVE":     {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		"TCP_KEEPIDLE":     {syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 7},
		"TCP_KEEPINTVL":    {syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 3},
		"TCP_KEEPCNT":      {syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 4},
		"TCP_USER_TIMEOUT": {syscall.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, 9000},
	} {
		var got int
		var gerr error
		if err := raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), opt.level, opt.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatalf("%s: %v", name, gerr)
		}
		if got != opt.want {
			t.Errorf("our socket's %s = %d; want %d", name, got, opt.want)
		}
	}
}
