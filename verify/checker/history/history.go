package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Record is one line of a history file (the format is in verify/checker/README.md).
type Record struct {
	Client  int             `json:"client"`
	Key     string          `json:"key"`
	Cmd     []string        `json:"cmd"`
	Output  json.RawMessage `json:"output"`
	Call    int64           `json:"call"`
	Return  int64           `json:"return"`
	Outcome string          `json:"outcome"`
	// What is known of the operation's stamp (expiry): a window of the history's time base,
	// or else a bound on the replicas' clock skew around [call, return]; and the wall clock at
	// time 0, for EXAT and PXAT. All optional; Clock gives the defaults.
	StampLo optional `json:"stamp_lo"`
	StampHi optional `json:"stamp_hi"`
	SkewMs  optional `json:"skew_ms"`
	EpochMs optional `json:"epoch_ms"`
	// Queued is a transaction's commands (cmd is ["MULTI", key]).
	Queued [][]string `json:"queued"`
}

// optional is an integer field that may be missing. Unlike a *int64 it costs no allocation
// per record, which matters for histories of millions of lines.
type optional struct {
	value int64
	set   bool
}

func (o *optional) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*o = optional{}
		return nil
	}
	// By hand rather than strconv.ParseInt(string(data)): no allocation per field.
	digits, negative := data, len(data) > 0 && data[0] == '-'
	if negative {
		digits = data[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return fmt.Errorf("an integer of at most 18 digits: %s", data)
	}
	v := int64(0)
	for _, d := range digits {
		if d < '0' || d > '9' {
			return fmt.Errorf("an integer: %s", data)
		}
		v = v*10 + int64(d-'0')
	}
	if negative {
		v = -v
	}
	*o = optional{value: v, set: true}
	return nil
}

// ptr is the value, or nil if missing.
func (o optional) ptr() *int64 {
	if !o.set {
		return nil
	}
	return &o.value
}

// Clock is what the checker is told about the replicas' clocks when a record does not say.
type Clock struct {
	// SkewMs bounds how far a stamp may lie outside its operation's [call, return] (ms).
	SkewMs int64
	// EpochMs is the wall clock (Unix ms) at the history's time 0, if HasEpoch.
	EpochMs  int64
	HasEpoch bool
}

// unknown marks an operation whose outcome is unknown: any reply matches.
type unknown struct{}

func parseOutput(raw json.RawMessage) (Output, error) {
	var o struct {
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return Output{}, err
	}
	out := Output{Type: o.Type}
	switch o.Type {
	case "ok", "nil":
	case "int":
		if err := json.Unmarshal(o.Value, &out.Int); err != nil {
			return Output{}, fmt.Errorf("int value: %w", err)
		}
	case "bulk", "error":
		if err := json.Unmarshal(o.Value, &out.Str); err != nil {
			return Output{}, fmt.Errorf("%s value: %w", o.Type, err)
		}
	case "array":
		if err := json.Unmarshal(o.Value, &out.Array); err != nil {
			return Output{}, fmt.Errorf("array value: %w", err)
		}
	case "items":
		var items []json.RawMessage
		if err := json.Unmarshal(o.Value, &items); err != nil {
			return Output{}, fmt.Errorf("items value: %w", err)
		}
		out.Items = make([]Output, len(items))
		for i, item := range items {
			var err error
			if out.Items[i], err = parseOutput(item); err != nil {
				return Output{}, fmt.Errorf("item %d: %w", i, err)
			}
		}
	default:
		return Output{}, fmt.Errorf("unknown output type %q", o.Type)
	}
	return out, nil
}

// Counts summarises a history.
type Counts struct {
	Keys, Operations, Ok, Fail, Unknown int
}

