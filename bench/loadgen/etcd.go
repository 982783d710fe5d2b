package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdDialer shares at most -etcd-conns clientv3 clients (one gRPC connection each) among the
// benchmark's clients, round-robin per endpoint, as etcd's own benchmark tool does (--conns):
// gRPC multiplexes concurrent requests over one connection. Each clientv3 client knows one
// endpoint, so that the clients are spread (or pinned) as asked.
type etcdDialer struct {
	cfg   *Config
	mu    sync.Mutex
	conns map[string][]*clientv3.Client
	next  map[string]int
}

func newEtcdDialer(cfg *Config) *etcdDialer {
	return &etcdDialer{cfg: cfg, conns: map[string][]*clientv3.Client{}, next: map[string]int{}}
}

func (d *etcdDialer) connect(endpoint string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 3 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := c.Status(ctx, endpoint); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (d *etcdDialer) Dial(_ int, endpoint string) (Store, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	perEndpoint := d.cfg.Conns / len(d.cfg.Endpoints)
	if perEndpoint < 1 {
		perEndpoint = 1
	}
	conns := d.conns[endpoint]
	if len(conns) < perEndpoint {
		c, err := d.connect(endpoint)
		if err != nil {
			return nil, err
		}
		d.conns[endpoint] = append(conns, c)
		return &etcdStore{c: c}, nil
	}
	i := d.next[endpoint] % len(conns)
	d.next[endpoint]++
	return &etcdStore{c: conns[i]}, nil
}

// Leader asks every endpoint for its status and returns the one that is the leader.
func (d *etcdDialer) Leader(ctx context.Context) (string, error) {
	var lastErr error
	for _, ep := range d.cfg.Endpoints {
		c, err := d.connect(ep)
		if err != nil {
			lastErr = err
			continue
		}
		st, err := c.Status(ctx, ep)
		_ = c.Close()
		if err != nil {
			lastErr = err
			continue
		}
		if st.Header != nil && st.Leader != 0 && st.Header.MemberId == st.Leader {
			return ep, nil
		}
	}
	if lastErr != nil {
		return "", lastErr
	}
	return "", errors.New("no endpoint is the leader")
}

func (d *etcdDialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, conns := range d.conns {
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// etcdStore: reads are linearizable Gets (etcd's default, not WithSerializable); writes are Puts;
// an increment reads the counter and writes value+1 in a transaction guarded by the key's
// ModRevision, and on a conflict retries with the value the transaction's Else branch returned.
type etcdStore struct{ c *clientv3.Client }

func (s *etcdStore) Do(ctx context.Context, ops []Op) (int, error) {
	conflicts := 0
	for _, op := range ops {
		switch op.Kind {
		case Read:
			if _, err := s.c.Get(ctx, op.Key); err != nil {
				return conflicts, err
			}
		case Write:
			if _, err := s.c.Put(ctx, op.Key, op.Value); err != nil {
				return conflicts, err
			}
		case MSet:
			puts := make([]clientv3.Op, len(op.Keys))
			for i, k := range op.Keys {
				puts[i] = clientv3.OpPut(k, op.Value)
			}
			if _, err := s.c.Txn(ctx).Then(puts...).Commit(); err != nil {
				return conflicts, err
			}
		case Transfer:
			n, err := s.transfer(ctx, op)
			conflicts += n
			if err != nil {
				return conflicts, err
			}
		default:
			n, err := s.incr(ctx, op.Key)
			conflicts += n
			if err != nil {
				return conflicts, err
			}
		}
	}
	return conflicts, nil
}

func (s *etcdStore) incr(ctx context.Context, key string) (int, error) {
	g, err := s.c.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	kvs := g.Kvs
	for conflicts := 0; ; conflicts++ {
		var rev, v int64
		if len(kvs) > 0 {
			rev = kvs[0].ModRevision
			if v, err = strconv.ParseInt(string(kvs[0].Value), 10, 64); err != nil {
				return conflicts, fmt.Errorf("counter %q holds %q: %w", key, kvs[0].Value, err)
			}
		}
		t, err := s.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, strconv.FormatInt(v+1, 10))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return conflicts, err
		}
		if t.Succeeded {
			return conflicts, nil
		}
		kvs = t.Responses[0].GetResponseRange().Kvs
	}
}

// transfer reads both counters, then writes both in a transaction guarded by their
// ModRevisions, retrying on a conflict with the values the Else branch read.
func (s *etcdStore) transfer(ctx context.Context, op Op) (int, error) {
	read := []clientv3.Op{clientv3.OpGet(op.Key), clientv3.OpGet(op.To)}
	t, err := s.c.Txn(ctx).Then(read...).Commit()
	for conflicts := 0; ; conflicts++ {
		if err != nil {
			return conflicts, err
		}
		var revs [2]int64
		var vals [2]int64
		for i, key := range []string{op.Key, op.To} {
			kvs := t.Responses[i].GetResponseRange().Kvs
			var v []byte
			if len(kvs) > 0 {
				revs[i], v = kvs[0].ModRevision, kvs[0].Value
			}
			if vals[i], err = parseCounter(key, v, len(kvs) > 0); err != nil {
				return conflicts, err
			}
		}
		t, err = s.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(op.Key), "=", revs[0]),
				clientv3.Compare(clientv3.ModRevision(op.To), "=", revs[1])).
			Then(clientv3.OpPut(op.Key, strconv.FormatInt(vals[0]-op.Amount, 10)),
				clientv3.OpPut(op.To, strconv.FormatInt(vals[1]+op.Amount, 10))).
			Else(read...).
			Commit()
		if err == nil && t.Succeeded {
			return conflicts, nil
		}
	}
}

// Sum adds up the counters at keys (one linearizable transaction of Gets; absent is 0).
func (s *etcdStore) Sum(ctx context.Context, keys []string) (int64, error) {
	gets := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		gets[i] = clientv3.OpGet(k)
	}
	var total int64
	// etcd limits the operations of one transaction (128 by default).
	for start := 0; start < len(gets); start += 100 {
		end := min(start+100, len(gets))
		t, err := s.c.Txn(ctx).Then(gets[start:end]...).Commit()
		if err != nil {
			return 0, err
		}
		for i, r := range t.Responses {
			kvs := r.GetResponseRange().Kvs
			var v []byte
			if len(kvs) > 0 {
				v = kvs[0].Value
			}
			n, err := parseCounter(keys[start+i], v, len(kvs) > 0)
			if err != nil {
				return 0, err
			}
			total += n
		}
	}
	return total, nil
}

// Transport: gRPC unavailability and timeouts (a dead or partitioned member).
func (s *etcdStore) Transport(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded
	}
	return false
}

// Close: connections are shared and closed by the dialer.
func (s *etcdStore) Close() {}
