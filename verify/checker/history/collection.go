package history

import (
	"fmt"
	"strconv"
	"strings"
)

// Hashes, lists and sorted sets keep their contents in State.Str as a packed sequence of
// strings (pack), so that State stays comparable: a hash is its fields in byte order, each
// followed by its value; a list is its elements in order; a sorted set is its members in byte
// order, each followed by its score's decimal text. State.Members is the count of fields,
// elements or members. An emptied collection is the absent key, as in Redis.

// pack joins strings unambiguously: each is its length in decimal, a colon, then its bytes.
func pack(items []string) string {
	var b strings.Builder
	for _, item := range items {
		b.WriteString(strconv.Itoa(len(item)))
		b.WriteByte(':')
		b.WriteString(item)
	}
	return b.String()
}

// unpack is pack's inverse.
func unpack(packed string) []string {
	var items []string
	for packed != "" {
		colon := strings.IndexByte(packed, ':')
		n, _ := strconv.Atoi(packed[:colon])
		items = append(items, packed[colon+1:colon+1+n])
		packed = packed[colon+1+n:]
	}
	return items
}

// collection is the state holding `items` (packed) as a `kind` of `count` entries, keeping
// the key's fencing token from s; none is the absent key.
func collection(s State, kind Kind, items []string, count int) State {
	if count == 0 {
		return cleared(s)
	}
	return State{Kind: kind, Str: pack(items), Members: count, Fence: s.Fence}
}

// holds reports whether s can be read as a `kind`: it is one, or absent (an empty one).
func holds(s State, kind Kind) bool {
	return s.Kind == Absent || s.Kind == kind
}

// arrayReply is an array of strings, never nil (an empty array, not a nil reply).
func arrayReply(items []string) Output {
	if items == nil {
		items = []string{}
	}
	return Output{Type: "array", Array: items}
}

// bulkOrNil is a bulk string, or nil if !ok.
func bulkOrNil(v string, ok bool) Output {
	if !ok {
		return nilReply
	}
	return Output{Type: "bulk", Str: v}
}

// arity checks that a command has between min and max arguments after its key (max < 0: no
// upper bound) and, with pairs, that they come in pairs.
func arity(name string, rest []string, min, max int, pairs bool) error {
	if len(rest) < min || max >= 0 && len(rest) > max || pairs && len(rest)%2 != 0 {
		return fmt.Errorf("%s: wrong number of arguments", name)
	}
	return nil
}

// ints parses integer arguments, or fails naming the command.
func ints(name string, args ...string) ([]int64, error) {
	out := make([]int64, len(args))
	for i, a := range args {
		v, ok := parseInt(a)
		if !ok {
			return nil, fmt.Errorf("%s: %q is not an integer", name, a)
		}
		out[i] = v
	}
	return out, nil
}

// span resolves Redis's inclusive [start, stop] indexes (negative from the end) over n
// items: the half-open range [from, to), empty when from >= to.
func span(start, stop int64, n int) (int, int) {
	size := int64(n)
	if start < 0 {
		start += size
	}
	if stop < 0 {
		stop += size
	}
	start = max(start, 0)
	if start > stop || start >= size {
		return 0, 0
	}
	stop = min(stop, size-1)
	return int(start), int(stop) + 1
}
