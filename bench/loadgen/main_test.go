package main

import (
	"context"
	"errors"
	"math/rand"
	"sort"
	"testing"
)

func TestParseArgs(t *testing.T) {
	c, err := parseArgs([]string{"-system", "etcd", "-endpoints", "a:1, b:2,", "-workload", "counter",
		"-clients", "8", "-duration", "2s", "-write-frac", "1", "-pin", "leader", "-out", "r.json"})
	if err != nil {
		t.Fatal(err)
	}
	if c.System != "etcd" || len(c.Endpoints) != 2 || c.Endpoints[1] != "b:2" || c.Clients != 8 ||
		c.Duration.Seconds() != 2 || c.WriteFrac != 1 || c.Pin != "leader" || c.Out != "r.json" {
		t.Fatalf("unexpected config %+v", c)
	}
	for _, bad := range [][]string{
		{"-system", "mysql"},
		{"-workload", "scan"},
		{"-clients", "0"},
		{"-dist", "zipf"},
		{"-write-frac", "1.5"},
		{"-pin", "2"},
		{"-pareto-alpha", "1"},
		{"-system", "etcd", "-pipeline", "4"},
		{"-endpoints", ","},
		{"extra"},
	} {
		if _, err := parseArgs(bad); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
}

// The Pareto keys with alpha 1.16 put about 80% of requests on 20% of the keys.
func TestParetoIsEightyTwenty(t *testing.T) {
	const keys, draws = 10000, 200000
	g := NewKeyGen(keys, "pareto", 1.16)
	r := rand.New(rand.NewSource(1))
	counts := make([]int, keys)
	for i := 0; i < draws; i++ {
		k := g.Next(r)
		if k < 0 || k >= keys {
			t.Fatalf("key %d out of range", k)
		}
		counts[k]++
	}
	sort.Sort(sort.Reverse(sort.IntSlice(counts)))
	top := 0
	for _, c := range counts[:keys/5] {
		top += c
	}
	share := float64(top) / draws
	if share < 0.77 || share > 0.83 {
		t.Fatalf("the top 20%% of keys got %.2f of the requests", share)
	}
	u := NewKeyGen(keys, "uniform", 1.16)
	if k := u.Next(r); k < 0 || k >= keys {
		t.Fatalf("uniform key %d out of range", k)
	}
	if k := NewKeyGen(1, "pareto", 1.16).Next(r); k != 0 {
		t.Fatalf("one key: got %d", k)
	}
}

func TestWorkloadOps(t *testing.T) {
	c, _ := parseArgs([]string{"-workload", "readers", "-key-prefix", "x:"})
	w := &Workload{cfg: c, keyGen: NewKeyGen(c.Keys, c.Dist, c.Alpha)}
	r := rand.New(rand.NewSource(1))
	if op := w.Next(0, r, "v"); op.Kind != Write || op.Key != "x:register" {
		t.Fatalf("the readers workload's client 0 must write: %+v", op)
	}
	if op := w.Next(3, r, "v"); op.Kind != Read {
		t.Fatalf("the other clients read: %+v", op)
	}
	c.Workload, c.WriteFrac = "counter", 1
	if op := w.Next(3, r, "v"); op.Kind != Incr || op.Key != "x:counter" {
		t.Fatalf("counter with write-frac 1 increments: %+v", op)
	}
}

func TestErrorKinds(t *testing.T) {
	for msg, want := range map[string]string{
		"TRYAGAIN the register is busy":                     "TRYAGAIN",
		"UNCERTAIN timed out after proposing":               "UNCERTAIN",
		"dial tcp 127.0.0.1:1: connect: connection refused": "connection refused",
		"read tcp: i/o timeout":                             "timeout",
		"EOF":                                               "connection lost",
	} {
		if got := errorKind(errors.New(msg)); got != want {
			t.Errorf("%q: got %q, want %q", msg, got, want)
		}
	}
}

// The multi-key workloads: MSETs of 2..10 keys, transfers between two different counters.
func TestMultiKeyOps(t *testing.T) {
	for _, wl := range []string{"mset", "transfers"} {
		if _, err := parseArgs([]string{"-workload", wl}); err != nil {
			t.Fatalf("%s: %v", wl, err)
		}
	}
	cfg := &Config{Workload: "mset", Keys: 5, Prefix: "p:", Dist: "uniform"}
	w := &Workload{cfg: cfg, keyGen: NewKeyGen(cfg.Keys, cfg.Dist, 1.16)}
	r := rand.New(rand.NewSource(1))
	sizes := map[int]bool{}
	for i := 0; i < 1000; i++ {
		op := w.Next(0, r, "v")
		if op.Kind != MSet || len(op.Keys) < msetMinKeys || len(op.Keys) > cfg.Keys {
			t.Fatalf("not an MSET of 2..5 keys: %+v", op)
		}
		distinct := map[string]bool{}
		for _, k := range op.Keys {
			distinct[k] = true
		}
		if len(distinct) != len(op.Keys) {
			t.Fatalf("an MSET names a key twice: %v", op.Keys)
		}
		sizes[len(op.Keys)] = true
	}
	if len(sizes) != cfg.Keys-msetMinKeys+1 {
		t.Fatalf("MSET sizes drawn: %v", sizes)
	}
	cfg.Workload = "transfers"
	for i := 0; i < 1000; i++ {
		op := w.Next(0, r, "v")
		if op.Kind != Transfer || op.Key == op.To || op.Amount < 1 || op.Amount > maxTransfer {
			t.Fatalf("not a transfer between two counters: %+v", op)
		}
	}
	if n, err := parseCounter("k", nil, false); n != 0 || err != nil {
		t.Fatalf("an absent counter is %d, %v", n, err)
	}
	if _, err := parseCounter("k", []byte("x"), true); err == nil {
		t.Fatal("a counter holding x was read")
	}
}

// counterStore is an in-memory store of counters, for checkTotal.
type counterStore struct{ m map[string]int64 }

func (s *counterStore) Do(context.Context, []Op) (int, error) { return 0, nil }
func (s *counterStore) Transport(error) bool                  { return false }
func (s *counterStore) Close()                                {}
func (s *counterStore) Sum(_ context.Context, keys []string) (int64, error) {
	var total int64
	for _, k := range keys {
		total += s.m[k]
	}
	return total, nil
}

type counterDialer struct{ s *counterStore }

func (d counterDialer) Dial(int, string) (Store, error)        { return d.s, nil }
func (d counterDialer) Leader(context.Context) (string, error) { return "", nil }
func (d counterDialer) Close()                                 {}

// The transfers' total is read back over every counter; a changed one is reported.
func TestCheckTotal(t *testing.T) {
	cfg := &Config{Keys: 2500, Prefix: "t:", Endpoints: []string{"x"}}
	s := &counterStore{m: map[string]int64{accountKey(cfg, 0): -5, accountKey(cfg, 2499): 5}}
	if tc := checkTotal(cfg, counterDialer{s}); !tc.OK || tc.Total != 0 || tc.Error != "" {
		t.Fatalf("a constant total was not seen: %+v", tc)
	}
	s.m[accountKey(cfg, 1700)] = 3 // half a transfer
	if tc := checkTotal(cfg, counterDialer{s}); tc.OK || tc.Total != 3 {
		t.Fatalf("a changed total was not seen: %+v", tc)
	}
}
