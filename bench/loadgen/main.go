// Command loadgen is the closed-loop load generator of logless's comparison benchmark: one tool
// for every system under test, so that logless, redis-server and etcd are measured by the same
// client loop, the same histograms and the same clock.
//
//	loadgen -system redis|etcd -endpoints a,b,c \
//	        -workload counter|values|readers|registers|mset|transfers \
//	        -clients N -duration 10s -keys K -dist uniform|pareto -write-frac 0.05 \
//	        -value-bytes 16 -pipeline 1 -pin 0|spread|leader -out result.json
//
// Every client is a goroutine that sends one request (or one pipeline of -pipeline requests)
// and waits for its answer before sending the next. Redis-protocol systems (logless and
// redis-server) are driven by go-redis, one connection per client, with retries off; etcd by
// clientv3 with linearizable reads. Latencies go into HDR histograms per operation type (read,
// write), for the whole measured window and per second (the timeline); the result is written as
// JSON and a progress line per second goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Config is the parsed command line.
type Config struct {
	System     string
	Endpoints  []string
	Workload   string
	Clients    int
	Duration   time.Duration
	Warmup     time.Duration
	Keys       int
	Dist       string
	Alpha      float64
	WriteFrac  float64
	ValueBytes int
	Pipeline   int
	Pin        string
	Out        string
	OpTimeout  time.Duration
	Failover   bool
	Prefix     string
	Conns      int
	Seed       int64
	Label      string
	Quiet      bool
}

func parseArgs(args []string) (*Config, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	c := &Config{}
	var endpoints string
	fs.StringVar(&c.System, "system", "redis", "redis (any Redis-protocol server: logless, redis-server) or etcd")
	fs.StringVar(&endpoints, "endpoints", "127.0.0.1:6379", "comma-separated host:port list")
	fs.StringVar(&c.Workload, "workload", "registers", "counter, values, readers, registers, mset (2..10 keys per MSET) or transfers (MULTI/EXEC between counters)")
	fs.IntVar(&c.Clients, "clients", 16, "closed-loop clients (for readers: the readers; one writer is added)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "measured duration")
	fs.DurationVar(&c.Warmup, "warmup", 0, "unmeasured warm-up before the measured duration")
	fs.IntVar(&c.Keys, "keys", 1000, "keys of the registers and mset workloads, counters of transfers")
	fs.StringVar(&c.Dist, "dist", "uniform", "key distribution of the registers workload: uniform or pareto")
	fs.Float64Var(&c.Alpha, "pareto-alpha", 1.16, "shape of the Pareto distribution (1.16: 80% of requests on 20% of keys)")
	fs.Float64Var(&c.WriteFrac, "write-frac", 0.05, "fraction of writes (counter: increments) for counter, values and registers")
	fs.IntVar(&c.ValueBytes, "value-bytes", 16, "bytes of a written value")
	fs.IntVar(&c.Pipeline, "pipeline", 1, "requests per round trip (Redis protocol only)")
	fs.StringVar(&c.Pin, "pin", "spread", "spread: client i talks to endpoint i mod n; 0: all to the first; leader: etcd's leader (first endpoint for Redis)")
	fs.StringVar(&c.Out, "out", "", "where to write the JSON result (default: stdout)")
	fs.DurationVar(&c.OpTimeout, "op-timeout", 5*time.Second, "timeout of one request")
	fs.BoolVar(&c.Failover, "failover", true, "after a connection error, move the client to the next endpoint")
	fs.StringVar(&c.Prefix, "key-prefix", "lg:", "prefix of every key")
	fs.IntVar(&c.Conns, "etcd-conns", 32, "etcd: at most this many gRPC connections, shared round-robin by the clients")
	fs.Int64Var(&c.Seed, "seed", 1, "random seed")
	fs.StringVar(&c.Label, "label", "", "free text copied into the result")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.Endpoints = append(c.Endpoints, e)
		}
	}
	switch {
	case c.System != "redis" && c.System != "etcd":
		return nil, fmt.Errorf("-system must be redis or etcd, not %q", c.System)
	case len(c.Endpoints) == 0:
		return nil, errors.New("-endpoints is empty")
	case !map[string]bool{"counter": true, "values": true, "readers": true, "registers": true, "mset": true, "transfers": true}[c.Workload]:
		return nil, fmt.Errorf("-workload must be counter, values, readers, registers, mset or transfers, not %q", c.Workload)
	case c.Clients < 1:
		return nil, errors.New("-clients must be at least 1")
	case c.Duration <= 0:
		return nil, errors.New("-duration must be positive")
	case c.Keys < 1:
		return nil, errors.New("-keys must be at least 1")
	case c.Dist != "uniform" && c.Dist != "pareto":
		return nil, fmt.Errorf("-dist must be uniform or pareto, not %q", c.Dist)
	case c.WriteFrac < 0 || c.WriteFrac > 1:
		return nil, errors.New("-write-frac must be within [0, 1]")
	case c.ValueBytes < 1:
		return nil, errors.New("-value-bytes must be at least 1")
	case c.Pipeline < 1:
		return nil, errors.New("-pipeline must be at least 1")
	case c.Pipeline > 1 && c.System == "etcd":
		return nil, errors.New("-pipeline > 1 is for the Redis protocol only")
	case c.Pin != "spread" && c.Pin != "0" && c.Pin != "leader":
		return nil, fmt.Errorf("-pin must be spread, 0 or leader, not %q", c.Pin)
	case c.Alpha <= 1:
		return nil, errors.New("-pareto-alpha must be above 1")
	}
	return c, nil
}

