package app

import (
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/config"
)

// deadPeers makes both ends of every connection c opens notice a dead peer within
// seconds (database.keepalive_*, database.user_timeout). A replica holds session-level
// advisory locks on some of them, a stream's flow lock and the janitor's lock, and
// PostgreSQL gives those up only when it ends the session: the server must notice, so the
// settings go to it as well (tcp_keepalives_*, tcp_user_timeout, ignored on a Unix
// socket), and our side must, so that a claim or a lock's release on a dead path fails
// rather than waits on the kernel's two-hour default. Settings database_url already
// makes are kept.
func deadPeers(c *pgconn.Config, d config.Database) {
	params := map[string]string{
		"tcp_keepalives_idle":     strconv.Itoa(int(d.KeepaliveIdle / time.Second)),
		"tcp_keepalives_interval": strconv.Itoa(int(d.KeepaliveInterval / time.Second)),
		"tcp_keepalives_count":    strconv.Itoa(d.KeepaliveCount),
		"tcp_user_timeout":        strconv.Itoa(int(d.UserTimeout / time.Millisecond)),
	}
	for k, v := range params {
		if _, set := c.RuntimeParams[k]; !set {
			c.RuntimeParams[k] = v
		}
	}
	dialer := &net.Dialer{
		Timeout: c.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: d.KeepaliveIdle,
			Interval: d.KeepaliveInterval, Count: d.KeepaliveCount},
		Control: userTimeout(d.UserTimeout),
	}
	c.DialFunc = dialer.DialContext
}
