package goredis

import (
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The cluster every test shares: `logless up --replicas 3` on free loopback ports in a
// temporary directory, started by TestMain and stopped (SIGTERM, SIGKILL after 10 s) when the
// tests end, as verify/clients/conftest.py does for redis-py.
const (
	replicas     = 3
	readyTimeout = 30 * time.Second
	stopGrace    = 10 * time.Second
	host         = "127.0.0.1"
)

// addresses are the replicas' client addresses.
var addresses []string

// bin is the logless binary ($LOGLESS_BIN).
var bin string

// engine is the cluster's engine: $LOGLESS_CLIENT_ENGINE, rmw by default.
var engine = "rmw"

// onlyUnder skips a test whose expectations hold under the engine `want` only, saying why.
func onlyUnder(t *testing.T, want, reason string) {
	t.Helper()
	if engine != want {
		t.Skipf("not under the %s engine: %s", engine, reason)
	}
}

// portFree reports whether port binds on loopback now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", host, port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// pickBasePort finds P such that P..P+nodes-1 (clients), P+1000.. (peers) and P+2000.. (HTTP)
// are free, below the usual ephemeral range.
func pickBasePort(nodes int) (int, error) {
	for i := 0; i < 500; i++ {
		base := 10000 + rand.Intn(20000)
		free := true
		for _, offset := range []int{0, 1000, 2000} {
			for r := 0; r < nodes; r++ {
				free = free && portFree(base+offset+r)
			}
		}
		if free {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no free base port for a %d-node cluster", nodes)
}

type cluster struct {
	cmd       *exec.Cmd
	exited    chan struct{} // closed when `logless up` has exited
	addresses []string      // the replicas' client addresses
	base      int           // the first client port; peers at +1000, HTTP at +2000
}

// httpAddr is node i's (0-based) HTTP address.
func (c *cluster) httpAddr(i int) string {
	return fmt.Sprintf("%s:%d", host, c.base+2000+i)
}

// start runs `logless up` with `nodes` nodes (and `extra` flags) and waits for its "serving"
// line.
func start(dir string, nodes int, extra ...string) (*cluster, error) {
	base, err := pickBasePort(nodes)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "up.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	args := []string{"up", "--port", fmt.Sprint(base), "--dir", dir,
		"--replicas", fmt.Sprint(nodes), "--ready-timeout-s", fmt.Sprint(int(readyTimeout.Seconds())),
		"--engine", engine}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that the SIGKILL fallback reaches the replicas too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &cluster{cmd: cmd, exited: make(chan struct{}), base: base}
	go func() { cmd.Wait(); close(c.exited) }()
	deadline := time.Now().Add(readyTimeout + 5*time.Second)
	for time.Now().Before(deadline) {
		text, _ := os.ReadFile(logPath)
		if strings.Contains(string(text), "serving") {
			for r := 0; r < nodes; r++ {
				c.addresses = append(c.addresses, fmt.Sprintf("%s:%d", host, base+r))
			}
			return c, nil
		}
		select {
		case <-c.exited:
			return nil, fmt.Errorf("`logless up` exited before serving:\n%s", text)
		case <-time.After(100 * time.Millisecond):
		}
	}
	c.stop()
	text, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("`logless up --port %d` did not become ready in %s:\n%s", base, readyTimeout, text)
}

// stop sends SIGTERM and waits for `logless up` to exit, then SIGKILLs its process group (the
// replicas a killed `logless up` left behind, or all of it after the grace period). It
// reports whether `logless up` stopped cleanly in time.
func (c *cluster) stop() bool {
	pid := c.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGTERM)
	clean := false
	select {
	case <-c.exited:
		clean = c.cmd.ProcessState.Success()
	case <-time.After(stopGrace):
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	<-c.exited
	return clean
}

// startIn starts a cluster of `replicas` (with `extra` flags) in a run directory under dir, on
// other ports when one was taken between the probe and the bind.
func startIn(dir string, extra ...string) (*cluster, error) {
	return startNodesIn(dir, replicas, extra...)
}

// startNodesIn is startIn with `nodes` nodes (a ring when `extra` gives --replication below it).
func startNodesIn(dir string, nodes int, extra ...string) (*cluster, error) {
	var c *cluster
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		run := filepath.Join(dir, fmt.Sprintf("run-%d", attempt))
		if err = os.Mkdir(run, 0o755); err == nil {
			c, err = start(run, nodes, extra...)
		}
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "in use") {
			break
		}
	}
	return c, err
}

func TestMain(m *testing.M) {
	bin = os.Getenv("LOGLESS_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "LOGLESS_BIN must name the logless binary (verify/clients/run sets it)")
		os.Exit(2)
	}
	if e := os.Getenv("LOGLESS_CLIENT_ENGINE"); e != "" {
		engine = e
	}
	if engine != "rmw" && engine != "multipaxos" {
		fmt.Fprintf(os.Stderr, "LOGLESS_CLIENT_ENGINE must be rmw or multipaxos, not %q\n", engine)
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "logless-goredis-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := startIn(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot start the cluster:", err)
		os.Exit(3)
	}
	addresses = c.addresses
	code := m.Run()
	if !c.stop() {
		fmt.Fprintln(os.Stderr, "`logless up` did not stop cleanly on SIGTERM")
		code = max(code, 1)
	}
	if code == 0 && os.Getenv("LOGLESS_CLIENT_KEEP") == "" {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "data directory kept:", dir)
	}
	os.Exit(code)
}