// Kind is an operation type: reads and writes (increments count as writes).
type Kind int

const (
	Read Kind = iota
	Write
	Incr
	// MSet writes Keys (all to Value) in one command.
	MSet
	// Transfer moves Amount from Key to To atomically.
	Transfer
)

func (k Kind) histName() string {
	if k == Read {
		return "read"
	}
	return "write"
}

// Op is one request.
type Op struct {
	Kind   Kind
	Key    string
	Value  string
	Keys   []string
	To     string
	Amount int64
}

// Store is a connection of one client to a system.
type Store interface {
	// Do runs ops (one round trip when the store pipelines); conflicts counts etcd's failed
	// increment transactions that were retried.
	Do(ctx context.Context, ops []Op) (conflicts int, err error)
	// Transport tells whether err is a connection-level failure (the client then fails over).
	Transport(err error) bool
	Close()
}

// Dialer opens a Store to an endpoint for client i.
type Dialer interface {
	Dial(i int, endpoint string) (Store, error)
	Leader(ctx context.Context) (string, error)
	Close()
}

// KeyGen draws key indices in [0, keys).
//
// Pareto keys follow the paper's "Pareto distribution with alpha ~ 1.16 (80% of requests
// targeted 20% of registers)": the keys' popularities are Pareto(alpha) distributed, so the key
// of popularity rank r (as a fraction p = r/keys) is asked with a weight proportional to
// p^(-1/alpha), and the most popular fraction q of the keys gets q^(1-1/alpha) of the requests
// (0.2^(1-1/1.16) = 0.8). Drawing p = u^(alpha/(alpha-1)) for a uniform u does exactly that.
// Rank 0 is the most popular key.
type KeyGen struct {
	keys     int
	pareto   bool
	exponent float64
}

func NewKeyGen(keys int, dist string, alpha float64) *KeyGen {
	return &KeyGen{keys: keys, pareto: dist == "pareto", exponent: alpha / (alpha - 1)}
}

// Next draws one key index.
func (g *KeyGen) Next(r *rand.Rand) int {
	if g.keys == 1 {
		return 0
	}
	if !g.pareto {
		return r.Intn(g.keys)
	}
	i := int(float64(g.keys) * math.Pow(r.Float64(), g.exponent))
	if i >= g.keys {
		i = g.keys - 1
	}
	return i
}

const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func randomValue(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.Intn(len(alphabet))]
	}
	return string(b)
}

// Workload makes the ops of client i.
type Workload struct {
	cfg    *Config
	keyGen *KeyGen
}

