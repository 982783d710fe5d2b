package history

import (
	"fmt"
	"strings"
)

// A transaction (MULTI ... EXEC whose commands all name one key) is one operation: logless
// applies its queued commands in order to the key as one command, with one stamp, and EXEC
// answers each command's reply in its place (a command that fails answers its error and the
// others still apply). The record is `"cmd":["MULTI", key]` with the commands in `queued`,
// and its output, if known, is of type items with one reply per queued command.

// parseTransaction parses a transaction's record: cmd is ["MULTI", key].
func parseTransaction(cmd []string, queued [][]string, epochMs *int64) (Op, error) {
	if len(cmd) != 2 {
		return Op{}, fmt.Errorf("MULTI takes only the key; the commands go in queued")
	}
	if len(queued) == 0 {
		return Op{}, fmt.Errorf("a transaction needs its commands in queued")
	}
	op := Op{Args: cmd, name: "MULTI"}
	for i, args := range queued {
		if len(args) < 2 || args[1] != cmd[1] {
			return op, fmt.Errorf("queued command %d must be [NAME, key, ...] with the transaction's key", i)
		}
		sub, err := parseOp(args, epochMs)
		if err != nil {
			return op, fmt.Errorf("queued command %d: %w", i, err)
		}
		op.queued = append(op.queued, sub)
	}
	return op, nil
}

// text is the operation as the visualisation shows it.
func (op *Op) text() string {
	if op.name != "MULTI" {
		return strings.Join(op.Args, " ")
	}
	parts := make([]string, len(op.queued))
	for i := range op.queued {
		parts[i] = strings.Join(op.queued[i].Args, " ")
	}
	return "MULTI " + strings.Join(parts, "; ") + " EXEC"
}

// stamped is a state a transaction may have reached part way, with the window its stamp must
// lie in for that: every queued command sees the key at the same stamp.
type stamped struct {
	state State
	stamp Window
}

// appendTransaction appends the states s may become when the transaction op takes effect with
// reply out (nil when unknown): each queued command runs in every way the clock may stand at
// the stamp, within what the commands before it allowed.
func appendTransaction(dst []State, s State, op *Op, out *Output) []State {
	if out != nil && (out.Type != "items" || len(out.Items) != len(op.queued)) {
		return dst
	}
	current := []stamped{{s, op.Stamp}}
	for i := range op.queued {
		sub := op.queued[i]
		sub.Horizon = op.Horizon
		var reply *Output
		if out != nil {
			reply = &out.Items[i]
		}
		var next []stamped
		for _, c := range current {
			sub.Stamp = c.stamp
			var all [4]branch
			for _, b := range branches(&all, c.state, &sub) {
				for _, n := range b.take(nil, c.state, &sub, reply) {
					next = append(next, stamped{n, Window{b.lo, b.hi}})
				}
			}
		}
		current = next
	}
	for _, c := range current {
		dst = append(dst, c.state)
	}
	return dst
}
