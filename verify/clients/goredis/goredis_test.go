// Package goredis tests logless with go-redis v9 and its default options: RESP3 (HELLO 3),
// the client identity (CLIENT SETINFO), connection pools, strings, counters, sets, hashes,
// lists, sorted sets, single-key transactions (TxPipelined) and pipelines, against the
// 3-replica cluster TestMain starts.
package goredis

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// client is a go-redis client of replica i with the default options (only the address and
// timeouts set).
func client(t *testing.T, i int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addresses[i], ReadTimeout: 20 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// ns is a key prefix of the test's own (the cluster is shared).
func ns(t *testing.T) string {
	return fmt.Sprintf("go:%s:%d:", t.Name(), time.Now().UnixNano())
}

func check[T any](t *testing.T, what string, got T, err error, want T) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %#v, want %#v", what, got, want)
	}
}

func checkErr(t *testing.T, what string, err error, prefix string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("%s: got error %v, want one starting %q", what, err, prefix)
	}
}

func TestDefaultOptionsSpeakRESP3WithClientIdentity(t *testing.T) {
	ctx := context.Background()
	r := client(t, 0)
	k := ns(t) + "h"
	check(t, "HSET", r.HSet(ctx, k, "f", "v").Val(), r.HSet(ctx, k, "g", "w").Err(), int64(1))
	// In RESP3 HGETALL is a map, which go-redis's Do returns as a Go map; in RESP2 it would be
	// a flat slice. So this tells that the client's default HELLO 3 was accepted.
	raw, err := r.Do(ctx, "HGETALL", k).Result()
	check(t, "HGETALL through Do", raw, err, any(map[any]any{"f": "v", "g": "w"}))
	// The identity go-redis sends on connecting, and sends again here, is accepted.
	conn := r.Conn()
	defer conn.Close()
	check(t, "CLIENT SETINFO LIB-NAME", conn.ClientSetInfo(ctx, redis.WithLibraryName("go-redis(logless-test)")).Val(),
		nil, "OK")
	check(t, "CLIENT SETINFO LIB-VER", conn.ClientSetInfo(ctx, redis.WithLibraryVersion(redis.Version())).Val(), nil, "OK")
	check(t, "CLIENT SETNAME", conn.ClientSetName(ctx, "go-test").Val(), nil, true)
	name, err := conn.ClientGetName(ctx).Result()
	check(t, "CLIENT GETNAME", name, err, "go-test")
	pong, err := r.Ping(ctx).Result()
	check(t, "PING", pong, err, "PONG")
}

func TestStringsAndCounters(t *testing.T) {
	ctx := context.Background()
	r, other := client(t, 0), client(t, 1)
	p := ns(t)
	check(t, "SET", r.Set(ctx, p+"k", "v", 0).Val(), nil, "OK")
	v, err := other.Get(ctx, p+"k").Result()
	check(t, "GET through another replica", v, err, "v")
	_, err = r.Get(ctx, p+"missing").Result()
	if err != redis.Nil {
		t.Fatalf("GET of a missing key: %v, want redis.Nil", err)
	}
	ok, err := r.SetNX(ctx, p+"k", "w", 0).Result()
	check(t, "SETNX", ok, err, false)
	old, err := r.SetArgs(ctx, p+"k", "w", redis.SetArgs{Get: true}).Result()
	check(t, "SET GET", old, err, "v")
	check(t, "SET PX", r.Set(ctx, p+"e", "v", 10*time.Second).Err(), nil, nil)
	ttl, err := r.TTL(ctx, p+"e").Result()
	if err != nil || ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("TTL: %v %v", ttl, err)
	}
	n, err := r.Incr(ctx, p+"c").Result()
	check(t, "INCR", n, err, int64(1))
	n, err = r.IncrBy(ctx, p+"c", 41).Result()
	check(t, "INCRBY", n, err, int64(42))
	n, err = other.Decr(ctx, p+"c").Result()
	check(t, "DECR", n, err, int64(41))
	f, err := r.IncrByFloat(ctx, p+"c", 0.5).Result()
	check(t, "INCRBYFLOAT", f, err, 41.5)
	checkErr(t, "INCR of a float", r.Incr(ctx, p+"c").Err(), "ERR value is not an integer")
	n, err = r.Del(ctx, p+"k", p+"c", p+"missing").Result()
	check(t, "DEL", n, err, int64(2))
}

