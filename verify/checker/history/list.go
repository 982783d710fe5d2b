package history

import "fmt"

var (
	noSuchKey       = Output{Type: "error", Str: "ERR no such key"}
	indexOutOfRange = Output{Type: "error", Str: "ERR index out of range"}
)

// listOf is the state holding the list items, keeping the key's fencing token from s.
func listOf(s State, items []string) State {
	return collection(s, List, items, len(items))
}

// index resolves a list index (negative from the end) over n items.
func index(i int64, n int) (int, bool) {
	if i < 0 {
		i += int64(n)
	}
	return int(i), i >= 0 && i < int64(n)
}

// listCommand runs a list command on the data s, checking its arguments first.
func listCommand(s State, name string, rest []string) (Output, State, error) {
	var err error
	var nums []int64
	switch name {
	case "LPUSH", "RPUSH", "LPUSHX", "RPUSHX":
		err = arity(name, rest, 1, -1, false)
	case "LPOP", "RPOP":
		if err = arity(name, rest, 0, 1, false); err == nil && len(rest) == 1 {
			if nums, err = ints(name, rest[0]); err == nil && nums[0] < 0 {
				err = fmt.Errorf("%s count must not be negative", name)
			}
		}
	case "LLEN":
		err = arity(name, rest, 0, 0, false)
	case "LRANGE", "LTRIM":
		if err = arity(name, rest, 2, 2, false); err == nil {
			nums, err = ints(name, rest...)
		}
	case "LINDEX":
		if err = arity(name, rest, 1, 1, false); err == nil {
			nums, err = ints(name, rest[0])
		}
	case "LSET", "LREM":
		if err = arity(name, rest, 2, 2, false); err == nil {
			nums, err = ints(name, rest[0])
		}
	}
	if err != nil {
		return Output{}, s, err
	}
	if !holds(s, List) {
		return wrongType, s, nil
	}
	items := unpack(s.Str)
	switch name {
	case "LPUSH", "RPUSH", "LPUSHX", "RPUSHX":
		if (name == "LPUSHX" || name == "RPUSHX") && s.Kind == Absent {
			return intReply(0), s, nil
		}
		for _, v := range rest {
			if name[0] == 'L' {
				items = append([]string{v}, items...)
			} else {
				items = append(items, v)
			}
		}
		return intReply(int64(len(items))), listOf(s, items), nil
	case "LPOP", "RPOP":
		n := 1
		if nums != nil {
			if s.Kind == Absent {
				return nilReply, s, nil
			}
			n = int(min(nums[0], int64(len(items))))
		} else if len(items) == 0 {
			return nilReply, s, nil
		}
		var popped []string
		for i := 0; i < n; i++ {
			if name == "LPOP" {
				popped, items = append(popped, items[0]), items[1:]
			} else {
				popped, items = append(popped, items[len(items)-1]), items[:len(items)-1]
			}
		}
		if nums == nil {
			return Output{Type: "bulk", Str: popped[0]}, listOf(s, items), nil
		}
		return arrayReply(popped), listOf(s, items), nil
	case "LLEN":
		return intReply(int64(len(items))), s, nil
	case "LRANGE":
		from, to := span(nums[0], nums[1], len(items))
		return arrayReply(items[from:to]), s, nil
	case "LTRIM":
		from, to := span(nums[0], nums[1], len(items))
		return okReply, listOf(s, items[from:to]), nil
	case "LINDEX":
		i, ok := index(nums[0], len(items))
		if !ok {
			return nilReply, s, nil
		}
		return Output{Type: "bulk", Str: items[i]}, s, nil
	case "LSET":
		if s.Kind == Absent {
			return noSuchKey, s, nil
		}
		i, ok := index(nums[0], len(items))
		if !ok {
			return indexOutOfRange, s, nil
		}
		items[i] = rest[1]
		return okReply, listOf(s, items), nil
	}
	// LREM count value: from the head if count > 0, from the tail if < 0, all if 0.
	count, value := nums[0], rest[1]
	limit := count
	if limit < 0 {
		limit = -limit
	}
	keep := make([]bool, len(items))
	removed := int64(0)
	for k := range items {
		i := k
		if count < 0 {
			i = len(items) - 1 - k
		}
		if items[i] == value && (limit == 0 || removed < limit) {
			removed++
			continue
		}
		keep[i] = true
	}
	var left []string
	for i, v := range items {
		if keep[i] {
			left = append(left, v)
		}
	}
	return intReply(removed), listOf(s, left), nil
}
