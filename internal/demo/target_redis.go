package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	redisdrv "github.com/outboxd/outboxd/router/redis"
)

// DefaultRedisAddr is where --redis-addr points unless given: the machine's own server.
const DefaultRedisAddr = "127.0.0.1:6379"

// demoRedisPrefix starts the stream key the demo's messages go to, in database 0:
// outboxd-demo.<random>.orders, a stream of the run's own, so that demos running at once
// never count each other's messages. The demo deletes it when it ends and touches no
// other key.
const demoRedisPrefix = "outboxd-demo."

// redisTarget is a Redis server the demo cannot start, at --redis-addr, read back with
// XREAD from the stream's start.
type redisTarget struct {
	addr   string
	prefix string // the stream's topic prefix
	key    string // the stream the demo's rows (topic "orders") go to
	c      *goredis.Client
}

func openRedis(ctx context.Context, o Options, _ targetEnv) (target, error) {
	t := &redisTarget{addr: o.RedisAddr, prefix: demoRedisPrefix + strconv.FormatUint(rand.Uint64(), 36) + "."}
	t.key = t.prefix + "orders"
	t.c = goredis.NewClient(&goredis.Options{Addr: t.addr, MaxRetries: -1, DialTimeout: 5 * time.Second})
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := t.c.Ping(pctx).Err(); err != nil {
		t.c.Close()
		return nil, fmt.Errorf("demo: Redis at %s (--redis-addr): %w", t.addr, err)
	}
	return t, nil
}

func (t *redisTarget) driver() (config.Driver, string) {
	drv := redisdrv.DefaultOptions()
	drv.Addr = t.addr
	return config.Driver{Type: redisdrv.Type, Options: drv}, t.prefix
}

// consume reads the stream from its start with blocking XREADs on a connection of its
// own, reporting each entry's message_id field; every copy is an entry of its own.
func (t *redisTarget) consume(ctx context.Context, receive func(string)) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	reader := goredis.NewClient(&goredis.Options{Addr: t.addr, MaxRetries: -1, ReadTimeout: -1, PoolSize: 1})
	if err := reader.Ping(ctx).Err(); err != nil {
		cancel()
		reader.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := "0"
		for ctx.Err() == nil {
			streams, err := reader.XRead(ctx, &goredis.XReadArgs{Streams: []string{t.key, last}, Count: 1000, Block: time.Second}).Result()
			switch {
			case errors.Is(err, goredis.Nil): // nothing new within the block
				continue
			case err != nil:
				if ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond) // the server went away; ask again
				}
				continue
			}
			for _, s := range streams {
				for _, e := range s.Messages {
					id, _ := e.Values[redisdrv.FieldMessageID].(string)
					receive(id)
					last = e.ID
				}
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		reader.Close()
	}, nil
}

// absorbed is 0: a Redis stream keeps every copy, and the consumer counts each.
func (t *redisTarget) absorbed(*app.Dispatcher) func() int64 { return func() int64 { return 0 } }

func (t *redisTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = t.c.Del(ctx, t.key).Err()
	t.c.Close()
}
