package history

import (
	"fmt"
	"strings"
)

// Op is one operation as the model runs it: its command, parsed once when the history is read,
// and what is known of the stamp the replica gave it.
type Op struct {
	Args []string
	// Stamp is the window the operation's stamp lies in (ns, the history's time base).
	Stamp Window
	// Horizon is the latest stamp any operation on the key may have (ns): a lease that ends
	// later never runs out within the history.
	Horizon int64

	name   string
	rest   []string
	set    setArgs
	owner  string // LOCK.ACQUIRE's owner
	after  int64  // ns: (P)EXPIRE's time or LOCK.ACQUIRE's lease, after the stamp
	at     int64  // ns: SET EXAT/PXAT's instant in the history's time base
	nx, xx bool   // (P)EXPIRE's options
	queued []Op   // MULTI: the transaction's commands (transaction.go)

	// What the record says about time, from which Check computes Stamp and Horizon.
	skew             int64 // ns
	stampLo, stampHi optional
}

// parseOp parses a command once, rejecting what the model does not know. epochMs is the wall
// clock (Unix ms) at the history's time 0, if known: EXAT and PXAT need it.
func parseOp(args []string, epochMs *int64) (Op, error) {
	if len(args) < 2 {
		return Op{}, fmt.Errorf("a command needs a name and a key")
	}
	op := Op{Args: args, name: strings.ToUpper(args[0]), rest: args[2:]}
	switch op.name {
	case "SET":
		a, err := parseSet(op.rest)
		if err != nil {
			return op, err
		}
		if a.expiry == expiryAt {
			if epochMs == nil {
				return op, fmt.Errorf("SET EXAT/PXAT needs epoch_ms (the wall clock at time 0)")
			}
			rel := a.ms - *epochMs
			if rel > timeMaxMs || rel < -timeMaxMs {
				return op, fmt.Errorf("SET PXAT %d is more than 2^39 ms from epoch_ms", a.ms)
			}
			op.at = rel * ms
		}
		op.set = a
	case "EXPIRE", "PEXPIRE":
		if len(op.rest) < 1 {
			return op, fmt.Errorf("%s takes a time", op.name)
		}
		unit := int64(1)
		if op.name == "EXPIRE" {
			unit = 1000
		}
		t, ok := parseInt(op.rest[0])
		if !ok || t > timeMaxMs/unit || t < -timeMaxMs/unit {
			return op, fmt.Errorf("%s %s is not modelled (within 2^39 ms)", op.name, op.rest[0])
		}
		op.after = t * unit * ms
		for _, o := range op.rest[1:] {
			switch strings.ToUpper(o) {
			case "NX":
				op.nx = true
			case "XX":
				op.xx = true
			default:
				return op, fmt.Errorf("%s option %s is not modelled", op.name, o)
			}
		}
		if op.nx && op.xx {
			return op, fmt.Errorf("%s NX XX is refused by the front end", op.name)
		}
	case "PERSIST", "TTL", "PTTL":
		if len(op.rest) != 0 {
			return op, fmt.Errorf("%s takes only a key", op.name)
		}
	case "LOCK.ACQUIRE":
		if len(op.rest) != 2 || op.rest[0] == "" {
			return op, fmt.Errorf("LOCK.ACQUIRE takes an owner and a lease")
		}
		lease, ok := parseInt(op.rest[1])
		if !ok || lease <= 0 || lease > timeMaxMs {
			return op, fmt.Errorf("LOCK.ACQUIRE lease %s is not modelled (1 to 2^39 ms)", op.rest[1])
		}
		op.owner, op.after = op.rest[0], lease*ms
	case "MULTI":
		return op, fmt.Errorf("a transaction's commands go in queued, and cannot hold MULTI")
	default:
		if _, _, err := apply(State{}, op.name, op.rest); err != nil {
			return op, err
		}
	}
	return op, nil
}

// Step returns the states s may become when op takes effect with reply out (nil when the
// reply is unknown): one for each way the key's deadline and lease may stand at the stamp
// that gives that reply. None means the operation cannot take effect here.
func Step(s State, op *Op, out *Output) []State {
	return mergeWindows(appendStep(nil, s, op, out))
}

// appendStep appends Step's states, unmerged, to dst.
func appendStep(dst []State, s State, op *Op, out *Output) []State {
	if op.name == "MULTI" {
		return appendTransaction(dst, s, op, out)
	}
	var all [4]branch
	for _, b := range branches(&all, s, op) {
		dst = b.take(dst, s, op, out)
	}
	return dst
}

