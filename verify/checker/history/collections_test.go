package history

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

func bulk(v string) Output           { return Output{Type: "bulk", Str: v} }
func array(items ...string) Output   { return Output{Type: "array", Array: append([]string{}, items...)} }
func items(replies ...Output) Output { return Output{Type: "items", Items: replies} }

func TestHashSemantics(t *testing.T) {
	h := step(t, State{}, intReply(2), "HSET", "h", "b", "1", "a", "2")
	h = step(t, h, intReply(0), "HSET", "h", "a", "3")
	step(t, h, bulk("3"), "HGET", "h", "a")
	step(t, h, nilReply, "HGET", "h", "zz")
	step(t, h, items(bulk("3"), nilReply), "HMGET", "h", "a", "zz")
	step(t, h, array("a", "3", "b", "1"), "HGETALL", "h")
	step(t, h, array("a", "b"), "HKEYS", "h")
	step(t, h, intReply(0), "HSETNX", "h", "a", "x")
	h = step(t, h, intReply(11), "HINCRBY", "h", "b", "10")
	step(t, h, bulk("11"), "HGET", "h", "b")
	step(t, step(t, h, okReply, "SET", "s", "x"), wrongType, "HGET", "h", "a")
	step(t, State{Kind: Hash, Str: pack([]string{"f", "x"}), Members: 1}, hashNotInt, "HINCRBY", "h", "f", "1")
	if empty := step(t, h, intReply(2), "HDEL", "h", "a", "b", "c"); empty != (State{}) {
		t.Fatalf("an emptied hash is absent, got %+v", empty)
	}
	step(t, h, wrongType, "GET", "h")
	step(t, h, wrongType, "LPUSH", "h", "x")
	step(t, h, wrongType, "ZADD", "h", "1", "x")
	step(t, h, wrongType, "SADD", "h", "x")
	step(t, h, wrongType, "INCR", "h")
}

func TestListSemantics(t *testing.T) {
	l := step(t, State{}, intReply(2), "LPUSH", "l", "a", "b") // b a
	l = step(t, l, intReply(3), "RPUSH", "l", "c")             // b a c
	step(t, l, array("b", "a", "c"), "LRANGE", "l", "0", "-1")
	step(t, l, array("a", "c"), "LRANGE", "l", "-2", "100")
	step(t, l, array(), "LRANGE", "l", "5", "9")
	step(t, l, bulk("c"), "LINDEX", "l", "-1")
	step(t, l, nilReply, "LINDEX", "l", "3")
	step(t, State{}, intReply(0), "LPUSHX", "l", "x")
	step(t, State{}, noSuchKey, "LSET", "l", "0", "x")
	step(t, l, indexOutOfRange, "LSET", "l", "3", "x")
	popped := step(t, l, bulk("c"), "RPOP", "l")
	step(t, popped, array("b", "a"), "LRANGE", "l", "0", "-1")
	step(t, l, array("b", "a"), "LPOP", "l", "2")
	step(t, State{}, nilReply, "LPOP", "l", "2")
	step(t, State{}, nilReply, "RPOP", "l")
	refuses(t, l, bulk("b"), "RPOP", "l")
	rem := step(t, step(t, State{}, intReply(5), "RPUSH", "l", "x", "y", "x", "y", "x"), intReply(2), "LREM", "l", "-2", "x")
	step(t, rem, array("x", "y", "y"), "LRANGE", "l", "0", "-1")
	step(t, step(t, l, okReply, "LTRIM", "l", "1", "1"), array("a"), "LRANGE", "l", "0", "-1")
	step(t, l, wrongType, "HGET", "l", "f")
}

func TestSortedSetSemantics(t *testing.T) {
	z := step(t, State{}, intReply(3), "ZADD", "z", "2", "b", "1", "c", "2", "a")
	step(t, z, array("c", "a", "b"), "ZRANGE", "z", "0", "-1")
	step(t, z, array("b", "2", "a", "2"), "ZRANGE", "z", "0", "1", "REV", "WITHSCORES")
	step(t, z, bulk("2"), "ZSCORE", "z", "a")
	step(t, z, items(bulk("1"), nilReply), "ZMSCORE", "z", "c", "x")
	step(t, z, intReply(2), "ZRANK", "z", "b")
	step(t, z, intReply(0), "ZREVRANK", "z", "b")
	z2 := step(t, z, bulk("-3"), "ZINCRBY", "z", "-5", "a")
	step(t, z2, array("a", "c", "b"), "ZRANGE", "z", "0", "-1")
	step(t, z, intReply(0), "ZADD", "z", "NX", "9", "a")
	step(t, z, intReply(1), "ZADD", "z", "XX", "CH", "9", "a", "9", "new")
	step(t, z, nilReply, "ZADD", "z", "GT", "INCR", "-1", "a")
	step(t, z, bulk("5"), "ZADD", "z", "GT", "INCR", "3", "a")
	step(t, z, array("c", "1"), "ZPOPMIN", "z")
	step(t, z, array("b", "2", "a", "2"), "ZPOPMAX", "z", "2")
	step(t, z, wrongType, "LLEN", "z")
	if _, err := parseOp([]string{"ZADD", "z", "1.5", "a"}, nil); err == nil {
		t.Error("a fractional score is not modelled")
	}
}

