package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func exit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := run(args, &out, &errs)
	return code, out.String() + errs.String()
}

const good = `{"client":1,"key":"k","cmd":["INCR","k"],"output":{"type":"int","value":1},"call":0,"return":10,"outcome":"ok"}`
const bad = `{"client":2,"key":"k","cmd":["INCR","k"],"output":{"type":"int","value":1},"call":20,"return":30,"outcome":"ok"}`

func TestExitCodes(t *testing.T) {
	if code, out := exit(t, write(t, good)); code != 0 {
		t.Fatalf("legal history: exit %d: %s", code, out)
	}
	html := t.TempDir()
	code, out := exit(t, "-html", html, write(t, good, bad))
	if code != 1 || !strings.Contains(out, `"k"`) {
		t.Fatalf("illegal history: exit %d: %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(html, "k.html")); err != nil {
		t.Fatalf("no visualisation written: %v", err)
	}
	if code, out := exit(t, write(t, good, "{not json")); code != 3 || !strings.Contains(out, "line 2") {
		t.Fatalf("bad input: exit %d: %s", code, out)
	}
	if code, _ := exit(t, write(t, `{"client":1,"key":"k","cmd":["EVAL","k"],"call":0,"return":1,"outcome":"ok","output":{"type":"ok"}}`)); code != 3 {
		t.Fatalf("an unmodelled command is bad input: exit %d", code)
	}
	if code, _ := exit(t); code != 3 {
		t.Fatalf("no file: exit %d", code)
	}
}

func TestATimeoutIsAFailure(t *testing.T) {
	// Many overlapping unknown increments and reads make the search large.
	var lines []string
	for i := 0; i < 400; i++ {
		lines = append(lines, fmt.Sprintf(`{"client":%d,"key":"k","cmd":["INCR","k"],"call":%d,"return":0,"outcome":"unknown"}`, i, i))
		lines = append(lines, fmt.Sprintf(`{"client":%d,"key":"k","cmd":["GET","k"],"output":{"type":"bulk","value":"%d"},"call":%d,"return":%d,"outcome":"ok"}`, 1000+i, i/2, i, i+5000))
	}
	if code, out := exit(t, "-timeout", "1ms", write(t, lines...)); code != 2 {
		t.Fatalf("timeout: exit %d: %s", code, out)
	}
}

func TestClockFlags(t *testing.T) {
	// SET PX 100 returns at 10 ms; a GET called at 200 ms still sees the value. The deadline is
	// at most 110 ms + skew, the GET's stamp at least 200 ms - skew: only a skew over 45 ms
	// explains it.
	set := `{"client":1,"key":"k","cmd":["SET","k","v","PX","100"],"output":{"type":"ok"},"call":0,"return":10000000,"outcome":"ok"}`
	get := `{"client":2,"key":"k","cmd":["GET","k"],"output":{"type":"bulk","value":"v"},"call":200000000,"return":210000000,"outcome":"ok"}`
	history := write(t, set, get)
	if code, out := exit(t, history); code != 1 {
		t.Fatalf("without skew: exit %d: %s", code, out)
	}
	if code, out := exit(t, "-skew-ms", "40", history); code != 1 {
		t.Fatalf("skew 40 ms: exit %d: %s", code, out)
	}
	if code, out := exit(t, "-skew-ms", "50", history); code != 0 {
		t.Fatalf("skew 50 ms: exit %d: %s", code, out)
	}
	// PXAT needs the wall clock at time 0.
	pxat := write(t, `{"client":1,"key":"k","cmd":["SET","k","v","PXAT","1100"],"output":{"type":"ok"},"call":0,"return":10000000,"outcome":"ok"}`,
		`{"client":2,"key":"k","cmd":["GET","k"],"output":{"type":"bulk","value":"v"},"call":150000000,"return":160000000,"outcome":"ok"}`)
	if code, out := exit(t, pxat); code != 3 || !strings.Contains(out, "epoch") {
		t.Fatalf("PXAT without an epoch: exit %d: %s", code, out)
	}
	if code, out := exit(t, "-epoch-ms", "1000", pxat); code != 1 {
		t.Fatalf("PXAT 100 ms after time 0, read at 150 ms: exit %d: %s", code, out)
	}
	if code, out := exit(t, "-epoch-ms", "900", pxat); code != 0 {
		t.Fatalf("PXAT 200 ms after time 0, read at 150 ms: exit %d: %s", code, out)
	}
	if code, _ := exit(t, "-epoch-ms", "soon", pxat); code != 3 {
		t.Fatalf("a bad -epoch-ms: exit %d", code)
	}
}
