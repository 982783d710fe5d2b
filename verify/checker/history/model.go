// Package history reads logless client histories and checks them for linearizability per key
// with Porcupine, against a model of the Redis commands logless serves, expiry included.
//
// A key's value is modelled exactly. Its deadline is not: a replica stamps each command with
// its clock when it proposes it, and the key is expired for that command iff its deadline is
// at or before the stamp (common/commands). The client never sees the stamp, so each operation
// carries the window its stamp lies in (Op.Stamp: its call and return widened by the clock
// skew, or what the harness knows), and the model keeps a deadline as the window of instants
// it can still be (State.TTLLo, State.TTLHi). An operation that found the key live raises the
// window's start, one that found it expired lowers its end, a PTTL answer pins it to the
// answer plus the stamp window, and a window that becomes empty rejects the operation. Where
// the reply does not tell whether the key had expired (SET without GET, an INCR of a key that
// held 0, any unknown outcome), both are kept as alternative states: the model's state is the
// set of them (history.go). A lock's lease is kept the same way. verify/checker/README.md has the
// whole model.
package history

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Kind is what a key holds.
type Kind uint8

const (
	Absent Kind = iota
	String
	Set
	Lock
	Hash
	List
	ZSet
)

// ms is a millisecond in the history's time unit (nanoseconds). Stamps and deadlines are whole
// milliseconds of the replicas' clocks, so a deadline after a stamp is at least 1 ms after it.
const ms int64 = 1_000_000

// Beyond is the end of a lease that ends after every stamp of its key's history: such a lease
// never runs out within the history, however exactly it was granted.
const Beyond = int64(math.MaxInt64)

// timeMaxMs bounds the times (in ms, relative or absolute) the model accepts, so that its
// arithmetic on nanoseconds cannot overflow (2^39 ms is about 17 years).
const timeMaxMs = int64(1) << 39

// State is one key's value. It is a comparable struct so that Porcupine can compare states
// with ==: a set is its sorted members joined by NUL, an integer is its decimal string, a
// hash, list or sorted set is packed (collection.go).
type State struct {
	Kind    Kind
	Str     string // String: the value; Set: sorted members joined by "\x00"; Hash, List, ZSet: packed
	Owner   string // Lock: the holder ("" when free)
	Fence   int64  // the token of the key's latest lock acquisition; DEL, SET and expiry keep it
	Members int    // Set, Hash, List, ZSet: the member, field or element count
	// HasTTL: the key has a time to live, and its deadline lies in [TTLLo, TTLHi] (ns, the
	// history's time base).
	HasTTL       bool
	TTLLo, TTLHi int64
	// LeaseLo, LeaseHi: a held lock's lease ends in this window (ns); both are Beyond when
	// it ends after every stamp of the key's history.
	LeaseLo, LeaseHi int64
}

// Window is an interval [Lo, Hi] of the history's time base (ns).
type Window struct {
	Lo, Hi int64
}

// Output is a reply as recorded in the history.
type Output struct {
	Type  string   `json:"type"` // ok, nil, int, bulk, array, items, error
	Int   int64    `json:"-"`
	Str   string   `json:"-"`
	Array []string `json:"-"`
	Items []Output `json:"-"` // items: replies of any type (EXEC's, HMGET's)
}

func (o Output) String() string {
	switch o.Type {
	case "int":
		return strconv.FormatInt(o.Int, 10)
	case "bulk":
		return strconv.Quote(o.Str)
	case "array":
		return fmt.Sprintf("%q", o.Array)
	case "items":
		texts := make([]string, len(o.Items))
		for i, item := range o.Items {
			texts[i] = item.String()
		}
		return "[" + strings.Join(texts, ", ") + "]"
	case "error":
		return "(error) " + o.Str
	default:
		return o.Type
	}
}

// errorWord is the first word of an error text: errors are compared by it ("WRONGTYPE", "ERR").
func errorWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[:i]
	}
	return s
}

// Same reports whether two replies are the same reply.
func Same(a, b Output) bool {
	if a.Type != b.Type {
		return false
	}
	switch a.Type {
	case "int":
		return a.Int == b.Int
	case "bulk":
		return a.Str == b.Str
	case "array":
		if len(a.Array) != len(b.Array) {
			return false
		}
		for i := range a.Array {
			if a.Array[i] != b.Array[i] {
				return false
			}
		}
		return true
	case "items":
		if len(a.Items) != len(b.Items) {
			return false
		}
		for i := range a.Items {
			if !Same(a.Items[i], b.Items[i]) {
				return false
			}
		}
		return true
	case "error":
		return errorWord(a.Str) == errorWord(b.Str)
	default:
		return true
	}
}

var (
	okReply   = Output{Type: "ok"}
	nilReply  = Output{Type: "nil"}
	wrongType = Output{Type: "error", Str: "WRONGTYPE Operation against a key holding the wrong kind of value"}
	notInt    = Output{Type: "error", Str: "ERR value is not an integer or out of range"}
	overflow  = Output{Type: "error", Str: "ERR increment or decrement would overflow"}
)

