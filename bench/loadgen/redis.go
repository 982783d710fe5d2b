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

// doer is a client or a pipeline: typed commands and generic ones.
type doer interface {
	redis.Cmdable
	Do(ctx context.Context, args ...interface{}) *redis.Cmd
}

// commands queues op's commands on c; a transfer is MULTI, DECRBY, INCRBY, EXEC, sent as
// generic commands (their replies inside MULTI are +QUEUED, not integers).
func commands(ctx context.Context, c doer, op Op) []redis.Cmder {
	switch op.Kind {
	case Read:
		return []redis.Cmder{c.Get(ctx, op.Key)}
	case Write:
		return []redis.Cmder{c.Set(ctx, op.Key, op.Value, 0)}
	case MSet:
		pairs := make([]interface{}, 0, 2*len(op.Keys))
		for _, k := range op.Keys {
			pairs = append(pairs, k, op.Value)
		}
		return []redis.Cmder{c.MSet(ctx, pairs...)}
	case Transfer:
		return []redis.Cmder{
			c.Do(ctx, "MULTI"),
			c.Do(ctx, "DECRBY", op.Key, op.Amount),
			c.Do(ctx, "INCRBY", op.To, op.Amount),
			c.Do(ctx, "EXEC"),
		}
	default:
		return []redis.Cmder{c.Incr(ctx, op.Key)}
	}
}

func cmdErr(cmd redis.Cmder) error {
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}

func (s *redisStore) Do(ctx context.Context, ops []Op) (int, error) {
	if len(ops) == 1 && ops[0].Kind != Transfer {
		return 0, cmdErr(commands(ctx, s.c, ops[0])[0])
	}
	pipe := s.c.Pipeline()
	var cmds []redis.Cmder
	for _, op := range ops {
		cmds = append(cmds, commands(ctx, pipe, op)...)
	}
	_, _ = pipe.Exec(ctx)
	for _, cmd := range cmds {
		if err := cmdErr(cmd); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// Sum adds up the counters at keys (MGET; an absent key is 0).
func (s *redisStore) Sum(ctx context.Context, keys []string) (int64, error) {
	vals, err := s.c.MGet(ctx, keys...).Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for i, v := range vals {
		str, present := v.(string)
		n, err := parseCounter(keys[i], []byte(str), present)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Transport: anything but an error reply of the server (TRYAGAIN, UNCERTAIN, ERR ...).
func (s *redisStore) Transport(err error) bool {
	var reply redis.Error
	return !errors.As(err, &reply)
}

func (s *redisStore) Close() { _ = s.c.Close() }