func TestTransactionSemantics(t *testing.T) {
	tx := func(queued ...[]string) *Op {
		t.Helper()
		op, err := parseTransaction([]string{"MULTI", "k"}, queued, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &op
	}
	incrExpire := tx([]string{"INCR", "k"}, []string{"EXPIRE", "k", "10"})
	next := Step(State{}, incrExpire, &Output{Type: "items", Items: []Output{intReply(1), intReply(1)}})
	if len(next) != 1 || !next[0].HasTTL || next[0].Str != "1" {
		t.Fatalf("INCR + EXPIRE: %+v", next)
	}
	// Each command sees the ones before it; an error answers in its place, the rest apply.
	h := tx([]string{"HSET", "k", "f", "1"}, []string{"LPUSH", "k", "x"}, []string{"HINCRBY", "k", "f", "2"})
	want := items(intReply(1), wrongType, intReply(3))
	if got := Step(State{}, h, &want); len(got) != 1 || got[0].Kind != Hash {
		t.Fatalf("HSET, LPUSH, HINCRBY: %+v", got)
	}
	for _, bad := range []Output{items(intReply(1), wrongType, intReply(2)), items(intReply(1), wrongType), intReply(1)} {
		if got := Step(State{}, h, &bad); len(got) != 0 {
			t.Errorf("reply %v accepted: %+v", bad, got)
		}
	}
	for _, queued := range [][][]string{nil, {{"GET", "other"}}, {{"MULTI", "k"}}, {{"EVAL", "k"}}} {
		if _, err := parseTransaction([]string{"MULTI", "k"}, queued, nil); err == nil {
			t.Errorf("%v is refused", queued)
		}
	}
}

// rec is a history line of client c on key k, from call to ret.
func rec(c int, cmd []string, out string, call, ret int64) string {
	args, _ := json.Marshal(cmd)
	return fmt.Sprintf(`{"client":%d,"key":%q,"cmd":%s,"output":%s,"call":%d,"return":%d,"outcome":"ok"}`,
		c, cmd[1], args, out, call, ret)
}

// txRec is a transaction's line: queued commands on key k and the EXEC reply's items.
func txRec(c int, k string, queued [][]string, out string, call, ret int64) string {
	q, _ := json.Marshal(queued)
	return fmt.Sprintf(`{"client":%d,"key":%q,"cmd":["MULTI",%q],"queued":%s,"output":%s,"call":%d,"return":%d,"outcome":"ok"}`,
		c, k, k, q, out, call, ret)
}

func TestCollectionMutationsAreCaught(t *testing.T) {
	const one, two = `{"type":"int","value":1}`, `{"type":"int","value":2}`
	b := func(v string) string { return fmt.Sprintf(`{"type":"bulk","value":%q}`, v) }
	arr := func(v ...string) string {
		j, _ := json.Marshal(v)
		return fmt.Sprintf(`{"type":"array","value":%s}`, j)
	}
	hset := func(c int, v string, call, ret int64) string {
		return rec(c, []string{"HSET", "h", "f", v}, `{"type":"int","value":0}`, call, ret)
	}
	first := rec(1, []string{"HSET", "h", "f", "1"}, one, 0, 10)
	cases := []struct {
		name  string
		lines []string
		want  porcupine.CheckResult
	}{
		{"a fresh hash read", []string{first, hset(1, "2", 20, 30), rec(2, []string{"HGET", "h", "f"}, b("2"), 40, 50)}, porcupine.Ok},
		{"a stale hash read", []string{first, hset(1, "2", 20, 30), rec(2, []string{"HGET", "h", "f"}, b("1"), 40, 50)}, porcupine.Illegal},
		{"a concurrent hash read may be old", []string{first, hset(1, "2", 20, 30), rec(2, []string{"HGET", "h", "f"}, b("1"), 25, 50)}, porcupine.Ok},
		{"a list that kept its elements", []string{
			rec(1, []string{"RPUSH", "l", "a"}, one, 0, 10), rec(2, []string{"RPUSH", "l", "b"}, two, 5, 15),
			rec(3, []string{"LRANGE", "l", "0", "-1"}, arr("a", "b"), 20, 30)}, porcupine.Ok},
		{"a list that lost an element", []string{
			rec(1, []string{"RPUSH", "l", "a"}, one, 0, 10), rec(2, []string{"RPUSH", "l", "b"}, two, 5, 15),
			rec(3, []string{"LRANGE", "l", "0", "-1"}, arr("b"), 20, 30)}, porcupine.Illegal},
		{"an element popped twice", []string{
			rec(1, []string{"RPUSH", "l", "a", "b"}, two, 0, 10), rec(2, []string{"LPOP", "l"}, b("a"), 20, 30),
			rec(3, []string{"LPOP", "l"}, b("a"), 20, 30)}, porcupine.Illegal},
		{"a lost sorted-set increment", []string{
			rec(1, []string{"ZINCRBY", "z", "1", "m"}, b("1"), 0, 10), rec(2, []string{"ZINCRBY", "z", "1", "m"}, b("2"), 20, 30),
			rec(3, []string{"ZSCORE", "z", "m"}, b("1"), 40, 50)}, porcupine.Illegal},
		{"a transaction seen whole", []string{
			txRec(1, "h", [][]string{{"HSET", "h", "a", "1"}, {"HSET", "h", "b", "1"}}, fmt.Sprintf(`{"type":"items","value":[%s,%s]}`, one, one), 0, 10),
			rec(2, []string{"HGETALL", "h"}, arr("a", "1", "b", "1"), 5, 15)}, porcupine.Ok},
		{"a transaction seen half-applied", []string{
			txRec(1, "h", [][]string{{"HSET", "h", "a", "1"}, {"HSET", "h", "b", "1"}}, fmt.Sprintf(`{"type":"items","value":[%s,%s]}`, one, one), 0, 10),
			rec(2, []string{"HGETALL", "h"}, arr("a", "1"), 5, 15)}, porcupine.Illegal},
	}
	for _, c := range cases {
		if got := verdict(t, c.lines...).Result; got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
}

// outputJSON is a reply in the history format.
func outputJSON(o Output) string {
	switch o.Type {
	case "int":
		return fmt.Sprintf(`{"type":"int","value":%d}`, o.Int)
	case "bulk", "error":
		v, _ := json.Marshal(o.Str)
		return fmt.Sprintf(`{"type":%q,"value":%s}`, o.Type, v)
	case "array":
		v, _ := json.Marshal(o.Array)
		return fmt.Sprintf(`{"type":"array","value":%s}`, v)
	case "items":
		texts := make([]string, len(o.Items))
		for i, item := range o.Items {
			texts[i] = outputJSON(item)
		}
		return `{"type":"items","value":[` + strings.Join(texts, ",") + `]}`
	}
	return fmt.Sprintf(`{"type":%q}`, o.Type)
}

// generateCollections builds a legal history of hash, list and sorted-set commands and
// single-key transactions, as a sequential store applies them at a random instant inside
// each operation's interval: 8 clients × 150 operations on 6 keys (two of each type, so that
// some commands meet the wrong type).
func generateCollections(seed int64) []string {
	rng := rand.New(rand.NewSource(seed))
	keys := []string{"h1", "h2", "l1", "l2", "z1", "z2"}
	// Commands mostly of the key's type (its first letter), sometimes of another.
	command := func(key string) []string {
		v := fmt.Sprint(rng.Intn(4))
		family := key[0]
		if rng.Intn(10) == 0 {
			family = "hlz"[rng.Intn(3)]
		}
		switch int(family)*4 + rng.Intn(4) {
		case 'h'*4 + 0:
			return []string{"HSET", key, "f" + v, v}
		case 'h'*4 + 1:
			return []string{"HINCRBY", key, "f" + v, fmt.Sprint(rng.Intn(5) - 2)}
		case 'h'*4 + 2:
			return []string{"HGETALL", key}
		case 'h'*4 + 3:
			return []string{"HDEL", key, "f" + v}
		case 'l'*4 + 0, 'l'*4 + 1:
			return []string{"RPUSH", key, v}
		case 'l'*4 + 2:
			return []string{"LPOP", key}
		case 'l'*4 + 3:
			return []string{"LRANGE", key, "0", "-1"}
		case 'z'*4 + 0:
			return []string{"ZINCRBY", key, fmt.Sprint(rng.Intn(7) - 3), "m" + v}
		case 'z'*4 + 1:
			return []string{"ZRANGE", key, "0", "-1", "WITHSCORES"}
		case 'z'*4 + 2:
			return []string{"ZREM", key, "m" + v}
		}
		return []string{"ZSCORE", key, "m" + v}
	}
	type pending struct {
		client    int
		key       string
		queued    [][]string
		call, ret int64
		at        int64
	}
	var ops []pending
	for c := 0; c < 8; c++ {
		now := int64(rng.Intn(50))
		for i := 0; i < 150; i++ {
			key := keys[rng.Intn(len(keys))]
			queued := [][]string{command(key)}
			if rng.Intn(5) == 0 {
				queued = append(queued, command(key), command(key))
			}
			call := now
			ret := call + 1 + int64(rng.Intn(100))
			ops = append(ops, pending{c, key, queued, call, ret, call + rng.Int63n(ret-call+1)})
			now = ret + int64(rng.Intn(20))
		}
	}
	// Apply in linearization order: by the chosen instant.
	order := rng.Perm(len(ops))
	sort.SliceStable(order, func(a, b int) bool { return ops[order[a]].at < ops[order[b]].at })
	state := map[string]State{}
	lines := make([]string, len(ops))
	for _, i := range order {
		op := ops[i]
		var replies []Output
		for _, args := range op.queued {
			out, next, _ := apply(state[op.key], args[0], args[2:])
			state[op.key] = next
			replies = append(replies, out)
		}
		if len(op.queued) == 1 {
			lines[i] = rec(op.client, op.queued[0], outputJSON(replies[0]), op.call, op.ret)
		} else {
			lines[i] = txRec(op.client, op.key, op.queued, outputJSON(items(replies...)), op.call, op.ret)
		}
	}
	return lines
}

func TestGeneratedCollectionHistoryPassesAndCorruptedOnesFail(t *testing.T) {
	lines := generateCollections(2)
	if v := verdict(t, lines...); v.Result != porcupine.Ok {
		t.Fatalf("a legal history was rejected: %+v", v)
	}
	// Each corruption changes the reply of the first line it applies to (false: not this one).
	corruptions := map[string]func(name string, out map[string]any) bool{
		"a hash read of a value nobody wrote": func(name string, out map[string]any) bool {
			if name != "HGETALL" || len(out["value"].([]any)) == 0 {
				return false
			}
			out["value"].([]any)[1] = "999"
			return true
		},
		"a list that lost an element": func(name string, out map[string]any) bool {
			if name != "LRANGE" || len(out["value"].([]any)) < 2 {
				return false
			}
			out["value"] = out["value"].([]any)[1:]
			return true
		},
		"a transaction's reply": func(name string, out map[string]any) bool {
			if name != "MULTI" {
				return false
			}
			for _, item := range out["value"].([]any) {
				if reply := item.(map[string]any); reply["type"] == "int" {
					reply["value"] = 999
					return true
				}
			}
			return false
		},
	}
	for what, corrupt := range corruptions {
		mutated := append([]string{}, lines...)
		found := false
		for i, l := range mutated {
			var r map[string]any
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			out := r["output"].(map[string]any)
			if out["type"] == "error" || !corrupt(r["cmd"].([]any)[0].(string), out) {
				continue
			}
			b, _ := json.Marshal(r)
			mutated[i], found = string(b), true
			break
		}
		if !found {
			t.Fatalf("no line to corrupt for %s", what)
		}
		if v := verdict(t, mutated...); v.Result != porcupine.Illegal {
			t.Errorf("%s passed: %+v", what, v)
		}
	}
}

func TestBadTransactionRecordsAreRefused(t *testing.T) {
	for _, line := range []string{
		`{"client":1,"key":"k","cmd":["INCR","k"],"queued":[["INCR","k"]],"call":0,"return":1,"outcome":"unknown"}`,
		`{"client":1,"key":"k","cmd":["MULTI","k"],"call":0,"return":1,"outcome":"unknown"}`,
		`{"client":1,"key":"k","cmd":["MULTI","k"],"queued":[["INCR","j"]],"call":0,"return":1,"outcome":"unknown"}`,
		`{"client":1,"key":"k","cmd":["MULTI","k"],"queued":[["INCR","k"]],"output":{"type":"items","value":[{"type":"float"}]},"call":0,"return":1,"outcome":"ok"}`,
	} {
		if _, _, err := Read(strings.NewReader(line), Clock{}); err == nil {
			t.Errorf("accepted: %s", line)
		}
	}
}