// Read parses a history; errors name the line. clock gives what records do not say about
// the replicas' clocks.
func Read(r io.Reader, clock Clock) ([]porcupine.Operation, Counts, error) {
	var ops []porcupine.Operation
	var counts Counts
	keys := map[string]bool{}
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for scanner.Scan() {
		line++
		text := strings.TrimSpace(scanner.Text())
		if text == "" {
			continue
		}
		var rec Record
		if err := json.Unmarshal([]byte(text), &rec); err != nil {
			return nil, counts, fmt.Errorf("line %d: %w", line, err)
		}
		if len(rec.Cmd) < 2 || rec.Cmd[1] != rec.Key {
			return nil, counts, fmt.Errorf("line %d: cmd must be [NAME, key, ...] with the record's key", line)
		}
		epoch := rec.EpochMs.ptr()
		if epoch == nil && clock.HasEpoch {
			epoch = &clock.EpochMs
		}
		var in Op
		var err error
		switch {
		case strings.EqualFold(rec.Cmd[0], "MULTI"):
			in, err = parseTransaction(rec.Cmd, rec.Queued, epoch)
		case rec.Queued != nil:
			err = fmt.Errorf("queued belongs to a MULTI record")
		default:
			in, err = parseOp(rec.Cmd, epoch)
		}
		if err != nil {
			return nil, counts, fmt.Errorf("line %d: %w", line, err)
		}
		skew := clock.SkewMs
		if rec.SkewMs.set {
			skew = rec.SkewMs.value
		}
		if skew < 0 || skew > timeMaxMs {
			return nil, counts, fmt.Errorf("line %d: skew_ms must be 0 to 2^39", line)
		}
		in.skew, in.stampLo, in.stampHi = skew*ms, rec.StampLo, rec.StampHi
		op := porcupine.Operation{ClientId: rec.Client, Input: &in, Call: rec.Call, Metadata: rec.Key}
		switch rec.Outcome {
		case "ok":
			if rec.Return < rec.Call {
				return nil, counts, fmt.Errorf("line %d: returns before its call", line)
			}
			out, err := parseOutput(rec.Output)
			if err != nil {
				return nil, counts, fmt.Errorf("line %d: output: %w", line, err)
			}
			op.Output, op.Return = out, rec.Return
			counts.Ok++
		case "fail":
			counts.Fail++
			continue // definitely not applied: it never happened
		case "unknown":
			// May take effect at any time after its call, or never (last).
			op.Output, op.Return = unknown{}, math.MaxInt64
			counts.Unknown++
		default:
			return nil, counts, fmt.Errorf("line %d: outcome must be ok, fail or unknown", line)
		}
		keys[rec.Key] = true
		ops = append(ops, op)
	}
	if err := scanner.Err(); err != nil {
		return nil, counts, fmt.Errorf("line %d: %w", line+1, err)
	}
	counts.Keys, counts.Operations = len(keys), len(ops)
	return ops, counts, nil
}

// stampWindows gives each operation of one key the window its stamp lies in: the record's
// stamp_lo and stamp_hi where it has them, else [call - skew, return + skew]. An operation of
// unknown outcome has no return: its stamp is bounded by the key's last return (plus skew),
// since it can only be seen by an operation that returned later, and one that took effect
// after every return changed nothing anybody saw. The horizon is the latest stamp of all.
func stampWindows(part []porcupine.Operation) {
	last := int64(math.MinInt64)
	for _, op := range part {
		if _, any := op.Output.(unknown); !any {
			last = max(last, op.Return)
		}
	}
	horizon := int64(math.MinInt64)
	for _, op := range part {
		// The windows depend only on the key's operations: computing them again for the same
		// history gives the same values, so they are set in place.
		in := op.Input.(*Op)
		in.Stamp.Lo = op.Call - in.skew
		if in.stampLo.set {
			in.Stamp.Lo = in.stampLo.value
		}
		if _, any := op.Output.(unknown); any {
			in.Stamp.Hi = max(last, op.Call) + in.skew
		} else {
			in.Stamp.Hi = op.Return + in.skew
		}
		if in.stampHi.set {
			in.Stamp.Hi = in.stampHi.value
		}
		horizon = max(horizon, in.Stamp.Hi)
	}
	for _, op := range part {
		op.Input.(*Op).Horizon = horizon
	}
}

// partition splits a history by key, in key order.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Metadata.(string)
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		stampWindows(byKey[k])
		parts = append(parts, byKey[k])
	}
	return parts
}

// alternatives is the model's state for Porcupine: the states the key may be in, since a
// reply does not always tell whether a deadline had passed (the power-set construction of
// Porcupine's NondeterministicModel, kept small: alternatives whose windows touch are joined).
type alternatives struct {
	states []State
	hash   uint64 // the XOR of the states' hashes: independent of their order
}

func newAlternatives(states []State) *alternatives {
	a := &alternatives{states: states}
	for _, s := range states {
		a.hash ^= hash(s)
	}
	return a
}