// Writer tells whether client i only writes (the readers workload's writer is client 0).
func (w *Workload) Next(i int, r *rand.Rand, value string) Op {
	c := w.cfg
	write := r.Float64() < c.WriteFrac
	switch c.Workload {
	case "counter":
		if write {
			return Op{Kind: Incr, Key: c.Prefix + "counter"}
		}
		return Op{Kind: Read, Key: c.Prefix + "counter"}
	case "values":
		if write {
			return Op{Kind: Write, Key: c.Prefix + "value", Value: value}
		}
		return Op{Kind: Read, Key: c.Prefix + "value"}
	case "readers":
		if i == 0 {
			return Op{Kind: Write, Key: c.Prefix + "register", Value: value}
		}
		return Op{Kind: Read, Key: c.Prefix + "register"}
	case "mset":
		return w.msetOp(r, value)
	case "transfers":
		return w.transferOp(r)
	default:
		key := c.Prefix + "k" + strconv.Itoa(w.keyGen.Next(r))
		if write {
			return Op{Kind: Write, Key: key, Value: value}
		}
		return Op{Kind: Read, Key: key}
	}
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

// recorder holds one client's histograms: the measured window's and the current second's.
type recorder struct {
	mu        sync.Mutex
	total     [2]*hdrhistogram.Histogram
	interval  [2]*hdrhistogram.Histogram
	errors    map[string]int64
	intErrors int64
	conflicts int64
}

func newRecorder() *recorder {
	return &recorder{
		total:    [2]*hdrhistogram.Histogram{newHist(), newHist()},
		interval: [2]*hdrhistogram.Histogram{newHist(), newHist()},
		errors:   map[string]int64{},
	}
}

func histIndex(k Kind) int {
	if k == Read {
		return 0
	}
	return 1
}

// errorKind shortens an error message to a stable bucket name.
func errorKind(err error) string {
	s := err.Error()
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(s, "deadline exceeded") || strings.Contains(s, "i/o timeout") {
		return "timeout"
	}
	if strings.Contains(s, "connection refused") {
		return "connection refused"
	}
	if strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe") || strings.Contains(s, "EOF") {
		return "connection lost"
	}
	if f := strings.Fields(s); len(f) > 0 && strings.ToUpper(f[0]) == f[0] && len(f[0]) > 2 {
		return f[0] // a Redis error code: TRYAGAIN, UNCERTAIN, ERR, ...
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// Stats summarises one histogram.
type Stats struct {
	Count      int64   `json:"count"`
	Throughput float64 `json:"throughput"`
	MeanUs     float64 `json:"mean_us"`
	P50Us      int64   `json:"p50_us"`
	P90Us      int64   `json:"p90_us"`
	P99Us      int64   `json:"p99_us"`
	P999Us     int64   `json:"p999_us"`
	MaxUs      int64   `json:"max_us"`
}

func stats(h *hdrhistogram.Histogram, seconds float64) Stats {
	s := Stats{Count: h.TotalCount()}
	if s.Count == 0 {
		return s
	}
	s.Throughput = float64(s.Count) / seconds
	s.MeanUs = math.Round(h.Mean()*10) / 10
	s.P50Us = h.ValueAtQuantile(50)
	s.P90Us = h.ValueAtQuantile(90)
	s.P99Us = h.ValueAtQuantile(99)
	s.P999Us = h.ValueAtQuantile(99.9)
	s.MaxUs = h.Max()
	return s
}

// Second is one line of the timeline.
type Second struct {
	T      float64 `json:"t"`
	Read   Stats   `json:"read"`
	Write  Stats   `json:"write"`
	Errors int64   `json:"errors"`
}

// Result is the JSON output.
type Result struct {
	System      string           `json:"system"`
	Label       string           `json:"label,omitempty"`
	Workload    string           `json:"workload"`
	Endpoints   []string         `json:"endpoints"`
	Clients     int              `json:"clients"`
	Goroutines  int              `json:"goroutines"`
	Keys        int              `json:"keys"`
	Dist        string           `json:"dist"`
	WriteFrac   float64          `json:"write_frac"`
	ValueBytes  int              `json:"value_bytes"`
	Pipeline    int              `json:"pipeline"`
	Pin         string           `json:"pin"`
	DurationS   float64          `json:"duration_s"`
	WarmupS     float64          `json:"warmup_s"`
	Read        Stats            `json:"read"`
	Write       Stats            `json:"write"`
	Total       Stats            `json:"total"`
	Errors      int64            `json:"errors"`
	ErrorKinds  map[string]int64 `json:"error_kinds"`
	Conflicts   int64            `json:"conflicts"`
	Failovers   int64            `json:"failovers"`
	Timeline    []Second         `json:"timeline"`
	StartedUnix float64          `json:"started_unix"`
	MeasureUnix float64          `json:"measure_start_unix"`
	TotalCheck  *TotalCheck      `json:"total_check,omitempty"`
}

func run(cfg *Config, dialer Dialer, stop <-chan struct{}) (*Result, error) {
	goroutines := cfg.Clients
	if cfg.Workload == "readers" {
		goroutines++
	}
	endpointOf := func(i int) int { return i % len(cfg.Endpoints) }
	endpoints := cfg.Endpoints
	switch cfg.Pin {
	case "0":
		endpointOf = func(int) int { return 0 }
	case "leader":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		leader, err := dialer.Leader(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("finding the leader: %w", err)
		}
		// The leader first, so that failover moves on to the others.
		endpoints = append([]string{leader}, without(cfg.Endpoints, leader)...)
		endpointOf = func(int) int { return 0 }
	}
	stores := make([]Store, goroutines)
	current := make([]int, goroutines)
	for i := range stores {
		current[i] = endpointOf(i)
		s, err := dialer.Dial(i, endpoints[current[i]])
		if err != nil {
			for _, s := range stores[:i] {
				s.Close()
			}
			return nil, fmt.Errorf("connecting client %d to %s: %w", i, endpoints[current[i]], err)
		}
		stores[i] = s
	}
	recs := make([]*recorder, goroutines)
	for i := range recs {
		recs[i] = newRecorder()
	}
	workload := &Workload{cfg: cfg, keyGen: NewKeyGen(cfg.Keys, cfg.Dist, cfg.Alpha)}
	var measuring, stopping atomic.Bool
	var failovers atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(cfg.Seed*1_000_003 + int64(i)))
			values := make([]string, 16)
			for j := range values {
				values[j] = randomValue(r, cfg.ValueBytes)
			}
			ops := make([]Op, cfg.Pipeline)
			rec := recs[i]
			for ctx.Err() == nil {
				for j := range ops {
					ops[j] = workload.Next(i, r, values[r.Intn(len(values))])
				}
				opCtx, opCancel := context.WithTimeout(ctx, cfg.OpTimeout)
				t0 := time.Now()
				conflicts, err := stores[i].Do(opCtx, ops)
				us := time.Since(t0).Microseconds()
				opCancel()
				if stopping.Load() {
					return
				}
				if us < 1 {
					us = 1
				}
				rec.mu.Lock()
				if err != nil {
					rec.intErrors++
					if measuring.Load() {
						rec.errors[errorKind(err)]++
					}
				} else {
					for _, op := range ops {
						h := histIndex(op.Kind)
						rec.interval[h].RecordValue(us)
						if measuring.Load() {
							rec.total[h].RecordValue(us)
						}
					}
					if measuring.Load() {
						rec.conflicts += int64(conflicts)
					}
				}
				rec.mu.Unlock()
				if err != nil {
					if cfg.Failover && len(endpoints) > 1 && stores[i].Transport(err) {
						stores[i].Close()
						current[i] = (current[i] + 1) % len(endpoints)
						if s, derr := dialer.Dial(i, endpoints[current[i]]); derr == nil {
							stores[i] = s
							failovers.Add(1)
						} else {
							// Keep a store that fails fast; the next error moves on again.
							stores[i] = failedStore{derr}
						}
					}
					// An error may be immediate (a refused connection): do not spin.
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		}(i)
	}
	// The clock: warm-up, then one timeline line per second of the measured window.
	var timeline []Second
	collect := func() Second {
		read, write := newHist(), newHist()
		var errs int64
		for _, rec := range recs {
			rec.mu.Lock()
			read.Merge(rec.interval[0])
			write.Merge(rec.interval[1])
			rec.interval[0].Reset()
			rec.interval[1].Reset()
			errs += rec.intErrors
			rec.intErrors = 0
			rec.mu.Unlock()
		}
		return Second{Read: stats(read, 1), Write: stats(write, 1), Errors: errs}
	}
	interrupted := false
	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-stop:
			interrupted = true
			return false
		}
	}
	if cfg.Warmup > 0 {
		wait(cfg.Warmup)
	}
	collect()
	measuring.Store(true)
	measureStart := time.Now()
	next := measureStart
	for !interrupted {
		next = next.Add(time.Second)
		end := measureStart.Add(cfg.Duration)
		last := !next.Before(end)
		if last {
			next = end
		}
		if !wait(time.Until(next)) {
			break
		}
		sec := collect()
		sec.T = math.Round(time.Since(measureStart).Seconds()*1000) / 1000
		timeline = append(timeline, sec)
		if !cfg.Quiet {
			fmt.Fprintf(os.Stderr, "loadgen %s %s t=%5.1fs  read %8.0f/s p99 %7.2f ms  write %8.0f/s p99 %7.2f ms  errors %d\n",
				cfg.System, cfg.Workload, sec.T, sec.Read.Throughput, float64(sec.Read.P99Us)/1000,
				sec.Write.Throughput, float64(sec.Write.P99Us)/1000, sec.Errors)
		}
		if last {
			break
		}
	}
	measuring.Store(false)
	measured := time.Since(measureStart).Seconds()
	stopping.Store(true)
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.OpTimeout + 2*time.Second):
		fmt.Fprintln(os.Stderr, "loadgen: some clients did not stop; leaving them")
	}
	for _, s := range stores {
		s.Close()
	}
	res := &Result{
		System: cfg.System, Label: cfg.Label, Workload: cfg.Workload, Endpoints: cfg.Endpoints,
		Clients: cfg.Clients, Goroutines: goroutines, Keys: cfg.Keys, Dist: cfg.Dist,
		WriteFrac: cfg.WriteFrac, ValueBytes: cfg.ValueBytes, Pipeline: cfg.Pipeline, Pin: cfg.Pin,
		DurationS: math.Round(measured*1000) / 1000, WarmupS: cfg.Warmup.Seconds(),
		ErrorKinds: map[string]int64{}, Timeline: timeline, Failovers: failovers.Load(),
		StartedUnix: float64(start.UnixMilli()) / 1000,
		MeasureUnix: float64(measureStart.UnixMilli()) / 1000,
	}
	read, write, total := newHist(), newHist(), newHist()
	for _, rec := range recs {
		rec.mu.Lock()
		read.Merge(rec.total[0])
		write.Merge(rec.total[1])
		for k, v := range rec.errors {
			res.ErrorKinds[k] += v
			res.Errors += v
		}
		res.Conflicts += rec.conflicts
		rec.mu.Unlock()
	}
	total.Merge(read)
	total.Merge(write)
	res.Read, res.Write, res.Total = stats(read, measured), stats(write, measured), stats(total, measured)
	if cfg.Workload == "transfers" {
		res.TotalCheck = checkTotal(cfg, dialer)
	}
	if interrupted {
		return res, errors.New("interrupted")
	}
	return res, nil
}

