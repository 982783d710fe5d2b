package history

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// scoreMax bounds the scores the model accepts: whole numbers of at most 2^53 in magnitude,
// which a double holds exactly and whose reply text is their decimal form, in logless as in
// Redis. Other scores are rejected as bad input.
const scoreMax = int64(1) << 53

// parseScore reads a score argument the model accepts.
func parseScore(name, arg string) (int64, error) {
	v, ok := parseInt(arg)
	if !ok || v > scoreMax || v < -scoreMax {
		return 0, fmt.Errorf("%s score %q is not modelled (whole numbers within 2^53)", name, arg)
	}
	return v, nil
}

// scores is a sorted set's contents, by member.
func scores(s State) map[string]int64 {
	m := map[string]int64{}
	items := unpack(s.Str)
	for i := 0; i+1 < len(items); i += 2 {
		m[items[i]], _ = strconv.ParseInt(items[i+1], 10, 64)
	}
	return m
}

// zsetOf is the state holding the sorted set m, keeping the key's fencing token from s.
func zsetOf(s State, m map[string]int64) State {
	members := make([]string, 0, len(m))
	for k := range m {
		members = append(members, k)
	}
	sort.Strings(members)
	var items []string
	for _, k := range members {
		items = append(items, k, strconv.FormatInt(m[k], 10))
	}
	return collection(s, ZSet, items, len(m))
}

// ranked is m's members by score, then by member bytes (ZRANGE's order).
func ranked(m map[string]int64) []string {
	members := make([]string, 0, len(m))
	for k := range m {
		members = append(members, k)
	}
	sort.Slice(members, func(i, j int) bool {
		a, b := members[i], members[j]
		if m[a] != m[b] {
			return m[a] < m[b]
		}
		return a < b
	})
	return members
}

func scoreReply(v int64) Output { return Output{Type: "bulk", Str: strconv.FormatInt(v, 10)} }

// zaddArgs are ZADD's parsed options and pairs.
type zaddArgs struct {
	nx, xx, gt, lt, ch, incr bool
	scores                   []int64
	members                  []string
}

func parseZAdd(rest []string) (zaddArgs, error) {
	var a zaddArgs
	i := 0
options:
	for ; i < len(rest); i++ {
		switch strings.ToUpper(rest[i]) {
		case "NX":
			a.nx = true
		case "XX":
			a.xx = true
		case "GT":
			a.gt = true
		case "LT":
			a.lt = true
		case "CH":
			a.ch = true
		case "INCR":
			a.incr = true
		default:
			break options
		}
	}
	pairs := rest[i:]
	if len(pairs) == 0 || len(pairs)%2 != 0 {
		return a, fmt.Errorf("ZADD takes score member pairs")
	}
	if a.nx && a.xx || a.gt && a.lt || a.nx && (a.gt || a.lt) || a.incr && len(pairs) > 2 {
		return a, fmt.Errorf("ZADD option combination is refused by the front end")
	}
	for j := 0; j < len(pairs); j += 2 {
		v, err := parseScore("ZADD", pairs[j])
		if err != nil {
			return a, err
		}
		a.scores, a.members = append(a.scores, v), append(a.members, pairs[j+1])
	}
	return a, nil
}

// zadd runs ZADD on the members m (changed in place).
func zadd(m map[string]int64, a zaddArgs) Output {
	added, updated, processed := int64(0), int64(0), 0
	last := int64(0)
	for i, member := range a.members {
		score := a.scores[i]
		current, had := m[member]
		if !had {
			if !a.xx {
				m[member] = score
				added++
				processed++
				last = score
			}
			continue
		}
		if a.nx {
			continue
		}
		next := score
		if a.incr {
			next = current + score
		}
		if a.lt && next >= current || a.gt && next <= current {
			continue
		}
		processed++
		last = next
		if next != current {
			m[member] = next
			updated++
		}
	}
	switch {
	case a.incr && processed > 0:
		return scoreReply(last)
	case a.incr:
		return nilReply
	case a.ch:
		return intReply(added + updated)
	}
	return intReply(added)
}