func TestSets(t *testing.T) {
	ctx := context.Background()
	r := client(t, 1)
	s := ns(t) + "s"
	n, err := r.SAdd(ctx, s, "b", "a", "a").Result()
	check(t, "SADD", n, err, int64(2))
	members, err := r.SMembers(ctx, s).Result()
	check(t, "SMEMBERS", members, err, []string{"a", "b"})
	in, err := r.SIsMember(ctx, s, "a").Result()
	check(t, "SISMEMBER", in, err, true)
	many, err := r.SMIsMember(ctx, s, "a", "z").Result()
	check(t, "SMISMEMBER", many, err, []bool{true, false})
	n, err = r.SRem(ctx, s, "a", "b").Result()
	check(t, "SREM", n, err, int64(2))
	n, err = r.Exists(ctx, s).Result()
	check(t, "EXISTS of an emptied set", n, err, int64(0))
}

func TestHashes(t *testing.T) {
	ctx := context.Background()
	r := client(t, 2)
	p := ns(t)
	h := p + "h"
	n, err := r.HSet(ctx, h, map[string]any{"a": "1", "b": "2"}).Result()
	check(t, "HSET", n, err, int64(2))
	v, err := r.HGet(ctx, h, "a").Result()
	check(t, "HGET", v, err, "1")
	if _, err := r.HGet(ctx, h, "missing").Result(); err != redis.Nil {
		t.Fatalf("HGET of a missing field: %v", err)
	}
	vals, err := r.HMGet(ctx, h, "a", "x", "b").Result()
	check(t, "HMGET", vals, err, []any{"1", nil, "2"})
	all, err := r.HGetAll(ctx, h).Result()
	check(t, "HGETALL", all, err, map[string]string{"a": "1", "b": "2"})
	n, err = r.HIncrBy(ctx, h, "a", 9).Result()
	check(t, "HINCRBY", n, err, int64(10))
	f, err := r.HIncrByFloat(ctx, h, "b", 0.5).Result()
	check(t, "HINCRBYFLOAT", f, err, 2.5)
	checkErr(t, "HINCRBY of a float", r.HIncrBy(ctx, h, "b", 1).Err(), "ERR hash value is not an integer")
	ok, err := r.HSetNX(ctx, h, "a", "x").Result()
	check(t, "HSETNX", ok, err, false)
	keys, err := r.HKeys(ctx, h).Result()
	check(t, "HKEYS", keys, err, []string{"a", "b"})
	n, err = r.HLen(ctx, h).Result()
	check(t, "HLEN", n, err, int64(2))
	n, err = r.HDel(ctx, h, "a", "b", "zz").Result()
	check(t, "HDEL", n, err, int64(2))
	n, err = r.Exists(ctx, h).Result()
	check(t, "EXISTS of an emptied hash", n, err, int64(0))
	r.Set(ctx, p+"s", "x", 0)
	checkErr(t, "HGET of a string", r.HGet(ctx, p+"s", "f").Err(), wrongType)
}

func TestLists(t *testing.T) {
	ctx := context.Background()
	r := client(t, 0)
	l := ns(t) + "l"
	n, err := r.RPush(ctx, l, "a", "b", "c").Result()
	check(t, "RPUSH", n, err, int64(3))
	n, err = r.LPush(ctx, l, "z").Result()
	check(t, "LPUSH", n, err, int64(4))
	items, err := r.LRange(ctx, l, 0, -1).Result()
	check(t, "LRANGE", items, err, []string{"z", "a", "b", "c"})
	v, err := r.LIndex(ctx, l, -1).Result()
	check(t, "LINDEX", v, err, "c")
	check(t, "LSET", r.LSet(ctx, l, 0, "y").Val(), nil, "OK")
	checkErr(t, "LSET out of range", r.LSet(ctx, l, 10, "x").Err(), "ERR index out of range")
	v, err = r.LPop(ctx, l).Result()
	check(t, "LPOP", v, err, "y")
	popped, err := r.RPopCount(ctx, l, 5).Result()
	check(t, "RPOP with a count", popped, err, []string{"c", "b", "a"})
	n, err = r.LLen(ctx, l).Result()
	check(t, "LLEN of an emptied list", n, err, int64(0))
	if _, err := r.LPop(ctx, l).Result(); err != redis.Nil {
		t.Fatalf("LPOP of an absent list: %v", err)
	}
	if _, err := r.LPopCount(ctx, l, 2).Result(); err != redis.Nil {
		t.Fatalf("LPOP with a count of an absent list: %v", err)
	}
	r.HSet(ctx, l, "f", "v")
	checkErr(t, "LPUSH onto a hash", r.LPush(ctx, l, "x").Err(), wrongType)
}

