package history

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func step(t *testing.T, s State, args ...string) (Output, State) {
	t.Helper()
	out, next, err := Apply(s, args)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return out, next
}

func expect(t *testing.T, got, want Output) {
	t.Helper()
	if !Same(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestCommandSemantics(t *testing.T) {
	s := State{}
	out, s := step(t, s, "INCR", "k")
	expect(t, out, intReply(1))
	out, s = step(t, s, "INCRBY", "k", "5")
	expect(t, out, intReply(6))
	out, _ = step(t, s, "GET", "k")
	expect(t, out, Output{Type: "bulk", Str: "6"})
	out, _ = step(t, s, "SET", "k", "x", "NX")
	expect(t, out, nilReply)
	out, s2 := step(t, s, "SET", "k", "x", "IFEQ", "6", "GET")
	expect(t, out, Output{Type: "bulk", Str: "6"})
	out, _ = step(t, s2, "INCR", "k")
	expect(t, out, notInt)
	out, _ = step(t, s, "SADD", "k", "a")
	expect(t, out, wrongType)
	out, _ = step(t, State{}, "SET", "k", "v", "IFEQ", "v")
	expect(t, out, nilReply)
	out, _ = step(t, State{}, "SET", "k", "v", "IFNE", "w")
	expect(t, out, okReply)
	out, _ = step(t, State{Kind: String, Str: "9223372036854775807"}, "INCR", "k")
	expect(t, out, overflow)

	out, set := step(t, State{}, "SADD", "s", "b", "a", "a")
	expect(t, out, intReply(2))
	out, _ = step(t, set, "SMEMBERS", "s")
	expect(t, out, Output{Type: "array", Array: []string{"a", "b"}})
	out, empty := step(t, set, "SREM", "s", "a", "b")
	expect(t, out, intReply(2))
	if empty != (State{}) {
		t.Fatalf("an emptied set is absent, got %+v", empty)
	}
	out, _ = step(t, set, "DELEX", "s", "IFEQ", "a")
	expect(t, out, wrongType)
	out, _ = step(t, State{Kind: String, Str: "v"}, "DELEX", "k", "IFEQ", "v")
	expect(t, out, intReply(1))

	out, l := step(t, State{}, "LOCK.ACQUIRE", "l", "alice", "1000")
	expect(t, out, intReply(1))
	out, _ = step(t, l, "LOCK.ACQUIRE", "l", "bob", "1000")
	expect(t, out, nilReply)
	out, l = step(t, l, "LOCK.RELEASE", "l", "alice")
	expect(t, out, intReply(1))
	out, l = step(t, l, "LOCK.ACQUIRE", "l", "bob", "1000")
	expect(t, out, intReply(2))
	// The token belongs to the key: deleting or overwriting it does not restart the tokens.
	out, gone := step(t, l, "DEL", "l")
	expect(t, out, intReply(1))
	out, _ = step(t, gone, "LOCK.ACQUIRE", "l", "carol", "1000")
	expect(t, out, intReply(3))
	_, str := step(t, gone, "SET", "l", "v")
	_, str = step(t, str, "DEL", "l")
	out, _ = step(t, str, "LOCK.ACQUIRE", "l", "dave", "1000")
	expect(t, out, intReply(3))
}

func TestUnmodelledCommandsAreRejected(t *testing.T) {
	if _, _, err := Apply(State{}, []string{"EXPIRE", "k", "10"}); err == nil {
		t.Fatal("EXPIRE is not modelled")
	}
	if _, _, err := Apply(State{}, []string{"SET", "k", "v", "PX", "10"}); err == nil {
		t.Fatal("SET PX is not modelled")
	}
}

func parse(t *testing.T, lines ...string) []porcupine.Operation {
	t.Helper()
	ops, _, err := Read(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func verdict(t *testing.T, lines ...string) Verdict {
	t.Helper()
	v, err := Check(parse(t, lines...), 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHistories(t *testing.T) {
	incr := func(client int, call, ret int64, v int) string {
		return fmt.Sprintf(`{"client":%d,"key":"k","cmd":["INCR","k"],"output":{"type":"int","value":%d},"call":%d,"return":%d,"outcome":"ok"}`, client, v, call, ret)
	}
	get := func(call, ret int64, v string) string {
		return fmt.Sprintf(`{"client":9,"key":"k","cmd":["GET","k"],"output":{"type":"bulk","value":%q},"call":%d,"return":%d,"outcome":"ok"}`, v, call, ret)
	}
	unknownIncr := `{"client":3,"key":"k","cmd":["INCR","k"],"call":0,"return":0,"outcome":"unknown"}`
	cases := []struct {
		name  string
		lines []string
		want  porcupine.CheckResult
	}{
		{"sequential", []string{incr(1, 0, 10, 1), incr(2, 20, 30, 2), get(40, 50, "2")}, porcupine.Ok},
		{"concurrent increments both returning 1", []string{incr(1, 0, 10, 1), incr(2, 5, 15, 1)}, porcupine.Illegal},
		{"a read of a value nobody wrote", []string{incr(1, 0, 10, 1), get(20, 30, "5")}, porcupine.Illegal},
		{"unknown increment applied", []string{unknownIncr, get(20, 30, "1")}, porcupine.Ok},
		{"unknown increment never applied", []string{unknownIncr, incr(1, 20, 30, 1)}, porcupine.Ok},
		{"a failed command never happened", []string{
			`{"client":3,"key":"k","cmd":["INCR","k"],"call":0,"return":5,"outcome":"fail"}`, incr(1, 20, 30, 1)}, porcupine.Ok},
		{"a lost acknowledged SADD", []string{
			`{"client":1,"key":"s","cmd":["SADD","s","a"],"output":{"type":"int","value":1},"call":0,"return":10,"outcome":"ok"}`,
			`{"client":2,"key":"s","cmd":["SCARD","s"],"output":{"type":"int","value":0},"call":20,"return":30,"outcome":"ok"}`}, porcupine.Illegal},
	}
	for _, c := range cases {
		if got := verdict(t, c.lines...).Result; got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	late := `{"client":3,"key":"k","cmd":["INCR","k"],"call":100,"return":0,"outcome":"unknown"}`
	if got := verdict(t, get(0, 10, "1"), late).Result; got != porcupine.Illegal {
		t.Errorf("an unknown write cannot explain a read before its call: got %s", got)
	}
}

func TestOneBadKeyAmongManyIsNamed(t *testing.T) {
	var lines []string
	for k := 0; k < 20; k++ {
		lines = append(lines, fmt.Sprintf(`{"client":1,"key":"k%d","cmd":["INCR","k%d"],"output":{"type":"int","value":1},"call":0,"return":10,"outcome":"ok"}`, k, k))
	}
	lines = append(lines, `{"client":2,"key":"k7","cmd":["GET","k7"],"output":{"type":"nil"},"call":20,"return":30,"outcome":"ok"}`)
	v := verdict(t, lines...)
	if v.Result != porcupine.Illegal || len(v.BadKeys) != 1 || v.BadKeys[0] != "k7" {
		t.Fatalf("got %+v", v)
	}
}

// generate builds a legal history: a sequential store applies each operation at a random
// instant inside its [call, return] interval, for 10 clients × 200 operations on 5 keys.
func generate(seed int64) []string {
	rng := rand.New(rand.NewSource(seed))
	type pending struct {
		client    int
		args      []string
		call, ret int64
		at        int64
	}
	var ops []pending
	for c := 0; c < 10; c++ {
		now := int64(rng.Intn(50))
		for i := 0; i < 200; i++ {
			key := fmt.Sprintf("k%d", rng.Intn(5))
			var args []string
			switch rng.Intn(4) {
			case 0, 1:
				args = []string{"INCR", key}
			case 2:
				args = []string{"GET", key}
			default:
				args = []string{"INCRBY", key, fmt.Sprint(rng.Intn(5) - 2)}
			}
			call := now
			ret := call + 1 + int64(rng.Intn(100))
			at := call + int64(rng.Int63n(ret-call+1))
			ops = append(ops, pending{c, args, call, ret, at})
			now = ret + int64(rng.Intn(20))
		}
	}
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	// Apply in linearization order (by the chosen instant, ties broken by index).
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && (ops[order[j]].at < ops[order[j-1]].at); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	state := map[string]State{}
	lines := make([]string, len(ops))
	for _, i := range order {
		op := ops[i]
		out, next, _ := Apply(state[op.args[1]], op.args)
		state[op.args[1]] = next
		var output string
		switch out.Type {
		case "int":
			output = fmt.Sprintf(`{"type":"int","value":%d}`, out.Int)
		case "bulk":
			output = fmt.Sprintf(`{"type":"bulk","value":%q}`, out.Str)
		default:
			output = fmt.Sprintf(`{"type":%q}`, out.Type)
		}
		cmd, _ := json.Marshal(op.args)
		lines[i] = fmt.Sprintf(`{"client":%d,"key":%q,"cmd":%s,"output":%s,"call":%d,"return":%d,"outcome":"ok"}`,
			op.client, op.args[1], cmd, output, op.call, op.ret)
	}
	return lines
}

func TestGeneratedLegalHistoryPassesAndACorruptedOneFails(t *testing.T) {
	lines := generate(1)
	if v := verdict(t, lines...); v.Result != porcupine.Ok {
		t.Fatalf("a legal history was rejected: %+v", v)
	}
	// Corrupt one acknowledged INCR's reply: the checker must be able to fail.
	for i, l := range lines {
		if strings.Contains(l, `"INCR"`) && strings.Contains(l, `"type":"int"`) {
			lines[i] = strings.Replace(l, `"value":`, `"value":1000`, 1)
			break
		}
	}
	if v := verdict(t, lines...); v.Result != porcupine.Illegal {
		t.Fatalf("a corrupted history passed: %+v", v)
	}
}
