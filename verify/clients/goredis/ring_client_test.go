package goredis

// go-redis's ClusterClient against a ring in cluster mode whose membership changes (`logless
// up --nodes 4 --replication 3 --cluster-enabled`; docs/ring.md §4 "Built: cluster mode follows
// the stages"): node 4 is removed with `logless cluster remove 4` and, once it has dropped the
// registers of the slots it left, added back through the HTTP endpoint (`POST
// /cluster/add?node=4`), while goroutines write and read through one ClusterClient. Every
// acknowledged write reads back, the client is redirected (MOVED) and follows, and afterwards
// it routes the keys of node 4's slots to node 4 again.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	ringNodes = 4
	// Keys written before the changes, read back after each.
	ringKeysBefore = 200
	// Writers during the changes, each on keys of its own.
	ringWriters       = 4
	ringKeysPerWriter = 8
)

// ringStatus is the part of a node's /status the test reads.
type ringStatus struct {
	Ring struct {
		Stage           string `json:"stage"`
		RegistersToDrop uint64 `json:"registers_to_drop"`
	} `json:"ring"`
}

func nodeRingStatus(t *testing.T, c *cluster, i int) ringStatus {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + c.httpAddr(i) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s ringStatus
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("node %d's /status: %v", i+1, err)
	}
	return s
}

// waitRing waits (20 s at most) until every node has installed `stage` and node `drained`
// (0-based; -1 for none) holds no register of slots it does not replicate.
func waitRing(t *testing.T, c *cluster, stage string, drained int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var seen []string
		ready := true
		for i := 0; i < ringNodes; i++ {
			s := nodeRingStatus(t, c, i)
			seen = append(seen, fmt.Sprintf("%s/%d", s.Ring.Stage, s.Ring.RegistersToDrop))
			ready = ready && s.Ring.Stage == stage && (i != drained || s.Ring.RegistersToDrop == 0)
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes' stages and registers to drop %v, waiting for %s", seen, stage)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ringWriter writes and reads its own keys in a loop through the ClusterClient.
type ringWriter struct {
	keys    []string
	acked   map[string]int   // each key's last acknowledged value
	unknown map[string][]int // values written since, whose SET failed (outcome unknown)
	ops     *atomic.Int64    // commands answered, of every writer
	log     *redirections
	errors  []string
}

func (w *ringWriter) run(ctx context.Context, rc *redis.ClusterClient, stop *atomic.Bool) {
	for n := 0; !stop.Load(); n++ {
		key := w.keys[n%len(w.keys)]
		if err := rc.Set(ctx, key, n, 0).Err(); err != nil {
			w.errors = append(w.errors, fmt.Sprintf("SET %s %d at %s: %v; the last MOVEDs:\n%s",
				key, n, time.Now().Format("15:04:05.000"), err, w.log))
			w.unknown[key] = append(w.unknown[key], n)
			continue
		}
		w.acked[key], w.unknown[key] = n, nil
		// Read your write: the SET was acknowledged, so every read after it sees it.
		got, err := rc.Get(ctx, key).Int()
		if err != nil {
			w.errors = append(w.errors, fmt.Sprintf("GET %s at %s: %v; the last MOVEDs:\n%s",
				key, time.Now().Format("15:04:05.000"), err, w.log))
		} else if got != n {
			w.errors = append(w.errors, fmt.Sprintf("GET %s after SET %d: %d", key, n, got))
		}
		w.ops.Add(2)
	}
}

// check reads each key back: its last acknowledged value, or a later write whose outcome was
// unknown.
func (w *ringWriter) check(t *testing.T, ctx context.Context, rc *redis.ClusterClient) {
	t.Helper()
	for _, key := range w.keys {
		want, ok := w.acked[key]
		got, err := rc.Get(ctx, key).Int()
		if err == redis.Nil && !ok {
			continue
		}
		if err != nil {
			t.Errorf("GET %s: %v (acknowledged %d)", key, err, want)
			continue
		}
		allowed := append([]int{want}, w.unknown[key]...)
		found := false
		for _, v := range allowed {
			found = found || v == got
		}
		if !found {
			t.Errorf("GET %s: %d, want one of %v (last acknowledged first)", key, got, allowed)
		}
	}
}

// movedHook counts the MOVED errors the nodes' clients receive (the ClusterClient follows
// them without returning them) and keeps the last ones, to show when a command fails.
type movedHook struct {
	moved *atomic.Int64
	addr  string
	log   *redirections
}

// redirections are the last MOVED answers, with the node that gave them.
type redirections struct {
	mu   sync.Mutex
	last []string
}

func (r *redirections) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = append(r.last, line)
	if len(r.last) > 40 {
		r.last = r.last[len(r.last)-40:]
	}
}

func (r *redirections) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.last, "\n")
}