// A branch is one way the clock may stand at the operation's stamp: before or after the key's
// deadline, and for LOCK.ACQUIRE on a held lock, before or after its lease's end.
type branch struct {
	expired   bool
	leased    bool // the lease was looked at
	leaseOver bool
	lo, hi    int64 // the stamps this branch allows
}

// branches lists the feasible branches. A deadline D is after a stamp s iff D >= s + 1 ms,
// since both are whole milliseconds of the replicas' clocks.
func branches(buf *[4]branch, s State, op *Op) []branch {
	all := buf[:0]
	for _, expired := range []bool{false, true} {
		if expired && !s.HasTTL {
			continue
		}
		lo, hi := op.Stamp.Lo, op.Stamp.Hi
		if s.HasTTL {
			if expired {
				lo = max(lo, s.TTLLo)
			} else {
				hi = min(hi, s.TTLHi-ms)
			}
		}
		// Only LOCK.ACQUIRE looks at the lease, and only of a live lock somebody holds.
		leased := op.name == "LOCK.ACQUIRE" && !expired && s.Kind == Lock && s.Owner != ""
		for _, over := range []bool{false, true} {
			if over && !leased {
				continue
			}
			l, h := lo, hi
			if leased {
				if over {
					l = max(l, s.LeaseLo)
				} else {
					h = min(h, s.LeaseHi-ms)
				}
			}
			if l <= h {
				all = append(all, branch{expired: expired, leased: leased, leaseOver: over, lo: l, hi: h})
			}
		}
	}
	return all
}

// narrowed is s after an operation of this branch found it as the branch says, unchanged: the
// deadline (and lease) windows shrink to what the branch implies.
func (b branch) narrowed(s State) State {
	if s.HasTTL {
		if b.expired {
			s.TTLHi = min(s.TTLHi, b.hi)
		} else {
			s.TTLLo = max(s.TTLLo, b.lo+ms)
		}
	}
	if b.leased {
		if b.leaseOver {
			s.LeaseHi = min(s.LeaseHi, b.hi)
		} else {
			s.LeaseLo = max(s.LeaseLo, b.lo+ms)
		}
	}
	return s
}

// matching appends next to dst if the operation's reply is `reply`.
func matching(dst []State, out *Output, reply Output, next State) []State {
	if out != nil && !Same(reply, *out) {
		return dst
	}
	return append(dst, next)
}

// take runs op in this branch: the command sees the key's data, or nothing (keeping the fencing
// token) if it had expired, as common/commands does.
func (b branch) take(dst []State, s State, op *Op, out *Output) []State {
	view := data(s)
	if b.expired {
		view = cleared(s)
	}
	kept := b.narrowed(s)
	// A live key that is rewritten in place (INCR, SADD, LOCK.RELEASE, ...) keeps its deadline;
	// a value written over an expired key starts without one.
	keepTTL := func(n State) State {
		if !b.expired && s.HasTTL && n.Kind != Absent {
			n.HasTTL, n.TTLLo, n.TTLHi = true, kept.TTLLo, kept.TTLHi
		}
		return n
	}
	switch op.name {
	case "TTL", "PTTL":
		switch {
		case view.Kind == Absent:
			return matching(dst, out, intReply(-2), kept)
		case !s.HasTTL:
			return matching(dst, out, intReply(-1), kept)
		case out == nil:
			return append(dst, kept)
		}
		return b.remaining(dst, kept, op.name, *out)
	case "EXPIRE", "PEXPIRE":
		if view.Kind == Absent || op.nx && s.HasTTL || op.xx && !s.HasTTL {
			return matching(dst, out, intReply(0), kept)
		}
		if op.after <= 0 {
			// A time already past deletes the key.
			return matching(dst, out, intReply(1), cleared(s))
		}
		n := kept
		n.HasTTL, n.TTLLo, n.TTLHi = true, b.lo+op.after, b.hi+op.after
		return matching(dst, out, intReply(1), n)
	case "PERSIST":
		if view.Kind == Absent || !s.HasTTL {
			return matching(dst, out, intReply(0), kept)
		}
		n := kept
		n.HasTTL, n.TTLLo, n.TTLHi = false, 0, 0
		return matching(dst, out, intReply(1), n)
	case "SET":
		reply, n, applied := set(view, op.set)
		if !applied {
			return matching(dst, out, reply, kept)
		}
		switch op.set.expiry {
		case expiryKeep:
			n = keepTTL(n)
		case expiryAfter:
			n.HasTTL, n.TTLLo, n.TTLHi = true, b.lo+op.set.ms*ms, b.hi+op.set.ms*ms
		case expiryAt:
			n.HasTTL, n.TTLLo, n.TTLHi = true, op.at, op.at
		}
		return matching(dst, out, reply, n)
	case "LOCK.ACQUIRE":
		return b.acquire(dst, view, kept, op, out)
	}
	reply, n, _ := apply(view, op.name, op.rest)
	if n == view {
		return matching(dst, out, reply, kept)
	}
	return matching(dst, out, reply, keepTTL(n))
}

