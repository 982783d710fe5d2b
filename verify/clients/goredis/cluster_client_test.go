package goredis

// go-redis's ClusterClient against a cluster of its own started with `logless up
// --cluster-enabled` (Redis Cluster in the node): the client learns the slots from CLUSTER
// SLOTS and sends each key to its slot's first replica; keys of several slots are refused
// with CROSSSLOT, and hash tags keep keys on one slot.

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterMode starts a cluster-enabled cluster for t, stopped when t ends, and returns its
// replicas' client addresses.
func clusterMode(t *testing.T) []string {
	t.Helper()
	return ownCluster(t, "logless-goredis-cluster-", replicas, "--cluster-enabled").addresses
}

// ownCluster starts a cluster of `nodes` nodes (`logless up` with `extra` flags) for t alone,
// stopped when t ends; its data directory is kept if t failed.
func ownCluster(t *testing.T, prefix string, nodes int, extra ...string) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	c, err := startNodesIn(dir, nodes, extra...)
	if err != nil {
		t.Fatalf("cannot start `logless up %v`: %v", extra, err)
	}
	t.Cleanup(func() {
		clean := c.stop()
		if !clean {
			t.Errorf("`logless up %v` did not stop cleanly on SIGTERM", extra)
		}
		if clean && !t.Failed() && os.Getenv("LOGLESS_CLIENT_KEEP") == "" {
			os.RemoveAll(dir)
		} else {
			t.Logf("data directory kept: %s", dir)
		}
	})
	return c
}

func TestClusterClient(t *testing.T) {
	onlyUnder(t, "rmw", "one cluster-enabled cluster is enough: the routing is the node's, not the engine's")
	ctx := context.Background()
	addrs := clusterMode(t)
	// Started from one node, as an application is: the client learns the others.
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addrs[1]}, ReadTimeout: 20 * time.Second})
	t.Cleanup(func() { rc.Close() })

	t.Run("slots", func(t *testing.T) {
		slots, err := rc.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		next, firsts := 0, map[string]bool{}
		for _, s := range slots {
			if s.Start != next || len(s.Nodes) != 3 {
				t.Fatalf("slot range %+v after %d", s, next)
			}
			next = s.End + 1
			firsts[s.Nodes[0].Addr] = true
		}
		if next != 16384 || len(firsts) != 3 {
			t.Fatalf("slots end at %d, first replicas %v", next, firsts)
		}
		var masters []string
		var mu sync.Mutex
		err = rc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			masters = append(masters, c.Options().Addr)
			return c.Ping(ctx).Err()
		})
		sort.Strings(masters)
		want := append([]string(nil), addrs...)
		sort.Strings(want)
		check(t, "every replica is a master of some slots", masters, err, want)
	})

	t.Run("keys across slots", func(t *testing.T) {
		p := ns(t)
		for i := 0; i < 60; i++ {
			check(t, "SET", rc.Set(ctx, fmt.Sprintf("%s%d", p, i), i, 0).Val(), nil, "OK")
		}
		for i := 0; i < 60; i++ {
			v, err := rc.Get(ctx, fmt.Sprintf("%s%d", p, i)).Result()
			check(t, "GET", v, err, fmt.Sprint(i))
		}
		cmds, err := rc.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := 0; i < 60; i++ {
				pipe.Incr(ctx, fmt.Sprintf("%s%d", p, i))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			check(t, "INCR in a pipeline", cmd.(*redis.IntCmd).Val(), cmd.Err(), int64(i+1))
		}
		// MGET of keys of several slots, sent as it is: the node refuses it.
		err = rc.Do(ctx, "MGET", p+"0", p+"1").Err()
		checkErr(t, "MGET across slots", err, "CROSSSLOT")
	})

	t.Run("hash tags", func(t *testing.T) {
		tag := "{" + ns(t) + "user}"
		check(t, "SET", rc.Set(ctx, tag+".name", "ada", 0).Val(), nil, "OK")
		check(t, "SET", rc.Set(ctx, tag+".mail", "ada@example.org", 0).Val(), nil, "OK")
		v, err := rc.MGet(ctx, tag+".name", tag+".mail").Result()
		check(t, "MGET of one tag", v, err, []any{"ada", "ada@example.org"})
		// A transaction on one key of the slot runs as one register command.
		cmds, err := rc.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Incr(ctx, tag+".visits")
			pipe.Expire(ctx, tag+".visits", time.Minute)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		check(t, "INCR in EXEC", cmds[0].(*redis.IntCmd).Val(), cmds[0].Err(), int64(1))
		check(t, "EXPIRE in EXEC", cmds[1].(*redis.BoolCmd).Val(), cmds[1].Err(), true)
	})

	t.Run("reads from replicas", func(t *testing.T) {
		reader := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: append([]string(nil), addrs...), ReadOnly: true, RouteRandomly: true,
		})
		defer reader.Close()
		p := ns(t)
		for i := 0; i < 20; i++ {
			rc.Set(ctx, fmt.Sprintf("%s%d", p, i), i, 0)
		}
		for i := 0; i < 20; i++ {
			v, err := reader.Get(ctx, fmt.Sprintf("%s%d", p, i)).Result()
			check(t, "GET through any replica", v, err, fmt.Sprint(i))
		}
	})
}
