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
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Record is one line of a history file (the format is in checker/README.md).
type Record struct {
	Client  int             `json:"client"`
	Key     string          `json:"key"`
	Cmd     []string        `json:"cmd"`
	Output  json.RawMessage `json:"output"`
	Call    int64           `json:"call"`
	Return  int64           `json:"return"`
	Outcome string          `json:"outcome"`
}

// input is what Porcupine's model receives: the command's arguments.
type input struct {
	args []string
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
	default:
		return Output{}, fmt.Errorf("unknown output type %q", o.Type)
	}
	return out, nil
}

// Counts summarises a history.
type Counts struct {
	Keys, Operations, Ok, Fail, Unknown int
}

// Read parses a history; errors name the line.
func Read(r io.Reader) ([]porcupine.Operation, Counts, error) {
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
		if _, _, err := Apply(State{}, rec.Cmd); err != nil {
			return nil, counts, fmt.Errorf("line %d: %w", line, err)
		}
		op := porcupine.Operation{ClientId: rec.Client, Input: input{rec.Cmd}, Call: rec.Call, Metadata: rec.Key}
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

// Model is the Porcupine model of a logless key, partitioned by key.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
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
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return State{} },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		reply, next, err := Apply(state.(State), in.(input).args)
		if err != nil {
			return false, state
		}
		if _, any := out.(unknown); any {
			return true, next
		}
		return Same(reply, out.(Output)), next
	},
	DescribeOperation: func(in, out interface{}) string {
		args := strings.Join(in.(input).args, " ")
		if _, any := out.(unknown); any {
			return args + " -> ?"
		}
		return args + " -> " + out.(Output).String()
	},
	DescribeState: func(state interface{}) string {
		s := state.(State)
		switch s.Kind {
		case String:
			return fmt.Sprintf("%q", s.Str)
		case Set:
			return fmt.Sprintf("set%q", members(s))
		case Lock:
			return fmt.Sprintf("lock(owner=%q, fence=%d)", s.Owner, s.Fence)
		}
		return "(absent)"
	},
	DescribeOperationMetadata: func(info interface{}) string { return fmt.Sprint(info) },
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
	for _, part := range Model.Partition(ops) {
		left := time.Until(deadline)
		if left <= 0 {
			return Verdict{Result: porcupine.Unknown, BadKeys: verdict.BadKeys}, nil
		}
		single := Model
		single.Partition = nil
		result, info := porcupine.CheckOperationsVerbose(single, part, left)
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
				if err := porcupine.VisualizePath(single, info, name); err != nil {
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
