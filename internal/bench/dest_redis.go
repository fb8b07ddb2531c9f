package bench

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/router"
	redisdrv "github.com/outboxd/outboxd/router/redis"
)

// DefaultRedisAddr is where --redis-addr points unless given: the machine's own server.
const DefaultRedisAddr = "127.0.0.1:6379"

// benchRedisKey is the Redis stream the bench's messages go to (the stream prefix and
// row topic), in database 0 of the server at --redis-addr. The bench deletes it before
// each drain and when the run ends, and touches no other key.
const benchRedisKey = benchPrefix + benchTopic

// redisDest is a Redis server the bench cannot start: it is measured only when
// --drivers names it.
var redisDest = benchDest{
	typ:     redisdrv.Type,
	environ: func(o router.Options) map[string]string { return map[string]string{"ADDR": o.(redisdrv.Options).Addr} },
	options: func(o benchOptions) router.Options {
		r := redisdrv.DefaultOptions()
		r.Addr = o.raw.RedisAddr
		if addr := o.addrs[redisdrv.Type]; addr != "" {
			r.Addr = addr
		}
		return r
	},
	setup:    setupRedis,
	arrivals: redisArrivals,
}

// setupRedis checks that the server answers and clears the bench's stream; the closer
// deletes the stream once the run is over.
func setupRedis(ctx context.Context, b *bench) (string, string, func(), error) {
	addr := b.opt.raw.RedisAddr
	c, err := dialRedis(ctx, addr)
	if err != nil {
		return "", "", nil, err
	}
	closer := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Del(dctx, benchRedisKey).Err()
		_ = c.Close()
	}
	return addr, "redis " + addr + ", stream " + benchRedisKey, closer, nil
}

// dialRedis connects to the server at addr and clears the bench's stream.
func dialRedis(ctx context.Context, addr string) (*goredis.Client, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 5 * time.Second})
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Del(pctx, benchRedisKey).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("bench: Redis at %s (--redis-addr): %w", addr, err)
	}
	return c, nil
}

// redisArrivals empties the stream before a drain; its count reads the stream back.
func redisArrivals(ctx context.Context, b *bench) (arrivalCounter, error) {
	c, err := dialRedis(ctx, b.opt.addrs[redisdrv.Type])
	if err != nil {
		return nil, err
	}
	return redisCounter{c: c}, nil
}

// redisCounter reads the bench's stream, page by page, tallying each entry's id field.
type redisCounter struct{ c *goredis.Client }

func (redisCounter) countedBy() string {
	return "the Redis stream, read back (distinct " + redisdrv.FieldID + " fields)"
}

func (r redisCounter) close() { _ = r.c.Close() }

func (r redisCounter) count(ctx context.Context, ids []int64, _ *dispatcherProcess) (int64, int64, error) {
	const page = 10000
	t := newTally()
	start := "-"
	for {
		entries, err := r.c.XRangeN(ctx, benchRedisKey, start, "+", page).Result()
		if err != nil {
			return 0, 0, fmt.Errorf("bench: read the Redis stream %s: %w", benchRedisKey, err)
		}
		for _, e := range entries {
			id, _ := e.Values[redisdrv.FieldID].(string)
			t.add(id)
		}
		if len(entries) < page {
			break
		}
		start = "(" + entries[len(entries)-1].ID // after the last one read
	}
	arrived, dups := t.against(ids)
	return arrived, dups, nil
}
