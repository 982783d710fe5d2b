// Package history reads logless client histories and checks them for linearizability per key
// with Porcupine, against a model of the Redis commands logless serves.
package history

import (
	"fmt"
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
)

// State is one key's value. It is a comparable struct so that Porcupine can compare states
// with ==: a set is its sorted members joined by NUL, an integer is its decimal string.
type State struct {
	Kind    Kind
	Str     string // String: the value; Set: sorted members joined by "\x00"
	Owner   string // Lock: the holder ("" when free)
	Fence   int64  // the token of the key's latest lock acquisition; DEL, SET and expiry keep it
	Members int    // Set: the member count
}

// Output is a reply as recorded in the history.
type Output struct {
	Type  string   `json:"type"` // ok, nil, int, bulk, array, error
	Int   int64    `json:"-"`
	Str   string   `json:"-"`
	Array []string `json:"-"`
}

func (o Output) String() string {
	switch o.Type {
	case "int":
		return strconv.FormatInt(o.Int, 10)
	case "bulk":
		return strconv.Quote(o.Str)
	case "array":
		return fmt.Sprintf("%q", o.Array)
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

// cleared is the absent key that keeps s's fencing token: what DEL leaves.
func cleared(s State) State {
	return State{Fence: s.Fence}
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

// Apply runs one command (its arguments, key at index 1) on a state and returns the reply and
// the new state. Commands the model does not know return an error.
func Apply(s State, args []string) (Output, State, error) {
	if len(args) < 2 {
		return Output{}, s, fmt.Errorf("a command needs a name and a key")
	}
	name := strings.ToUpper(args[0])
	rest := args[2:]
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
	case "SET":
		return set(s, rest)
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
	case "LOCK.ACQUIRE":
		if len(rest) != 2 {
			return Output{}, s, fmt.Errorf("LOCK.ACQUIRE takes an owner and a lease")
		}
		if s.Kind != Absent && s.Kind != Lock {
			return wrongType, s, nil
		}
		if s.Kind == Lock && s.Owner == rest[0] {
			return intReply(s.Fence), s, nil
		}
		if s.Kind == Lock && s.Owner != "" {
			return nilReply, s, nil
		}
		fence := s.Fence + 1
		return intReply(fence), State{Kind: Lock, Owner: rest[0], Fence: fence}, nil
	case "LOCK.RELEASE":
		if len(rest) != 1 {
			return Output{}, s, fmt.Errorf("LOCK.RELEASE takes an owner")
		}
		if s.Kind != Absent && s.Kind != Lock {
			return wrongType, s, nil
		}
		if s.Kind == Lock && s.Owner == rest[0] {
			return intReply(1), State{Kind: Lock, Fence: s.Fence}, nil
		}
		return intReply(0), s, nil
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

func set(s State, rest []string) (Output, State, error) {
	if len(rest) < 1 {
		return Output{}, s, fmt.Errorf("SET takes a value")
	}
	value := rest[0]
	get := false
	cond, condArg := "", ""
	for i := 1; i < len(rest); i++ {
		switch w := strings.ToUpper(rest[i]); w {
		case "NX", "XX":
			cond = w
		case "IFEQ", "IFNE":
			if i+1 >= len(rest) {
				return Output{}, s, fmt.Errorf("%s needs a value", w)
			}
			cond, condArg = w, rest[i+1]
			i++
		case "GET":
			get = true
		default:
			return Output{}, s, fmt.Errorf("SET option %s is not modelled", w)
		}
	}
	old := nilReply
	if s.Kind == String {
		old = Output{Type: "bulk", Str: s.Str}
	} else if s.Kind != Absent && get {
		return wrongType, s, nil
	}
	applies, failure := condition(s, cond, condArg)
	if failure != nil {
		return *failure, s, nil
	}
	reply := okReply
	if get {
		reply = old
	}
	if !applies {
		if get {
			return old, s, nil
		}
		return nilReply, s, nil
	}
	return reply, State{Kind: String, Str: value, Fence: s.Fence}, nil
}

func delex(s State, rest []string) (Output, State, error) {
	if s.Kind == Absent {
		return intReply(0), s, nil
	}
	if len(rest) == 0 {
		return intReply(1), cleared(s), nil
	}
	if len(rest) != 2 {
		return Output{}, s, fmt.Errorf("DELEX takes IFEQ or IFNE and a value")
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