func TestSortedSets(t *testing.T) {
	ctx := context.Background()
	r := client(t, 1)
	z := ns(t) + "z"
	n, err := r.ZAdd(ctx, z, redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2, Member: "b"},
		redis.Z{Score: 3.5, Member: "c"}).Result()
	check(t, "ZADD", n, err, int64(3))
	n, err = r.ZAddArgs(ctx, z, redis.ZAddArgs{GT: true, Ch: true, Members: []redis.Z{{Score: 5, Member: "a"}}}).Result()
	check(t, "ZADD GT CH", n, err, int64(1))
	s, err := r.ZScore(ctx, z, "c").Result()
	check(t, "ZSCORE", s, err, 3.5)
	if _, err := r.ZScore(ctx, z, "x").Result(); err != redis.Nil {
		t.Fatalf("ZSCORE of a missing member: %v", err)
	}
	s, err = r.ZIncrBy(ctx, z, 0.25, "c").Result()
	check(t, "ZINCRBY", s, err, 3.75)
	members, err := r.ZRange(ctx, z, 0, -1).Result()
	check(t, "ZRANGE", members, err, []string{"b", "c", "a"})
	scored, err := r.ZRangeWithScores(ctx, z, 0, 0).Result()
	check(t, "ZRANGE WITHSCORES", scored, err, []redis.Z{{Score: 2, Member: "b"}})
	byScore, err := r.ZRangeByScore(ctx, z, &redis.ZRangeBy{Min: "(3", Max: "+inf"}).Result()
	check(t, "ZRANGEBYSCORE", byScore, err, []string{"c", "a"})
	rank, err := r.ZRevRank(ctx, z, "b").Result()
	check(t, "ZREVRANK", rank, err, int64(2))
	n, err = r.ZCard(ctx, z).Result()
	check(t, "ZCARD", n, err, int64(3))
	popped, err := r.ZPopMin(ctx, z, 2).Result()
	check(t, "ZPOPMIN", popped, err, []redis.Z{{Score: 2, Member: "b"}, {Score: 3.75, Member: "c"}})
	n, err = r.ZRem(ctx, z, "a", "x").Result()
	check(t, "ZREM", n, err, int64(1))
	n, err = r.Exists(ctx, z).Result()
	check(t, "EXISTS of an emptied sorted set", n, err, int64(0))
}

func TestTxPipelinedOnOneKey(t *testing.T) {
	ctx := context.Background()
	r := client(t, 0)
	p := ns(t)
	k := p + "hits"
	// The rate-limiter pattern: INCR and EXPIRE in one transaction.
	var incr *redis.IntCmd
	var expire *redis.BoolCmd
	_, err := r.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		incr = pipe.Incr(ctx, k)
		expire = pipe.Expire(ctx, k, 10*time.Second)
		return nil
	})
	check(t, "INCR in MULTI", incr.Val(), err, int64(1))
	check(t, "EXPIRE in MULTI", expire.Val(), expire.Err(), true)
	// Hash, list and sorted-set commands on one key each, every reply in its own shape.
	h := p + "h"
	var hset *redis.IntCmd
	var hgetall *redis.MapStringStringCmd
	var hincr *redis.IntCmd
	_, err = r.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		hset = pipe.HSet(ctx, h, "f", "1", "g", "2")
		hincr = pipe.HIncrBy(ctx, h, "f", 2)
		hgetall = pipe.HGetAll(ctx, h)
		return nil
	})
	check(t, "HSET in MULTI", hset.Val(), err, int64(2))
	check(t, "HINCRBY in MULTI", hincr.Val(), hincr.Err(), int64(3))
	check(t, "HGETALL in MULTI", hgetall.Val(), hgetall.Err(), map[string]string{"f": "3", "g": "2"})
	z := p + "z"
	var zscore *redis.FloatCmd
	var zrange *redis.StringSliceCmd
	_, err = r.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.ZAdd(ctx, z, redis.Z{Score: 1, Member: "a"})
		pipe.ZIncrBy(ctx, z, 2, "b")
		zscore = pipe.ZScore(ctx, z, "b")
		zrange = pipe.ZRange(ctx, z, 0, -1)
		return nil
	})
	check(t, "ZSCORE in MULTI", zscore.Val(), err, 2.0)
	check(t, "ZRANGE in MULTI", zrange.Val(), zrange.Err(), []string{"a", "b"})
	// A command that fails when run answers its error; the others still apply.
	l := p + "l"
	var wrong *redis.IntCmd
	_, err = r.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.RPush(ctx, l, "a", "b")
		wrong = pipe.Incr(ctx, l)
		pipe.LPop(ctx, l)
		return nil
	})
	checkErr(t, "EXEC with a failing command", err, "WRONGTYPE")
	checkErr(t, "INCR of a list in MULTI", wrong.Err(), "WRONGTYPE")
	items, err := r.LRange(ctx, l, 0, -1).Result()
	check(t, "the list after the transaction", items, err, []string{"b"})
}