func without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

type failedStore struct{ err error }

func (f failedStore) Do(context.Context, []Op) (int, error) { return 0, f.err }
func (f failedStore) Transport(error) bool                  { return true }
func (f failedStore) Close()                                {}

func writeResult(cfg *Config, res *Result) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if cfg.Out == "" {
		_, err = os.Stdout.Write(data)
		return err
	}
	tmp := cfg.Out + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, cfg.Out)
}

func main() {
	cfg, err := parseArgs(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	var dialer Dialer
	if cfg.System == "etcd" {
		dialer = newEtcdDialer(cfg)
	} else {
		dialer = newRedisDialer(cfg)
	}
	defer dialer.Close()
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigs; close(stop) }()
	res, err := run(cfg, dialer, stop)
	if res != nil {
		if werr := writeResult(cfg, res); werr != nil {
			fmt.Fprintln(os.Stderr, "loadgen: writing the result:", werr)
			os.Exit(1)
		}
		kinds := make([]string, 0, len(res.ErrorKinds))
		for k, v := range res.ErrorKinds {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(kinds)
		if !cfg.Quiet {
			fmt.Fprintf(os.Stderr, "loadgen %s %s clients=%d: read %.0f/s (p99 %.2f ms), write %.0f/s (p99 %.2f ms), errors %d %v\n",
				cfg.System, cfg.Workload, cfg.Clients, res.Read.Throughput, float64(res.Read.P99Us)/1000,
				res.Write.Throughput, float64(res.Write.P99Us)/1000, res.Errors, kinds)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	if tc := res.TotalCheck; tc != nil {
		if tc.Error != "" {
			fmt.Fprintln(os.Stderr, "loadgen:", tc.Error)
			os.Exit(1)
		}
		if !tc.OK {
			fmt.Fprintf(os.Stderr, "loadgen: ATOMICITY VIOLATED: the %d counters' total is %d after the transfers, not %d\n",
				tc.Keys, tc.Total, tc.Expected)
			os.Exit(ExitTotalChanged)
		}
	}
}
