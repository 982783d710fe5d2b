package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisDialer opens one connection per client (a go-redis client with a pool of one), RESP2,
// with go-redis's retries off: an INCR must not be sent twice behind the benchmark's back, and
// a retried request would hide its first attempt's latency.
type redisDialer struct{ cfg *Config }

func newRedisDialer(cfg *Config) *redisDialer { return &redisDialer{cfg: cfg} }

func (d *redisDialer) Dial(_ int, endpoint string) (Store, error) {
	c := redis.NewClient(&redis.Options{
		Addr:                     endpoint,
		Protocol:                 2,
		PoolSize:                 1,
		MaxRetries:               -1,
		DialTimeout:              2 * time.Second,
		ReadTimeout:              d.cfg.OpTimeout,
		WriteTimeout:             d.cfg.OpTimeout,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &redisStore{c: c}, nil
}

// Leader is the first endpoint: a Redis-protocol system has no leader to find.
func (d *redisDialer) Leader(context.Context) (string, error) { return d.cfg.Endpoints[0], nil }

func (d *redisDialer) Close() {}

type redisStore struct{ c *redis.Client }

func command(ctx context.Context, c redis.Cmdable, op Op) redis.Cmder {
	switch op.Kind {
	case Read:
		return c.Get(ctx, op.Key)
	case Write:
		return c.Set(ctx, op.Key, op.Value, 0)
	default:
		return c.Incr(ctx, op.Key)
	}
}

func cmdErr(cmd redis.Cmder) error {
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}

func (s *redisStore) Do(ctx context.Context, ops []Op) (int, error) {
	if len(ops) == 1 {
		return 0, cmdErr(command(ctx, s.c, ops[0]))
	}
	pipe := s.c.Pipeline()
	cmds := make([]redis.Cmder, len(ops))
	for i, op := range ops {
		cmds[i] = command(ctx, pipe, op)
	}
	_, _ = pipe.Exec(ctx)
	for _, cmd := range cmds {
		if err := cmdErr(cmd); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// Transport: anything but an error reply of the server (TRYAGAIN, UNCERTAIN, ERR ...).
func (s *redisStore) Transport(err error) bool {
	var reply redis.Error
	return !errors.As(err, &reply)
}

func (s *redisStore) Close() { _ = s.c.Close() }
