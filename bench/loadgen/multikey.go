package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"time"
)

// The multi-key workloads: "mset" writes 2..10 keys of -keys registers in one MSET, and
// "transfers" moves an amount between two of -keys counters in one MULTI/EXEC (DECRBY, INCRBY;
// etcd: one transaction guarded by both keys' ModRevision). The counters start absent (0) and
// every transfer keeps their total at 0; after the run it is read back (TotalCheck), and a total
// that changed makes loadgen exit with status 3.

const (
	msetMinKeys  = 2
	msetMaxKeys  = 10
	maxTransfer  = 10
	checkChunk   = 1000
	checkTimeout = 30 * time.Second
	// ExitTotalChanged is loadgen's exit status when the transfers' total changed.
	ExitTotalChanged = 3
)

func accountKey(cfg *Config, i int) string { return cfg.Prefix + "acct" + strconv.Itoa(i) }

// msetOp writes 2..10 different keys (etcd refuses a transaction that names a key twice), fewer
// when there are fewer keys.
func (w *Workload) msetOp(r *rand.Rand, value string) Op {
	n := min(msetMinKeys+r.Intn(msetMaxKeys-msetMinKeys+1), w.cfg.Keys)
	seen := make(map[int]bool, n)
	keys := make([]string, 0, n)
	for len(keys) < n {
		k := w.keyGen.Next(r)
		if seen[k] {
			// Popular Pareto keys repeat: the rest of the batch is drawn uniformly.
			k = r.Intn(w.cfg.Keys)
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, w.cfg.Prefix+"k"+strconv.Itoa(k))
		}
	}
	return Op{Kind: MSet, Keys: keys, Value: value}
}

// transferOp moves 1..maxTransfer from one counter to another (a different one when there are
// several).
func (w *Workload) transferOp(r *rand.Rand) Op {
	from := w.keyGen.Next(r)
	to := w.keyGen.Next(r)
	if w.cfg.Keys > 1 {
		for to == from {
			to = r.Intn(w.cfg.Keys)
		}
	}
	return Op{Kind: Transfer, Key: accountKey(w.cfg, from), To: accountKey(w.cfg, to),
		Amount: int64(1 + r.Intn(maxTransfer))}
}

// TotalCheck is the transfers' invariant as found after the run.
type TotalCheck struct {
	Keys     int    `json:"keys"`
	Total    int64  `json:"total"`
	Expected int64  `json:"expected"`
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
}

// summer is a Store that can read many counters at once.
type summer interface {
	Sum(ctx context.Context, keys []string) (int64, error)
}

// checkTotal reads every counter through the first endpoint that answers and adds them up.
func checkTotal(cfg *Config, dialer Dialer) *TotalCheck {
	tc := &TotalCheck{Keys: cfg.Keys}
	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = accountKey(cfg, i)
	}
	var lastErr error
	for i, ep := range cfg.Endpoints {
		s, err := dialer.Dial(i, ep)
		if err != nil {
			lastErr = err
			continue
		}
		sum, ok := s.(summer)
		if !ok {
			s.Close()
			lastErr = errors.New("this system cannot read the counters back")
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		var total int64
		for start := 0; start < len(keys) && err == nil; start += checkChunk {
			var part int64
			part, err = sum.Sum(ctx, keys[start:min(start+checkChunk, len(keys))])
			total += part
		}
		cancel()
		s.Close()
		if err == nil {
			tc.Total, tc.OK = total, total == tc.Expected
			return tc
		}
		lastErr = err
	}
	tc.Error = fmt.Sprintf("cannot read the counters back: %v", lastErr)
	return tc
}

// parseCounter reads a counter's value; an absent one is 0.
func parseCounter(key string, v []byte, present bool) (int64, error) {
	if !present {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("counter %q holds %q: %w", key, v, err)
	}
	return n, nil
}