// remaining checks a TTL or PTTL answer on a live key with a deadline: D = stamp + answer (TTL
// rounds to the nearest second) pins the deadline window.
func (b branch) remaining(dst []State, s State, name string, out Output) []State {
	// Deadlines lie within 2^39 ms of the stamps; the bound keeps the arithmetic in range.
	limit := 2 * timeMaxMs
	if name == "TTL" {
		limit /= 1000
	}
	if out.Type != "int" || out.Int < 0 || out.Int > limit {
		return dst
	}
	lo, hi := out.Int*ms, out.Int*ms
	if name == "TTL" {
		lo, hi = (out.Int*1000-500)*ms, (out.Int*1000+499)*ms
	}
	lo = max(lo, ms) // a live key has at least 1 ms left
	s.TTLLo = max(s.TTLLo, b.lo+lo)
	s.TTLHi = min(s.TTLHi, b.hi+hi)
	if s.TTLLo > s.TTLHi {
		return dst
	}
	return append(dst, s)
}

// acquire is LOCK.ACQUIRE: the holder renews its lease and keeps the token; anyone else gets
// nil while the lease runs, and a new token once it is over or the lock is free.
func (b branch) acquire(dst []State, view, kept State, op *Op, out *Output) []State {
	if view.Kind != Absent && view.Kind != Lock {
		return matching(dst, out, wrongType, kept)
	}
	if b.leaseOver {
		view.Owner = ""
	}
	lo, hi := b.lo+op.after, b.hi+op.after
	if lo > op.Horizon {
		lo, hi = Beyond, Beyond
	}
	if view.Kind == Lock && view.Owner == op.owner {
		// The renewal keeps the key's deadline too, if it has one.
		n := kept
		n.LeaseLo, n.LeaseHi = lo, hi
		return matching(dst, out, intReply(view.Fence), n)
	}
	if view.Kind == Lock && view.Owner != "" {
		return matching(dst, out, nilReply, kept)
	}
	n := State{Kind: Lock, Owner: op.owner, Fence: view.Fence + 1, LeaseLo: lo, LeaseHi: hi}
	return matching(dst, out, intReply(n.Fence), n)
}

// mergeWindows joins alternatives that differ only in one window whose intervals overlap or
// touch (at 1 ns): their union is one interval, so the join loses nothing. A SET PX whose
// reply does not tell whether the old value had expired would otherwise double the states.
func mergeWindows(states []State) []State {
	for i := 0; i < len(states); i++ {
		for j := i + 1; j < len(states); j++ {
			if joined, ok := join(states[i], states[j]); ok {
				states[i] = joined
				states = append(states[:j], states[j+1:]...)
				j = i
			}
		}
	}
	return states
}

func join(a, b State) (State, bool) {
	if a == b {
		return a, true
	}
	ttl, lease := a, a
	ttl.TTLLo, ttl.TTLHi = b.TTLLo, b.TTLHi
	lease.LeaseLo, lease.LeaseHi = b.LeaseLo, b.LeaseHi
	switch {
	case ttl == b && touch(a.TTLLo, a.TTLHi, b.TTLLo, b.TTLHi):
		a.TTLLo, a.TTLHi = min(a.TTLLo, b.TTLLo), max(a.TTLHi, b.TTLHi)
		return a, true
	case lease == b && touch(a.LeaseLo, a.LeaseHi, b.LeaseLo, b.LeaseHi):
		a.LeaseLo, a.LeaseHi = min(a.LeaseLo, b.LeaseLo), max(a.LeaseHi, b.LeaseHi)
		return a, true
	}
	return a, false
}

// touch reports whether [alo, ahi] and [blo, bhi] overlap or are adjacent.
func touch(alo, ahi, blo, bhi int64) bool {
	return alo <= bhi && blo <= ahi || ahi < blo && blo-ahi == 1 || bhi < alo && alo-bhi == 1
}