// zsetCommand runs a sorted-set command on the data s, checking its arguments first.
func zsetCommand(s State, name string, rest []string) (Output, State, error) {
	var err error
	var nums []int64
	var add zaddArgs
	withScores, rev := false, false
	switch name {
	case "ZADD":
		add, err = parseZAdd(rest)
	case "ZREM", "ZMSCORE":
		err = arity(name, rest, 1, -1, false)
	case "ZSCORE", "ZRANK", "ZREVRANK":
		err = arity(name, rest, 1, 1, false)
	case "ZCARD":
		err = arity(name, rest, 0, 0, false)
	case "ZINCRBY":
		if err = arity(name, rest, 2, 2, false); err == nil {
			var d int64
			d, err = parseScore(name, rest[0])
			nums = []int64{d}
		}
	case "ZRANGE":
		if err = arity(name, rest, 2, 4, false); err == nil {
			nums, err = ints(name, rest[0], rest[1])
		}
		for _, o := range rest[min(2, len(rest)):] {
			switch strings.ToUpper(o) {
			case "WITHSCORES":
				withScores = true
			case "REV":
				rev = true
			default:
				err = fmt.Errorf("ZRANGE option %s is not modelled", o)
			}
		}
	case "ZPOPMIN", "ZPOPMAX":
		if err = arity(name, rest, 0, 1, false); err == nil && len(rest) == 1 {
			if nums, err = ints(name, rest[0]); err == nil && nums[0] < 0 {
				err = fmt.Errorf("%s count must not be negative", name)
			}
		}
	}
	if err != nil {
		return Output{}, s, err
	}
	if !holds(s, ZSet) {
		return wrongType, s, nil
	}
	m := scores(s)
	switch name {
	case "ZADD":
		reply := zadd(m, add)
		return reply, zsetOf(s, m), nil
	case "ZREM":
		removed := int64(0)
		for _, member := range rest {
			if _, had := m[member]; had {
				delete(m, member)
				removed++
			}
		}
		return intReply(removed), zsetOf(s, m), nil
	case "ZSCORE":
		v, had := m[rest[0]]
		if !had {
			return nilReply, s, nil
		}
		return scoreReply(v), s, nil
	case "ZMSCORE":
		values := make([]Output, len(rest))
		for i, member := range rest {
			values[i] = nilReply
			if v, had := m[member]; had {
				values[i] = scoreReply(v)
			}
		}
		return Output{Type: "items", Items: values}, s, nil
	case "ZINCRBY":
		m[rest[1]] += nums[0]
		return scoreReply(m[rest[1]]), zsetOf(s, m), nil
	case "ZCARD":
		return intReply(int64(len(m))), s, nil
	case "ZRANK", "ZREVRANK":
		order := ranked(m)
		for i, member := range order {
			if member == rest[0] {
				if name == "ZREVRANK" {
					i = len(order) - 1 - i
				}
				return intReply(int64(i)), s, nil
			}
		}
		return nilReply, s, nil
	case "ZRANGE":
		order := ranked(m)
		if rev {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		from, to := span(nums[0], nums[1], len(order))
		return arrayReply(withScoresOf(m, order[from:to], withScores)), s, nil
	}
	// ZPOPMIN, ZPOPMAX: without a count one pair (none if empty), with one up to count.
	order := ranked(m)
	if name == "ZPOPMAX" {
		for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
			order[i], order[j] = order[j], order[i]
		}
	}
	n := int64(1)
	if nums != nil {
		n = nums[0]
	}
	popped := order[:min(n, int64(len(order)))]
	reply := arrayReply(withScoresOf(m, popped, true))
	for _, member := range popped {
		delete(m, member)
	}
	return reply, zsetOf(s, m), nil
}

// withScoresOf is members, each followed by its score if withScores (a flat array: harnesses
// record RESP3's pairs flattened, as RESP2 sends them).
func withScoresOf(m map[string]int64, members []string, withScores bool) []string {
	if !withScores {
		return append([]string{}, members...)
	}
	out := []string{}
	for _, member := range members {
		out = append(out, member, strconv.FormatInt(m[member], 10))
	}
	return out
}
