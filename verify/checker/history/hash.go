package history

import (
	"sort"
	"strconv"
)

var hashNotInt = Output{Type: "error", Str: "ERR hash value is not an integer"}

// fields is a hash's contents, by field.
func fields(s State) map[string]string {
	m := map[string]string{}
	items := unpack(s.Str)
	for i := 0; i+1 < len(items); i += 2 {
		m[items[i]] = items[i+1]
	}
	return m
}

// sortedFields are m's fields in byte order.
func sortedFields(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// hashOf is the state holding the hash m, keeping the key's fencing token from s.
func hashOf(s State, m map[string]string) State {
	var items []string
	for _, f := range sortedFields(m) {
		items = append(items, f, m[f])
	}
	return collection(s, Hash, items, len(m))
}

// hashCommand runs a hash command on the data s. Arguments are checked before the data, so
// that parseOp can check them on an empty key.
func hashCommand(s State, name string, rest []string) (Output, State, error) {
	var err error
	switch name {
	case "HSET", "HSETNX":
		if name == "HSETNX" {
			err = arity(name, rest, 2, 2, true)
		} else {
			err = arity(name, rest, 2, -1, true)
		}
	case "HGET", "HEXISTS", "HSTRLEN":
		err = arity(name, rest, 1, 1, false)
	case "HMGET", "HDEL":
		err = arity(name, rest, 1, -1, false)
	case "HLEN", "HKEYS", "HVALS", "HGETALL":
		err = arity(name, rest, 0, 0, false)
	case "HINCRBY":
		if err = arity(name, rest, 2, 2, false); err == nil {
			_, err = ints(name, rest[1])
		}
	}
	if err != nil {
		return Output{}, s, err
	}
	if !holds(s, Hash) {
		return wrongType, s, nil
	}
	m := fields(s)
	switch name {
	case "HSET":
		added := int64(0)
		for i := 0; i < len(rest); i += 2 {
			if _, had := m[rest[i]]; !had {
				added++
			}
			m[rest[i]] = rest[i+1]
		}
		return intReply(added), hashOf(s, m), nil
	case "HSETNX":
		if _, had := m[rest[0]]; had {
			return intReply(0), s, nil
		}
		m[rest[0]] = rest[1]
		return intReply(1), hashOf(s, m), nil
	case "HGET":
		v, ok := m[rest[0]]
		return bulkOrNil(v, ok), s, nil
	case "HMGET":
		values := make([]Output, len(rest))
		for i, f := range rest {
			v, ok := m[f]
			values[i] = bulkOrNil(v, ok)
		}
		return Output{Type: "items", Items: values}, s, nil
	case "HDEL":
		removed := int64(0)
		for _, f := range rest {
			if _, had := m[f]; had {
				delete(m, f)
				removed++
			}
		}
		return intReply(removed), hashOf(s, m), nil
	case "HEXISTS":
		_, ok := m[rest[0]]
		if ok {
			return intReply(1), s, nil
		}
		return intReply(0), s, nil
	case "HSTRLEN":
		return intReply(int64(len(m[rest[0]]))), s, nil
	case "HLEN":
		return intReply(int64(len(m))), s, nil
	case "HKEYS", "HVALS", "HGETALL":
		var out []string
		for _, f := range sortedFields(m) {
			switch name {
			case "HKEYS":
				out = append(out, f)
			case "HVALS":
				out = append(out, m[f])
			default:
				out = append(out, f, m[f])
			}
		}
		return arrayReply(out), s, nil
	}
	// HINCRBY
	delta, _ := parseInt(rest[1])
	current := int64(0)
	if v, had := m[rest[0]]; had {
		n, ok := parseInt(v)
		if !ok {
			return hashNotInt, s, nil
		}
		current = n
	}
	next := current + delta
	if (delta > 0 && next < current) || (delta < 0 && next > current) {
		return overflow, s, nil
	}
	m[rest[0]] = strconv.FormatInt(next, 10)
	return intReply(next), hashOf(s, m), nil
}