func (a *alternatives) equal(b *alternatives) bool {
	if a.hash != b.hash || len(a.states) != len(b.states) {
		return false
	}
	for _, s := range a.states {
		found := false
		for _, t := range b.states {
			if s == t {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// stepAlternatives is the model's transition on a set of states.
func stepAlternatives(state, in, out interface{}) (bool, interface{}) {
	current := state.(*alternatives)
	var reply *Output
	if o, ok := out.(Output); ok {
		reply = &o
	}
	op := in.(*Op)
	next := make([]State, 0, len(current.states)+1)
	for _, s := range current.states {
		next = appendStep(next, s, op, reply)
	}
	if len(next) == 0 {
		// An operation of unknown outcome may never have taken effect.
		return reply == nil, current
	}
	return true, newAlternatives(mergeWindows(next))
}

// Model is the Porcupine model of one logless key (Check partitions the history by key).
var Model = porcupine.Model{
	Init:  func() interface{} { return newAlternatives([]State{{}}) },
	Step:  stepAlternatives,
	Equal: func(a, b interface{}) bool { return a.(*alternatives).equal(b.(*alternatives)) },
	Hash:  func(state interface{}) uint64 { return state.(*alternatives).hash },
	DescribeOperation: func(in, out interface{}) string {
		op := in.(*Op)
		args := op.text()
		stamp := fmt.Sprintf(" @[%s, %s]", millis(op.Stamp.Lo), millis(op.Stamp.Hi))
		if _, any := out.(unknown); any {
			return args + " -> ?" + stamp
		}
		return args + " -> " + out.(Output).String() + stamp
	},
	DescribeState: func(state interface{}) string {
		var texts []string
		for _, s := range state.(*alternatives).states {
			texts = append(texts, describe(s))
		}
		return strings.Join(texts, " or ")
	},
	DescribeOperationMetadata: func(info interface{}) string { return fmt.Sprint(info) },
}

func describe(s State) string {
	var text string
	switch s.Kind {
	case String:
		text = fmt.Sprintf("%q", s.Str)
	case Set:
		text = fmt.Sprintf("set%q", members(s))
	case Hash:
		text = fmt.Sprintf("hash%q", unpack(s.Str))
	case List:
		text = fmt.Sprintf("list%q", unpack(s.Str))
	case ZSet:
		text = fmt.Sprintf("zset%q", unpack(s.Str))
	case Lock:
		text = fmt.Sprintf("lock(owner=%q, fence=%d", s.Owner, s.Fence)
		if s.Owner != "" && s.LeaseLo != Beyond {
			text += fmt.Sprintf(", lease ends in [%s, %s]", millis(s.LeaseLo), millis(s.LeaseHi))
		}
		text += ")"
	default:
		text = "(absent)"
	}
	if s.HasTTL {
		text += fmt.Sprintf(" expiring in [%s, %s]", millis(s.TTLLo), millis(s.TTLHi))
	}
	return text
}

// hash is FNV-1a over a state's fields.
func hash(s State) uint64 {
	h := uint64(14695981039346656037)
	word := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	text := func(t string) {
		for i := 0; i < len(t); i++ {
			h ^= uint64(t[i])
			h *= 1099511628211
		}
		word(uint64(len(t)))
	}
	word(uint64(s.Kind))
	text(s.Str)
	text(s.Owner)
	word(uint64(s.Fence))
	word(uint64(s.Members))
	if s.HasTTL {
		word(uint64(s.TTLLo))
		word(uint64(s.TTLHi))
	}
	word(uint64(s.LeaseLo))
	word(uint64(s.LeaseHi))
	return h
}

// millis shows an instant of the history's time base in ms.
func millis(ns int64) string {
	if ns == Beyond {
		return "∞"
	}
	return strconv.FormatFloat(float64(ns)/float64(ms), 'f', -1, 64) + "ms"
}

// Verdict is the result of checking a history.
type Verdict struct {
	Result  porcupine.CheckResult
	BadKeys []string
}

// Check checks the operations, key by key, within `timeout` in total; with htmlDir it writes
// Porcupine's visualisation of each failing key there.
func Check(ops []porcupine.Operation, timeout time.Duration, htmlDir string) (Verdict, error) {
	verdict := Verdict{Result: porcupine.Ok}
	deadline := time.Now().Add(timeout)
	for _, part := range partition(ops) {
		left := time.Until(deadline)
		if left <= 0 {
			return Verdict{Result: porcupine.Unknown, BadKeys: verdict.BadKeys}, nil
		}
		result, info := porcupine.CheckOperationsVerbose(Model, part, left)
		key := part[0].Metadata.(string)
		switch result {
		case porcupine.Illegal:
			verdict.Result = porcupine.Illegal
			verdict.BadKeys = append(verdict.BadKeys, key)
			if htmlDir != "" {
				if err := os.MkdirAll(htmlDir, 0o755); err != nil {
					return verdict, err
				}
				name := filepath.Join(htmlDir, sanitize(key)+".html")
				if err := porcupine.VisualizePath(Model, info, name); err != nil {
					return verdict, err
				}
			}
		case porcupine.Unknown:
			if verdict.Result != porcupine.Illegal {
				verdict.Result = porcupine.Unknown
			}
		}
	}
	return verdict, nil
}

func sanitize(key string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r == '.' {
			return '_'
		}
		return r
	}, key)
}
