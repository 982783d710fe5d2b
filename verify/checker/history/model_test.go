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

// at is op with its stamp at exactly `stampMs` ms and a horizon of `horizonMs`.
func at(t *testing.T, stampMs, horizonMs int64, args ...string) *Op {
	t.Helper()
	epoch := int64(0)
	op, err := parseOp(args, &epoch)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	op.Stamp, op.Horizon = Window{stampMs * ms, stampMs * ms}, horizonMs*ms
	return &op
}

// step runs args at stamp 0 on s, requires the reply `want` and returns the only next state.
func step(t *testing.T, s State, want Output, args ...string) State {
	t.Helper()
	next := Step(s, at(t, 0, 0, args...), &want)
	if len(next) != 1 {
		t.Fatalf("%v -> %v on %+v: %d next states %+v", args, want, s, len(next), next)
	}
	return next[0]
}

// refuses checks that s cannot answer args with `bad` (at stamp 0).
func refuses(t *testing.T, s State, bad Output, args ...string) {
	t.Helper()
	if next := Step(s, at(t, 0, 0, args...), &bad); len(next) != 0 {
		t.Fatalf("%v -> %v on %+v was accepted: %+v", args, bad, s, next)
	}
}

func TestCommandSemantics(t *testing.T) {
	s := State{}
	s = step(t, s, intReply(1), "INCR", "k")
	s = step(t, s, intReply(6), "INCRBY", "k", "5")
	step(t, s, Output{Type: "bulk", Str: "6"}, "GET", "k")
	refuses(t, s, Output{Type: "bulk", Str: "5"}, "GET", "k")
	step(t, s, nilReply, "SET", "k", "x", "NX")
	s2 := step(t, s, Output{Type: "bulk", Str: "6"}, "SET", "k", "x", "IFEQ", "6", "GET")
	step(t, s2, notInt, "INCR", "k")
	step(t, s, wrongType, "SADD", "k", "a")
	step(t, State{}, nilReply, "SET", "k", "v", "IFEQ", "v")
	step(t, State{}, okReply, "SET", "k", "v", "IFNE", "w")
	step(t, State{Kind: String, Str: "9223372036854775807"}, overflow, "INCR", "k")

	set := step(t, State{}, intReply(2), "SADD", "s", "b", "a", "a")
	step(t, set, Output{Type: "array", Array: []string{"a", "b"}}, "SMEMBERS", "s")
	empty := step(t, set, intReply(2), "SREM", "s", "a", "b")
	if empty != (State{}) {
		t.Fatalf("an emptied set is absent, got %+v", empty)
	}
	step(t, set, wrongType, "DELEX", "s", "IFEQ", "a")
	step(t, State{Kind: String, Str: "v"}, intReply(1), "DELEX", "k", "IFEQ", "v")

	// Leases of 1 s with every stamp at 0 never run out.
	l := step(t, State{}, intReply(1), "LOCK.ACQUIRE", "l", "alice", "1000")
	step(t, l, nilReply, "LOCK.ACQUIRE", "l", "bob", "1000")
	refuses(t, l, intReply(2), "LOCK.ACQUIRE", "l", "bob", "1000")
	step(t, l, intReply(1), "LOCK.ACQUIRE", "l", "alice", "1000")
	l = step(t, l, intReply(1), "LOCK.RELEASE", "l", "alice")
	l = step(t, l, intReply(2), "LOCK.ACQUIRE", "l", "bob", "1000")
	// The token belongs to the key: deleting or overwriting it does not restart the tokens.
	gone := step(t, l, intReply(1), "DEL", "l")
	step(t, gone, intReply(3), "LOCK.ACQUIRE", "l", "carol", "1000")
	str := step(t, gone, okReply, "SET", "l", "v")
	str = step(t, str, intReply(1), "DEL", "l")
	step(t, str, intReply(3), "LOCK.ACQUIRE", "l", "dave", "1000")
}

func TestUnmodelledCommandsAreRejected(t *testing.T) {
	epoch := int64(0)
	for _, args := range [][]string{
		{"EVAL", "k"},
		{"EXPIRE", "k", "10", "GT"},
		{"PEXPIREAT", "k", "10"},
		{"SET", "k", "v", "PX", "0"},
		{"SET", "k", "v", "EX", "x"},
		{"LOCK.ACQUIRE", "k", "o", "0"},
	} {
		if _, err := parseOp(args, &epoch); err == nil {
			t.Errorf("%v is not modelled", args)
		}
	}
	if _, err := parseOp([]string{"SET", "k", "v", "PXAT", "10"}, nil); err == nil {
		t.Error("PXAT needs an epoch")
	}
}