func intReply(v int64) Output { return Output{Type: "int", Int: v} }

func members(s State) []string {
	if s.Kind != Set || s.Str == "" && s.Members == 0 {
		return nil
	}
	return strings.Split(s.Str, "\x00")
}

// cleared is the absent key that keeps s's fencing token: what DEL leaves, and what an expired
// key reads as.
func cleared(s State) State {
	return State{Fence: s.Fence}
}

// data is s without its deadline and lease: what the commands' data semantics see.
func data(s State) State {
	return State{Kind: s.Kind, Str: s.Str, Owner: s.Owner, Fence: s.Fence, Members: s.Members}
}

// setOf is the state holding members m, keeping the key's fencing token from s.
func setOf(s State, m []string) State {
	if len(m) == 0 {
		return cleared(s)
	}
	sort.Strings(m)
	return State{Kind: Set, Str: strings.Join(m, "\x00"), Members: len(m), Fence: s.Fence}
}

// parseInt follows Redis's strict integer syntax.
func parseInt(s string) (int64, bool) {
	if s == "" || s == "-0" || strings.HasPrefix(s, "+") || strings.HasPrefix(s, " ") {
		return 0, false
	}
	digits := strings.TrimPrefix(s, "-")
	if len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// apply runs a command that does not look at the clock on a live view of the key (its data
// only) and returns the reply and the new data. SET, the EXPIRE family, PERSIST, TTL, PTTL and
// LOCK.ACQUIRE are the expiry layer's (expiry.go).
func apply(s State, name string, rest []string) (Output, State, error) {
	switch name {
	case "GET":
		switch s.Kind {
		case Absent:
			return nilReply, s, nil
		case String:
			return Output{Type: "bulk", Str: s.Str}, s, nil
		default:
			return wrongType, s, nil
		}
	case "EXISTS":
		if s.Kind == Absent {
			return intReply(0), s, nil
		}
		return intReply(1), s, nil
	case "DEL":
		if s.Kind == Absent {
			return intReply(0), s, nil
		}
		return intReply(1), cleared(s), nil
	case "INCR", "DECR", "INCRBY", "DECRBY":
		return incr(s, name, rest)
	case "DELEX":
		return delex(s, rest)
	case "SADD", "SREM":
		if s.Kind != Absent && s.Kind != Set {
			return wrongType, s, nil
		}
		have := map[string]bool{}
		for _, m := range members(s) {
			have[m] = true
		}
		changed := int64(0)
		for _, m := range rest {
			if (name == "SADD") != have[m] {
				have[m] = name == "SADD"
				changed++
			}
		}
		var m []string
		for k, in := range have {
			if in {
				m = append(m, k)
			}
		}
		return intReply(changed), setOf(s, m), nil
	case "SMEMBERS":
		if s.Kind != Absent && s.Kind != Set {
			return wrongType, s, nil
		}
		m := members(s)
		if m == nil {
			m = []string{}
		}
		return Output{Type: "array", Array: m}, s, nil
	case "SISMEMBER":
		if s.Kind != Absent && s.Kind != Set {
			return wrongType, s, nil
		}
		if len(rest) != 1 {
			return Output{}, s, fmt.Errorf("SISMEMBER takes one member")
		}
		for _, m := range members(s) {
			if m == rest[0] {
				return intReply(1), s, nil
			}
		}
		return intReply(0), s, nil
	case "SCARD":
		if s.Kind != Absent && s.Kind != Set {
			return wrongType, s, nil
		}
		return intReply(int64(s.Members)), s, nil
	case "LOCK.RELEASE":
		if len(rest) != 1 {
			return Output{}, s, fmt.Errorf("LOCK.RELEASE takes an owner")
		}
		if s.Kind != Absent && s.Kind != Lock {
			return wrongType, s, nil
		}
		// The owner may release after its lease ran out, as long as nobody took the lock.
		if s.Kind == Lock && s.Owner == rest[0] {
			return intReply(1), State{Kind: Lock, Fence: s.Fence}, nil
		}
		return intReply(0), s, nil
	case "HSET", "HSETNX", "HGET", "HMGET", "HDEL", "HEXISTS", "HSTRLEN", "HLEN", "HKEYS",
		"HVALS", "HGETALL", "HINCRBY":
		return hashCommand(s, name, rest)
	case "LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LLEN", "LRANGE", "LTRIM",
		"LINDEX", "LSET", "LREM":
		return listCommand(s, name, rest)
	case "ZADD", "ZREM", "ZSCORE", "ZMSCORE", "ZINCRBY", "ZCARD", "ZRANK", "ZREVRANK", "ZRANGE",
		"ZPOPMIN", "ZPOPMAX":
		return zsetCommand(s, name, rest)
	}
	return Output{}, s, fmt.Errorf("command %s is not modelled", name)
}

func incr(s State, name string, rest []string) (Output, State, error) {
	delta := int64(1)
	if name == "INCRBY" || name == "DECRBY" {
		if len(rest) != 1 {
			return Output{}, s, fmt.Errorf("%s takes one argument", name)
		}
		d, ok := parseInt(rest[0])
		if !ok {
			return notInt, s, nil
		}
		delta = d
	}
	if name == "DECR" || name == "DECRBY" {
		delta = -delta
	}
	current := int64(0)
	switch s.Kind {
	case Absent:
	case String:
		v, ok := parseInt(s.Str)
		if !ok {
			return notInt, s, nil
		}
		current = v
	default:
		return wrongType, s, nil
	}
	next := current + delta
	if (delta > 0 && next < current) || (delta < 0 && next > current) {
		return overflow, s, nil
	}
	return intReply(next), State{Kind: String, Str: strconv.FormatInt(next, 10), Fence: s.Fence}, nil
}

// condition reads an optional NX/XX/IFEQ v/IFNE v; it reports whether the write applies.
func condition(s State, word, arg string) (bool, *Output) {
	exists := s.Kind != Absent
	switch word {
	case "NX":
		return !exists, nil
	case "XX":
		return exists, nil
	case "IFEQ", "IFNE":
		if exists && s.Kind != String {
			return false, &wrongType
		}
		equal := exists && s.Str == arg
		if word == "IFEQ" {
			return equal, nil
		}
		return !equal, nil
	}
	return true, nil
}

// setExpiry is what a SET does to the time to live.
type setExpiry uint8

const (
	expiryClear setExpiry = iota // no option: the key has no time to live afterwards
	expiryKeep                   // KEEPTTL: a live key keeps its deadline
	expiryAfter                  // EX, PX: a duration after the stamp
	expiryAt                     // EXAT, PXAT: an instant
)

// setArgs are SET's parsed options.
type setArgs struct {
	value, cond, condArg string
	get                  bool
	expiry               setExpiry
	ms                   int64 // EX/PX: the duration; EXAT/PXAT: the instant (Unix ms)
}

func parseSet(rest []string) (setArgs, error) {
	if len(rest) < 1 {
		return setArgs{}, fmt.Errorf("SET takes a value")
	}
	a := setArgs{value: rest[0]}
	for i := 1; i < len(rest); i++ {
		switch w := strings.ToUpper(rest[i]); w {
		case "NX", "XX":
			a.cond = w
		case "IFEQ", "IFNE":
			if i+1 >= len(rest) {
				return a, fmt.Errorf("%s needs a value", w)
			}
			a.cond, a.condArg = w, rest[i+1]
			i++
		case "GET":
			a.get = true
		case "KEEPTTL":
			a.expiry = expiryKeep
		case "EX", "PX", "EXAT", "PXAT":
			if i+1 >= len(rest) {
				return a, fmt.Errorf("%s needs a time", w)
			}
			// A time that is not a positive integer is refused by the front end before it
			// reaches a register; such a SET has nothing to check. Durations stay within
			// 2^39 ms, instants within 2^39 ms of the epoch (parseOp checks).
			v, ok := parseInt(rest[i+1])
			limit := int64(math.MaxInt64)
			if w == "EX" || w == "PX" {
				limit = timeMaxMs
			}
			if w == "EX" || w == "EXAT" {
				limit /= 1000
			}
			if !ok || v <= 0 || v > limit {
				return a, fmt.Errorf("SET %s %s is not modelled", w, rest[i+1])
			}
			if w == "EX" || w == "EXAT" {
				v *= 1000
			}
			a.expiry, a.ms = expiryAfter, v
			if w == "EXAT" || w == "PXAT" {
				a.expiry = expiryAt
			}
			i++
		default:
			return a, fmt.Errorf("SET option %s is not modelled", w)
		}
	}
	return a, nil
}

// set runs SET on the data s; applied says whether it wrote.
func set(s State, a setArgs) (reply Output, next State, applied bool) {
	old := nilReply
	if s.Kind == String {
		old = Output{Type: "bulk", Str: s.Str}
	} else if s.Kind != Absent && a.get {
		return wrongType, s, false
	}
	applies, failure := condition(s, a.cond, a.condArg)
	if failure != nil {
		return *failure, s, false
	}
	if !applies {
		if a.get {
			return old, s, false
		}
		return nilReply, s, false
	}
	reply = okReply
	if a.get {
		reply = old
	}
	return reply, State{Kind: String, Str: a.value, Fence: s.Fence}, true
}

func delex(s State, rest []string) (Output, State, error) {
	if len(rest) != 0 && len(rest) != 2 {
		return Output{}, s, fmt.Errorf("DELEX takes IFEQ or IFNE and a value")
	}
	if s.Kind == Absent {
		return intReply(0), s, nil
	}
	if len(rest) == 0 {
		return intReply(1), cleared(s), nil
	}
	applies, failure := condition(s, strings.ToUpper(rest[0]), rest[1])
	if failure != nil {
		return *failure, s, nil
	}
	if !applies {
		return intReply(0), s, nil
	}
	return intReply(1), cleared(s), nil
}
