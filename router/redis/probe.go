package redis

import (
	"context"
	"fmt"

	"github.com/outboxd/outboxd/router"
)

var _ router.Prober = (*Driver)(nil)

// Probe reports whether the server answers (PING) and, for a non-empty key, whether an
// XADD to it could succeed: a key that is missing (XADD creates the stream) or holds a
// stream is fine; one that holds another type is a *router.NoDestinationError.
func (d *Driver) Probe(ctx context.Context, key string) error {
	if !d.enter() {
		return d.closedErr()
	}
	defer d.inflight.Done()
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	if key == "" {
		if err := d.rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis ping: %w", err)
		}
		return nil
	}
	typ, err := d.rdb.Type(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("redis type %s: %w", quote(key), err)
	}
	switch typ {
	case "none", "stream":
		return nil
	}
	return &router.NoDestinationError{Reason: notStream(key, typ)}
}