func TestTxPipelinedOnSeveralKeysIsRefused(t *testing.T) {
	onlyUnder(t, "rmw", "the log engine runs a transaction over several keys as one atomic step (TestTxPipelinedOnSeveralKeysIsAtomic)")
	ctx := context.Background()
	r := client(t, 2)
	p := ns(t)
	_, err := r.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, p+"a", "v", 0)
		pipe.Incr(ctx, p+"b")
		return nil
	})
	// EXEC answers EXECABORT, as Redis does for a transaction it discards.
	checkErr(t, "a transaction on two keys", err, "EXECABORT Transaction discarded: its commands name several keys")
	if !strings.Contains(err.Error(), "not atomic across keys in the per-key engine") {
		t.Fatalf("the refusal says why: %v", err)
	}
	n, err := r.Exists(ctx, p+"a", p+"b").Result()
	check(t, "nothing applied", n, err, int64(0))
	pong, err := r.Ping(ctx).Result()
	check(t, "the connection goes on", pong, err, "PONG")
}

func TestTxPipelinedOnSeveralKeysIsAtomic(t *testing.T) {
	onlyUnder(t, "multipaxos", "the per-key engine refuses a transaction over several keys (TestTxPipelinedOnSeveralKeysIsRefused)")
	ctx := context.Background()
	r := client(t, 2)
	p := ns(t)
	if err := r.Set(ctx, p+"src", 10, 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	var mget *redis.SliceCmd
	_, err := r.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.DecrBy(ctx, p+"src", 4)
		pipe.IncrBy(ctx, p+"dst", 4)
		pipe.MSet(ctx, p+"x", "1", p+"y", "2")
		mget = pipe.MGet(ctx, p+"src", p+"dst", p+"x")
		return nil
	})
	if err != nil {
		t.Fatalf("a transaction on several keys: %v", err)
	}
	values, err := mget.Result()
	check(t, "MGET inside EXEC", values, err, []any{"6", "4", "1"})
}

func TestPipelines(t *testing.T) {
	ctx := context.Background()
	r := client(t, 1)
	p := ns(t)
	cmds, err := r.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := 0; i < 500; i++ {
			pipe.Incr(ctx, p+"c")
		}
		pipe.Set(ctx, p+"s", "x", 0)
		pipe.Incr(ctx, p+"s") // fails; the pipeline goes on
		pipe.HSet(ctx, p+"h", "f", "v")
		pipe.RPush(ctx, p+"l", "a")
		pipe.ZAdd(ctx, p+"z", redis.Z{Score: 1, Member: "m"})
		return nil
	})
	checkErr(t, "the pipeline's first error", err, "ERR value is not an integer")
	for i := 0; i < 500; i++ {
		check(t, "INCR in a pipeline", cmds[i].(*redis.IntCmd).Val(), cmds[i].Err(), int64(i+1))
	}
	for _, c := range cmds[len(cmds)-3:] {
		check(t, c.Name()+" after the error", c.(*redis.IntCmd).Val(), c.Err(), int64(1))
	}
}

func TestConcurrentIncrementsThroughEveryReplica(t *testing.T) {
	ctx := context.Background()
	k := ns(t) + "c"
	const each = 50
	var wg sync.WaitGroup
	errs := make(chan error, replicas)
	for i := 0; i < replicas; i++ {
		r := client(t, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				if err := r.Incr(ctx, k).Err(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, err := client(t, 0).Get(ctx, k).Int()
	check(t, "the counter", v, err, replicas*each)
}
