// Command checker checks logless client histories (JSON lines) for linearizability per key.
//
// Exit status: 0 linearizable, 1 not linearizable, 2 the check timed out, 3 bad input.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"logless/checker/history"
)

func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("checker", flag.ContinueOnError)
	flags.SetOutput(stderr)
	timeout := flags.Duration("timeout", 60*time.Second, "give up (exit 2) after this long")
	htmlDir := flags.String("html", "", "write a visualisation of each failing key to this directory")
	skewMs := flags.Int64("skew-ms", 0, "bound on how far a replica's stamp lies outside [call, return] (records' skew_ms override it)")
	epochMs := flags.String("epoch-ms", "", "the wall clock (Unix ms) at the history's time 0, for EXAT/PXAT (records' epoch_ms override it)")
	if err := flags.Parse(args); err != nil {
		return 3
	}
	if flags.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: checker [-timeout 60s] [-html DIR] [-skew-ms N] [-epoch-ms T] FILE.jsonl...")
		return 3
	}
	clock := history.Clock{SkewMs: *skewMs}
	if *epochMs != "" {
		epoch, err := strconv.ParseInt(*epochMs, 10, 64)
		if err != nil {
			fmt.Fprintln(stderr, "error: -epoch-ms:", err)
			return 3
		}
		clock.EpochMs, clock.HasEpoch = epoch, true
	}
	var ops []porcupine.Operation
	var total history.Counts
	for _, name := range flags.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 3
		}
		more, counts, err := history.Read(f, clock)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "error: %s: %v\n", name, err)
			return 3
		}
		ops = append(ops, more...)
		total.Keys += counts.Keys
		total.Operations += counts.Operations
		total.Ok += counts.Ok
		total.Fail += counts.Fail
		total.Unknown += counts.Unknown
	}
	started := time.Now()
	verdict, err := history.Check(ops, *timeout, *htmlDir)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 3
	}
	fmt.Fprintf(stdout, "%s: %d keys, %d operations (ok %d, fail %d, unknown %d) in %.2fs\n",
		verdict.Result, total.Keys, total.Operations, total.Ok, total.Fail, total.Unknown,
		time.Since(started).Seconds())
	switch verdict.Result {
	case porcupine.Ok:
		return 0
	case porcupine.Illegal:
		fmt.Fprintf(stdout, "not linearizable: %q\n", verdict.BadKeys)
		return 1
	default:
		return 2
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