func (h movedHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h movedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "MOVED ") {
			h.moved.Add(1)
			h.log.add(fmt.Sprintf("%s %v from %s: %v",
				time.Now().Format("15:04:05.000"), cmd.Args(), h.addr, err))
		}
		return err
	}
}
func (h movedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// firstReplicas is the first replica's address of each slot, from CLUSTER SLOTS.
func firstReplicas(t *testing.T, ctx context.Context, node *redis.Client) map[int]string {
	t.Helper()
	slots, err := node.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	first := map[int]string{}
	for _, s := range slots {
		for slot := s.Start; slot <= s.End; slot++ {
			first[slot] = s.Nodes[0].Addr
		}
	}
	if len(first) != 16384 {
		t.Fatalf("CLUSTER SLOTS covers %d slots", len(first))
	}
	return first
}

func TestClusterClientAcrossRingChanges(t *testing.T) {
	onlyUnder(t, "rmw", "a ring is the rmw engine's")
	start := time.Now()
	ctx := context.Background()
	c := ownCluster(t, "logless-goredis-ring-", ringNodes, "--replication", "3", "--cluster-enabled")
	fourth := c.addresses[3]
	var moved atomic.Int64
	var log redirections
	rc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       []string{c.addresses[1]},
		ReadTimeout: 20 * time.Second,
		NewClient: func(opt *redis.Options) *redis.Client {
			node := redis.NewClient(opt)
			node.AddHook(movedHook{&moved, opt.Addr, &log})
			return node
		},
	})
	t.Cleanup(func() { rc.Close() })
	t.Logf("nodes 1-4 at %v", c.addresses)
	first := redis.NewClient(&redis.Options{Addr: c.addresses[0]})
	t.Cleanup(func() { first.Close() })

	p := ns(t)
	before := make([]string, ringKeysBefore)
	for i := range before {
		before[i] = fmt.Sprintf("%sbefore:%d", p, i)
		check(t, "SET before the changes", rc.Set(ctx, before[i], i, 0).Val(), nil, "OK")
	}
	checkBefore := func(when string) {
		for i, key := range before {
			v, err := rc.Get(ctx, key).Int()
			if err != nil || v != i {
				t.Fatalf("%s: GET %s: %d, %v, want %d", when, key, v, err, i)
			}
		}
	}

	writers := make([]*ringWriter, ringWriters)
	var ops atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range writers {
		w := &ringWriter{acked: map[string]int{}, unknown: map[string][]int{}, ops: &ops, log: &log}
		for k := 0; k < ringKeysPerWriter; k++ {
			w.keys = append(w.keys, fmt.Sprintf("%sw%d:%d", p, g, k))
		}
		writers[g] = w
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx, rc, &stop) }()
	}
	stopWriters := func() {
		if !stop.Swap(true) {
			wg.Wait()
		}
	}
	t.Cleanup(stopWriters)
	time.Sleep(200 * time.Millisecond)

	// Node 4 removed by the CLI.
	out, err := exec.Command(bin, "cluster", "--http", c.httpAddr(0), "remove", "4").CombinedOutput()
	if err != nil {
		t.Fatalf("logless cluster remove 4: %v\n%s", err, out)
	}
	waitRing(t, c, "Stable(2)", 3)
	movedAtRemove := moved.Load()
	checkBefore("after the removal")
	for _, addr := range firstReplicas(t, ctx, first) {
		if addr == fourth {
			t.Fatalf("node 4 (%s) is still a first replica after its removal", fourth)
		}
	}
	if moved.Load() == 0 {
		t.Fatalf("no MOVED after the removal: the client's map named node 4 for some slots")
	}
	opsAtRemove := ops.Load()

	// Node 4 added back through the HTTP endpoint.
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Post(
		"http://"+c.httpAddr(1)+"/cluster/add?node=4", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /cluster/add?node=4: %d %s", resp.StatusCode, body)
	}
	waitRing(t, c, "Stable(3)", -1)
	time.Sleep(300 * time.Millisecond)
	stopWriters()
	checkBefore("after node 4 was added back")
	if ops.Load() <= opsAtRemove {
		t.Errorf("no command ran between the two changes")
	}
	if moved.Load() <= movedAtRemove {
		t.Errorf("no MOVED after node 4 was added back")
	}

	// Every acknowledged write reads back; no command failed (a redirection loop would: a
	// node new to a slot once forwarded it by the old configuration in the joint stage, and an
	// old replica already in the next stage sent it back with MOVED to that node; docs/ring.md
	// §4, "A node new to a slot runs its commands in the joint stage").
	var errs []string
	for _, w := range writers {
		w.check(t, ctx, rc)
		errs = append(errs, w.errors...)
	}
	if len(errs) > 0 {
		t.Errorf("%d commands failed across the changes, the first: %v", len(errs), errs[:min(len(errs), 10)])
	}

	// The client routes the keys of node 4's slots to node 4 again.
	final := firstReplicas(t, ctx, first)
	toFourth := 0
	for _, key := range before {
		master, err := rc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		slot := int(rc.ClusterKeySlot(ctx, key).Val())
		if master.Options().Addr != final[slot] {
			t.Fatalf("the client sends %s (slot %d) to %s, its first replica is %s",
				key, slot, master.Options().Addr, final[slot])
		}
		if final[slot] == fourth {
			toFourth++
		}
	}
	if toFourth == 0 {
		t.Fatalf("none of %d keys is on node 4 again", len(before))
	}
	t.Logf("%d commands across two changes, %d MOVED followed, %d keys routed to node 4; %.1f s",
		ops.Load(), moved.Load(), toFourth, time.Since(start).Seconds())
}