func parse(t *testing.T, lines ...string) []porcupine.Operation {
	t.Helper()
	ops, _, err := Read(strings.NewReader(strings.Join(lines, "\n")), Clock{})
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
		out, next, _ := apply(state[op.args[1]], op.args[0], op.args[2:])
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

// ttlRec is a history line on key k with times in ms; out is the output's JSON, "" for an
// unknown outcome; extra is appended inside the object (e.g. `,"skew_ms":10`).
func ttlRec(client int, cmd []string, out string, callMs, retMs int64, extra string) string {
	args, _ := json.Marshal(cmd)
	if out == "" {
		return fmt.Sprintf(`{"client":%d,"key":"k","cmd":%s,"call":%d,"return":0,"outcome":"unknown"%s}`,
			client, args, callMs*ms, extra)
	}
	return fmt.Sprintf(`{"client":%d,"key":"k","cmd":%s,"output":%s,"call":%d,"return":%d,"outcome":"ok"%s}`,
		client, args, out, callMs*ms, retMs*ms, extra)
}

func TestExpiryHistories(t *testing.T) {
	cmd := func(args ...string) []string { return append([]string{args[0], "k"}, args[1:]...) }
	const ok, one, zero, none = `{"type":"ok"}`, `{"type":"int","value":1}`, `{"type":"int","value":0}`, `{"type":"nil"}`
	bulk := func(v string) string { return fmt.Sprintf(`{"type":"bulk","value":%q}`, v) }
	num := func(v int) string { return fmt.Sprintf(`{"type":"int","value":%d}`, v) }
	// op is an operation of client c from callMs to retMs.
	op := func(c int, out string, callMs, retMs int64, args ...string) string {
		return ttlRec(c, cmd(args...), out, callMs, retMs, "")
	}
	setPX := op(1, ok, 0, 10, "SET", "1", "PX", "100") // the deadline is in [100, 110] ms
	cases := []struct {
		name   string
		skewMs int64
		lines  []string
		want   porcupine.CheckResult
	}{
		{"read before the deadline", 0, []string{setPX, op(2, bulk("1"), 50, 60, "GET")}, porcupine.Ok},
		{"read after the deadline", 0, []string{setPX, op(2, none, 200, 210, "GET")}, porcupine.Ok},
		{"a value read after its deadline", 0, []string{setPX, op(2, bulk("1"), 200, 210, "GET")}, porcupine.Illegal},
		{"a value read after its deadline, within the skew", 50, []string{setPX, op(2, bulk("1"), 200, 210, "GET")}, porcupine.Ok},
		{"a value read long after its deadline plus the skew", 50, []string{setPX, op(2, bulk("1"), 300, 310, "GET")}, porcupine.Illegal},
		{"expired long before its deadline", 0, []string{setPX, op(2, zero, 50, 60, "EXISTS")}, porcupine.Illegal},
		{"expired before its deadline, within the skew", 20, []string{setPX, op(2, zero, 50, 60, "EXISTS")}, porcupine.Ok},
		{"expired before its deadline, beyond the skew", 10, []string{setPX, op(2, zero, 50, 60, "EXISTS")}, porcupine.Illegal},
		{"PTTL as it should be", 0, []string{setPX, op(2, num(95), 5, 15, "PTTL")}, porcupine.Ok},
		{"PTTL too short", 0, []string{setPX, op(2, num(30), 20, 25, "PTTL")}, porcupine.Illegal},
		{"PTTL of an expired key", 0, []string{setPX, op(2, num(-2), 200, 210, "PTTL")}, porcupine.Ok},
		{"PTTL of a key without a deadline", 0, []string{op(1, ok, 0, 10, "SET", "1"), op(2, num(-1), 200, 210, "PTTL")}, porcupine.Ok},
		{"two PTTLs that disagree", 0, []string{setPX, op(2, num(90), 10, 10, "PTTL"), op(2, num(50), 20, 20, "PTTL")}, porcupine.Illegal},
		{"PTTL of a week", 0, []string{op(1, ok, 0, 10, "SET", "1", "EX", "604800"), op(2, num(604799995), 5, 15, "PTTL")}, porcupine.Ok},
		{"TTL rounds to the second", 0, []string{op(1, ok, 0, 10, "SET", "1", "EX", "10"), op(2, num(10), 20, 30, "TTL")}, porcupine.Ok},
		{"TTL a second short", 0, []string{op(1, ok, 0, 10, "SET", "1", "EX", "10"), op(2, num(9), 20, 30, "TTL")}, porcupine.Illegal},
		{"PEXPIRE renews", 0, []string{setPX, op(2, one, 80, 90, "PEXPIRE", "200"), op(3, bulk("1"), 250, 260, "GET")}, porcupine.Ok},
		{"PEXPIRE renews until its own deadline", 0, []string{setPX, op(2, one, 80, 90, "PEXPIRE", "200"), op(3, bulk("1"), 300, 310, "GET")}, porcupine.Illegal},
		{"PEXPIRE of an expired key", 0, []string{setPX, op(2, one, 150, 160, "PEXPIRE", "200")}, porcupine.Illegal},
		{"EXPIRE 0 deletes", 0, []string{setPX, op(2, one, 20, 30, "EXPIRE", "0"), op(3, none, 40, 50, "GET")}, porcupine.Ok},
		{"PERSIST keeps the key", 0, []string{setPX, op(2, one, 50, 60, "PERSIST"), op(3, bulk("1"), 500, 510, "GET")}, porcupine.Ok},
		{"PERSIST of an expired key", 0, []string{setPX, op(2, one, 150, 160, "PERSIST")}, porcupine.Illegal},
		{"INCR keeps the deadline", 0, []string{setPX, op(2, num(2), 20, 30, "INCR"), op(3, bulk("2"), 200, 210, "GET")}, porcupine.Illegal},
		{"INCR keeps the deadline, which passes", 0, []string{setPX, op(2, num(2), 20, 30, "INCR"), op(3, none, 200, 210, "GET")}, porcupine.Ok},
		{"INCR of an expired key starts without one", 0, []string{setPX, op(2, num(1), 200, 210, "INCR"), op(3, bulk("1"), 5000, 5010, "GET")}, porcupine.Ok},
		{"KEEPTTL keeps the deadline", 0, []string{setPX, op(2, ok, 20, 30, "SET", "2", "KEEPTTL"), op(3, bulk("2"), 200, 210, "GET")}, porcupine.Illegal},
		{"SET without KEEPTTL clears it", 0, []string{setPX, op(2, ok, 20, 30, "SET", "2"), op(3, bulk("2"), 200, 210, "GET")}, porcupine.Ok},
		{"DEL of an expired key", 0, []string{setPX, op(2, one, 200, 210, "DEL")}, porcupine.Illegal},
		// The INCR answers 1 whether or not the 0 had expired: both futures stay possible.
		{"an INCR that does not tell (deadline kept)", 0, []string{op(1, ok, 0, 10, "SET", "0", "PX", "100"),
			op(2, one, 95, 105, "INCR"), op(3, none, 5000, 5010, "GET")}, porcupine.Ok},
		{"an INCR that does not tell (deadline gone)", 0, []string{op(1, ok, 0, 10, "SET", "0", "PX", "100"),
			op(2, one, 95, 105, "INCR"), op(3, bulk("1"), 5000, 5010, "GET")}, porcupine.Ok},
		// Without skew an expired key stays expired; with it, a replica whose clock is behind
		// may see it live again.
		{"live, expired, live again", 0, []string{ttlRec(1, cmd("SET", "1", "PX", "100"), "", 0, 0, ""),
			op(2, bulk("1"), 50, 60, "GET"), op(2, none, 70, 80, "GET"), op(2, bulk("1"), 90, 95, "GET")}, porcupine.Illegal},
		{"live, expired, live again within the skew", 20, []string{ttlRec(1, cmd("SET", "1", "PX", "100"), "", 0, 0, ""),
			op(2, bulk("1"), 50, 60, "GET"), op(2, none, 70, 80, "GET"), op(2, bulk("1"), 90, 95, "GET")}, porcupine.Ok},
		{"a lease holds", 0, []string{op(1, one, 0, 10, "LOCK.ACQUIRE", "a", "100"), op(2, none, 50, 60, "LOCK.ACQUIRE", "b", "100")}, porcupine.Ok},
		{"a lease runs out", 0, []string{op(1, one, 0, 10, "LOCK.ACQUIRE", "a", "100"), op(2, num(2), 200, 210, "LOCK.ACQUIRE", "b", "100")}, porcupine.Ok},
		{"a lease taken early", 0, []string{op(1, one, 0, 10, "LOCK.ACQUIRE", "a", "100"), op(2, num(2), 50, 60, "LOCK.ACQUIRE", "b", "100")}, porcupine.Illegal},
		{"a lease that never ends", 0, []string{op(1, one, 0, 10, "LOCK.ACQUIRE", "a", "100"), op(2, none, 200, 210, "LOCK.ACQUIRE", "b", "100")}, porcupine.Illegal},
		{"a lease renewed by its holder", 0, []string{op(1, one, 0, 10, "LOCK.ACQUIRE", "a", "100"), op(1, one, 80, 90, "LOCK.ACQUIRE", "a", "100"),
			op(2, none, 150, 160, "LOCK.ACQUIRE", "b", "100")}, porcupine.Ok},
		{"the holder after its lease ran out gets a new token", 0, []string{op(1, one, 0, 10, "LOCK.ACQUIRE", "a", "100"),
			op(1, num(2), 200, 210, "LOCK.ACQUIRE", "a", "100")}, porcupine.Ok},
		{"the holder may release after its lease ran out", 0, []string{op(1, one, 0, 10, "LOCK.ACQUIRE", "a", "100"),
			op(1, one, 200, 210, "LOCK.RELEASE", "a")}, porcupine.Ok},
	}
	for _, c := range cases {
		ops, _, err := Read(strings.NewReader(strings.Join(c.lines, "\n")), Clock{SkewMs: c.skewMs})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		v, err := Check(ops, 10*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		if v.Result != c.want {
			t.Errorf("%s: got %s, want %s", c.name, v.Result, c.want)
		}
	}
}

func TestStampWindowsAndEpochFromTheRecords(t *testing.T) {
	get := func(out string, callMs, retMs int64, extra string) string {
		return ttlRec(2, []string{"GET", "k"}, out, callMs, retMs, extra)
	}
	cases := []struct {
		name  string
		lines []string
		want  porcupine.CheckResult
	}{
		// PXAT 1100 with the wall clock at 1000 ms at time 0: the deadline is at 100 ms.
		{"PXAT before its instant", []string{ttlRec(1, []string{"SET", "k", "v", "PXAT", "1100"}, `{"type":"ok"}`, 0, 10, `,"epoch_ms":1000`),
			get(`{"type":"bulk","value":"v"}`, 50, 60, "")}, porcupine.Ok},
		{"PXAT after its instant", []string{ttlRec(1, []string{"SET", "k", "v", "PXAT", "1100"}, `{"type":"ok"}`, 0, 10, `,"epoch_ms":1000`),
			get(`{"type":"bulk","value":"v"}`, 150, 160, "")}, porcupine.Illegal},
		// A replica whose clock ran 1 s ahead stamped the SET; the GET's replica was on time.
		{"a stamp window ahead of real time", []string{
			ttlRec(1, []string{"SET", "k", "v", "PX", "100"}, `{"type":"ok"}`, 0, 10, fmt.Sprintf(`,"stamp_lo":%d,"stamp_hi":%d`, 1000*ms, 1010*ms)),
			get(`{"type":"bulk","value":"v"}`, 900, 910, "")}, porcupine.Ok},
		{"the same read without the window", []string{
			ttlRec(1, []string{"SET", "k", "v", "PX", "100"}, `{"type":"ok"}`, 0, 10, ""),
			get(`{"type":"bulk","value":"v"}`, 900, 910, "")}, porcupine.Illegal},
		{"a record's skew_ms", []string{
			ttlRec(1, []string{"SET", "k", "v", "PX", "100"}, `{"type":"ok"}`, 0, 10, `,"skew_ms":400`),
			get(`{"type":"bulk","value":"v"}`, 900, 910, `,"skew_ms":400`)}, porcupine.Ok},
	}
	for _, c := range cases {
		if got := verdict(t, c.lines...).Result; got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
}

func TestAnUnchangedSetPXDoesNotDoubleTheStates(t *testing.T) {
	// SET PX over a key with a deadline: whether the old value had expired, the new deadline
	// window is the same interval, so the two branches join into one state.
	s := State{Kind: String, Str: "1", HasTTL: true, TTLLo: 100 * ms, TTLHi: 110 * ms}
	op := at(t, 0, 1000, "SET", "k", "2", "PX", "100")
	op.Stamp = Window{90 * ms, 120 * ms}
	next := Step(s, op, &okReply)
	want := State{Kind: String, Str: "2", HasTTL: true, TTLLo: 190 * ms, TTLHi: 220 * ms}
	if len(next) != 1 || next[0] != want {
		t.Fatalf("got %+v, want [%+v]", next, want)
	}
}
