//! Chaos runs on real `logless server` processes: a clean protocol must pass, and each
//! deliberate protocol bug must be reported as a violation.
//!
//! The runner needs the `logless` binary of the same profile and target directory, with the
//! `fault-injection` feature (its deliberate bugs). The first test to need it runs
//! `cargo build -p logless --locked --features fault-injection` for that profile and directory
//! (a no-op when it is up to date, e.g. under `cargo test --workspace`, whose test build of
//! `logless` has the feature); `LOGLESS_BIN` overrides this. Tests run one at a time (the
//! machine may have only two cores), each bounded in time.
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `target/<profile>` of this test executable (`target/<profile>/deps/chaos-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf()
}

/// The `logless` binary, built for this profile and target directory if needed.
fn logless_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("LOGLESS_BIN") {
            return PathBuf::from(bin);
        }
        let profile_dir = profile_dir();
        let target = profile_dir.parent().expect("target directory");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev".to_string(),
            Some(name) => name.to_string(),
            None => panic!("no profile directory in {}", profile_dir.display()),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let started = Instant::now();
        let status = Command::new(cargo)
            .args([
                "build",
                "-p",
                "logless",
                "--locked",
                "--features",
                "fault-injection",
            ])
            .args(["--profile", &profile])
            .env("CARGO_TARGET_DIR", target)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "cargo build -p logless --features fault-injection failed"
        );
        eprintln!(
            "logless binary up to date in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        profile_dir.join("logless")
    })
    .clone()
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    elapsed: Duration,
}

/// Runs `logless-chaos run ARGS --out DIR`, stopping it (SIGINT, then SIGKILL) after `limit`.
fn chaos(args: &[&str], out: &Path, limit: Duration) -> Outcome {
    // Building the binary (the first time) does not count against the run's limit.
    let logless_bin = logless_bin();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_logless-chaos"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--logless-bin")
        .arg(logless_bin)
        .args(["--progress-s", "0"])
        .stdout(Stdio::piped())
        // Its own process group, which its replicas join: a run stopped for taking too long
        // takes them with it instead of leaving them running.
        .process_group(0)
        .spawn()
        .expect("logless-chaos starts");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let mut stopped = false;
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        let elapsed = started.elapsed();
        let group = format!("-{}", child.id());
        if elapsed > limit && !stopped {
            // SIGINT lets the runner stop its replicas.
            let _ = Command::new("kill").args(["-INT", "--", &group]).status();
            stopped = true;
        }
        if elapsed > limit + Duration::from_secs(15) {
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = reader.join().unwrap_or_default();
    println!("{stdout}");
    assert!(!stopped, "the run took longer than {limit:?}");
    Outcome {
        code,
        stdout,
        elapsed: started.elapsed(),
    }
}

fn out_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("logless-chaos-test-")
        .tempdir()
        .expect("temporary directory")
}

/// Keeps the run's files when the test fails, and says where they are.
fn keep_on_failure(dir: tempfile::TempDir, ok: bool) {
    if !ok {
        eprintln!("the run's files are kept in {}", dir.keep().display());
    }
}

/// Contention for the mutation runs: few keys at a time for sixteen clients, one fault after
/// another (each run names its keys).
const CONTENDED: &[&str] = &[
    "--duration-s",
    "20",
    "--clients",
    "16",
    "--fault-gap-ms",
    "800",
    "--fault-ms",
    "1500",
    "--think-ms",
    "1",
    "--checker-timeout-s",
    "60",
];

#[test]
fn a_clean_cluster_passes_under_every_kind_of_fault() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    let run = chaos(
        &[
            "--duration-s",
            "40",
            "--think-ms",
            "5",
            "--replicas",
            "3",
            "--seed",
            "42",
            "--nemesis",
            "kill,pause,partition,kill-all",
            "--key-kinds",
            "counter,register,set,expiring,lock",
            "--checker-timeout-s",
            "240",
        ],
        dir.path(),
        Duration::from_secs(420),
    );
    eprintln!("clean run: {:.1} s", run.elapsed.as_secs_f64());
    let expiry = expiry_figures(&run.stdout);
    let removed = removed_registers(&run.stdout);
    let ok = run.code == Some(0) && run.stdout.contains("verdict:     PASS");
    keep_on_failure(dir, ok);
    assert!(ok, "exit {:?}", run.code);
    // Deleted and expired registers were removed from the replicas while the faults went on,
    // and none came back (the checker passed).
    let removed = removed.expect("the summary's removals line");
    assert!(removed > 0, "{removed} registers removed");
    // Expiry was exercised: keys were found expired and leases taken over while the clients
    // ran, not only at the final reads.
    let [timed_ops, expired_reads, _, takeovers, _] = expiry.expect("the summary's expiry line");
    assert!(
        timed_ops > 5_000,
        "{timed_ops} operations on expiring keys and locks"
    );
    assert!(
        expired_reads > 50,
        "{expired_reads} reads found a key expired"
    );
    assert!(takeovers > 50, "{takeovers} leases taken over");
}

#[test]
fn hashes_lists_sorted_sets_and_their_transactions_pass_under_faults() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    let mut args = CONTENDED.to_vec();
    args.extend(["--seed", "11", "--key-kinds", "hash,list,zset"]);
    let run = chaos(&args, dir.path(), Duration::from_secs(90));
    eprintln!("collections run: {:.1} s", run.elapsed.as_secs_f64());
    let ok = run.code == Some(0) && run.stdout.contains("verdict:     PASS");
    let transactions = std::fs::read_to_string(dir.path().join("history.jsonl")).map_or(0, |h| {
        h.lines().filter(|l| l.contains(r#""queued""#)).count()
    });
    keep_on_failure(dir, ok);
    assert!(ok, "exit {:?}", run.code);
    assert!(transactions > 100, "{transactions} transactions");
}

/// A ring of five replicas with three per key (`--replication 3`, docs/ring.md) under load
/// while replicas are killed (one or two at a time, or all) and restarted: the clients are
/// spread over every replica, so commands on keys a replica does not hold are forwarded to
/// their replicas, and may meet a forwarding link broken by a kill (UNCERTAIN). No
/// acknowledged write is lost, and each key's history is linearizable.
#[test]
fn a_ring_of_five_passes_kills_with_clients_on_every_replica() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    let run = chaos(
        &[
            "--duration-s",
            "15",
            "--replicas",
            "5",
            "--replication",
            "3",
            "--clients",
            "10",
            "--seed",
            "28",
            "--nemesis",
            "kill,kill-all",
            "--fault-gap-ms",
            "1000",
            "--fault-ms",
            "2000",
            "--checker-timeout-s",
            "60",
        ],
        dir.path(),
        Duration::from_secs(120),
    );
    eprintln!("ring run: {:.1} s", run.elapsed.as_secs_f64());
    let ok = run.code == Some(0) && run.stdout.contains("verdict:     PASS");
    keep_on_failure(dir, ok);
    assert!(ok, "exit {:?}", run.code);
}

/// The same ring with two spare nodes in every peer list (issue 28): while the clients run on
/// all seven nodes, the membership nemesis adds a spare, removes a member (which keeps serving
/// by forwarding) and replaces a killed member with the other spare, one change at a time,
/// one fault at a time (`--member-serial`: the changes in the fault cycle, not in their own
/// lane), with kills of one node at a time between them and, on some changes, during them: of another
/// node of the change, or of the change's coordinator (the change then asked of another
/// member; seed 28 kills the coordinator of `remove 2` in its joint stage). No acknowledged
/// write is lost, each key's history is linearizable, counters are exact, at least two changes
/// complete and at least one coordinator is killed mid-change.
#[test]
fn a_ring_of_five_passes_nodes_added_removed_and_replaced_under_kills() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    let run = chaos(
        &[
            "--duration-s",
            "20",
            "--replicas",
            "5",
            "--replication",
            "3",
            "--spares",
            "2",
            "--clients",
            "10",
            "--seed",
            "28",
            "--nemesis",
            "kill,member",
            "--member-serial",
            "--fault-gap-ms",
            "800",
            "--fault-ms",
            "1500",
            "--checker-timeout-s",
            "60",
        ],
        dir.path(),
        Duration::from_secs(150),
    );
    eprintln!("ring membership run: {:.1} s", run.elapsed.as_secs_f64());
    let line = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("membership:"));
    let changes = line.and_then(|l| l.split_whitespace().next()?.parse::<u32>().ok());
    let coordinators_killed = line.and_then(|l| {
        let (_, after) = l.split_once("coordinator killed ")?;
        after.split_whitespace().next()?.parse::<u32>().ok()
    });
    let ok = run.code == Some(0) && run.stdout.contains("verdict:     PASS");
    keep_on_failure(
        dir,
        ok && changes >= Some(2) && coordinators_killed >= Some(1),
    );
    assert!(ok, "exit {:?}", run.code);
    assert!(changes >= Some(2), "{changes:?} changes completed");
    assert!(
        coordinators_killed >= Some(1),
        "{coordinators_killed:?} coordinators killed mid-change"
    );
}

/// The numbers of the summary's `expiry:` line: operations on expiring keys and locks, reads
/// that found a key expired, final reads that did, leases taken over, acquisitions refused.
fn expiry_figures(stdout: &str) -> Option<[u64; 5]> {
    summary_numbers(stdout, "expiry:")
}

/// The registers the replicas of a 3-replica run removed: the first number of the summary's
/// `removals:` line (the others are node ids and their counts).
fn removed_registers(stdout: &str) -> Option<u64> {
    let [total, ..] = summary_numbers::<7>(stdout, "removals:")?;
    Some(total)
}

/// The numbers of the summary's line that starts with `heading`, if it has `N` of them.
fn summary_numbers<const N: usize>(stdout: &str, heading: &str) -> Option<[u64; N]> {
    let line = stdout.lines().find(|l| l.starts_with(heading))?;
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    numbers.try_into().ok()
}

/// Two counters at a time: every bug of the protocol core shows as lost or doubled increments.
const TWO_COUNTERS: &[&str] = &["--keys", "2", "--key-kinds", "counter"];

/// `args` with `extra`, options with their values: those `args` has take the place of its own.
fn with_options<'a>(mut args: Vec<&'a str>, extra: &[&'a str]) -> Vec<&'a str> {
    for option in extra.chunks(2) {
        match args.iter().position(|a| *a == option[0]) {
            Some(i) => args[i + 1] = option[1],
            None => args.extend(option),
        }
    }
    args
}

/// Seconds of workload and faults of a run with a deliberate bug: `LOGLESS_CHAOS_BUG_RUN_S`,
/// else 8. Each bug of these tests shows within a few seconds of contention (8 s runs with
/// seeds 7 and 1 each found 6 to 230 keys not linearizable or with lost writes, and the psmr
/// bug's digests differed), and every fault kind of the run fires at least once; longer runs
/// by hand, e.g. `LOGLESS_CHAOS_BUG_RUN_S=60 cargo test --profile tests -p logless-chaos
/// --test chaos -- caught`.
fn bug_run_secs() -> String {
    std::env::var("LOGLESS_CHAOS_BUG_RUN_S")
        .ok()
        .filter(|s| s.parse::<u64>().is_ok_and(|n| n > 0))
        .unwrap_or_else(|| "8".to_string())
}

/// The time limit of a run with a deliberate bug of `secs` seconds: its start, final reads,
/// checker (which takes longer on a history that is not linearizable) and stop included.
fn bug_run_limit(secs: &str) -> Duration {
    Duration::from_secs(secs.parse::<u64>().unwrap_or(8) + 80)
}

fn mutation_is_caught(bug: &str, seed: &str, extra: &[&str]) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    let mut args = CONTENDED.to_vec();
    args.extend(["--inject-bug", bug, "--seed", seed]);
    let secs = bug_run_secs();
    let args = with_options(with_options(args, extra), &["--duration-s", &secs]);
    let run = chaos(&args, dir.path(), bug_run_limit(&secs));
    eprintln!("{bug}: {:.1} s", run.elapsed.as_secs_f64());
    let ok = run.code == Some(1) && run.stdout.contains("verdict:     VIOLATION");
    keep_on_failure(dir, ok);
    assert!(
        ok,
        "{bug} was not reported as a violation (exit {:?})",
        run.code
    );
}

#[test]
fn accepting_an_inconsistent_quorum_is_caught() {
    mutation_is_caught("accept-inconsistent-quorum", "7", TWO_COUNTERS);
}

#[test]
fn accepting_an_inconsistent_quorum_is_caught_on_lists() {
    // Lost or doubled pushes and pops show in the lists' contents. Fewer clients and shorter
    // keys than for counters: refuting a list's history takes the checker longer than a
    // counter's, since far fewer of its orders give the same list.
    let args = [
        "--keys",
        "2",
        "--key-kinds",
        "list",
        "--clients",
        "6",
        "--ops-per-key",
        "40",
    ];
    mutation_is_caught("accept-inconsistent-quorum", "7", &args);
}

#[test]
fn ignoring_learned_is_caught() {
    mutation_is_caught("ignore-learned", "7", TWO_COUNTERS);
}

#[test]
fn replying_before_persisting_is_caught() {
    // The replicas write acceptor states 50 ms after replying; killing every replica at once
    // loses promises already made, and with them acknowledged writes.
    let args = [TWO_COUNTERS, &["--nemesis", "kill-all,kill"]].concat();
    mutation_is_caught("reply-before-persist", "7", &args);
}

/// Four expiring registers at a time, each short-lived.
const SHORT_LIVED_EXPIRING: &[&str] = &[
    "--keys",
    "4",
    "--key-kinds",
    "expiring",
    "--ops-per-key",
    "50",
];

#[test]
fn a_store_that_drops_times_to_live_is_caught() {
    // The replicas keep every time to live in memory but write acceptor states without it: only
    // a replica restarted from its store, after kill -9, brings expired keys back to life, and
    // the checker sees a key read live after a read found it expired or its deadline passed.
    // Short-lived keys keep each key's history small enough for the checker's time limit.
    let args = [SHORT_LIVED_EXPIRING, &["--nemesis", "kill-all,kill"]].concat();
    mutation_is_caught("persist-without-ttl", "7", &args);
}

/// Registers and expiring registers, 32 at a time and 15 operations each: many keys are in
/// use when a fault starts and end (deleted or expired, then removed) before it is healed.
const DYING_REGISTERS: &[&str] = &[
    "--keys",
    "32",
    "--key-kinds",
    "register,expiring",
    "--ops-per-key",
    "15",
];

/// By hand (`cargo test --profile tests -p logless-chaos --test chaos -- --ignored`): real
/// processes' timing decides whether a removal meets a replica that missed the deletion, and
/// a 20 s run caught it in two of three runs of the whole suite; CI checks that the clean run
/// removes registers, and the simulations and the model catch this bug on every run.
#[test]
#[ignore = "by hand: caught in two of three 20 s runs, not on every CI run"]
fn a_removal_before_every_replica_holds_the_tombstone_is_caught() {
    // A removal goes ahead once a quorum answered its read: a replica that was killed or cut
    // off when the key was deleted (or its value expired) still holds an older value, and a
    // read that asks it with a replica that forgot the key brings that value back. (A paused
    // replica or a stalled link gets the delayed messages, the deletion among them, so only
    // faults that lose messages matter.)
    let args = [DYING_REGISTERS, &["--nemesis", "kill,partition"]].concat();
    mutation_is_caught("remove-before-all-hold-tombstone", "7", &args);
}

#[test]
fn a_multipaxos_cluster_passes_leader_kills_with_atomic_multi_key_commands() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    // A multipaxos cluster whose leader is killed again and again, with per-key clients on
    // counters, registers and sets and multi-key clients on groups of counters.
    let multipaxos = [
        "--engine",
        "multipaxos",
        "--nemesis",
        "kill-leader,partition,pause",
        "--seed",
        "5",
        "--clients",
        "8",
        "--key-kinds",
        "counter,register,set",
        "--multi-key-clients",
        "6",
    ];
    let args = with_options(CONTENDED.to_vec(), &multipaxos);
    let run = chaos(&args, dir.path(), Duration::from_secs(90));
    eprintln!("multipaxos run: {:.1} s", run.elapsed.as_secs_f64());
    let ok = run.code == Some(0) && run.stdout.contains("verdict:     PASS");
    let leader_kills = std::fs::read_to_string(dir.path().join("faults.jsonl")).map_or(0, |f| {
        f.lines()
            .filter(|l| l.contains(r#""kind":"kill-leader""#) && l.contains("kill -9 leader"))
            .count()
    });
    let multi_key = multi_key_figures(&run.stdout);
    keep_on_failure(dir, ok);
    assert!(ok, "exit {:?}", run.code);
    assert!(leader_kills >= 2, "{leader_kills} leaders killed");
    let [groups, transfers, msets, mgets, wide_groups, wide_msets, wide_mgets, ..] =
        multi_key.expect("the summary's multi-key line");
    assert!(
        groups >= 5 && wide_groups >= 5,
        "{groups} and {wide_groups} groups"
    );
    assert!(
        transfers > 300 && msets > 50 && mgets > 200,
        "{transfers} transfers, {msets} MSETs, {mgets} MGETs"
    );
    assert!(
        wide_msets > 100 && wide_mgets > 200,
        "{wide_msets} wide MSETs, {wide_mgets} wide MGETs"
    );
}

/// The log engine under mPaxos (`--recovery pmem` on `--durability emulp`): replicas and
/// leaders killed with kill -9 restart through the persistent-memory path (resuming the log,
/// voting at once, rebuilding the state machine meanwhile), and every key's history passes.
#[test]
fn a_multipaxos_cluster_under_mpaxos_passes_kills_through_the_pmem_path() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    let mpaxos = [
        "--engine",
        "multipaxos",
        "--recovery",
        "pmem",
        "--durability",
        "emulp",
        "--nemesis",
        "kill-leader,kill",
        "--seed",
        "11",
        "--duration-s",
        "12",
        "--clients",
        "8",
        "--key-kinds",
        "counter,register",
        // The replicas say at info level how they restarted.
        "--log-level",
        "info",
    ];
    let args = with_options(CONTENDED.to_vec(), &mpaxos);
    let run = chaos(&args, dir.path(), Duration::from_secs(60));
    eprintln!("mPaxos run: {:.1} s", run.elapsed.as_secs_f64());
    let ok = run.code == Some(0) && run.stdout.contains("verdict:     PASS");
    let resumed = node_logs(dir.path())
        .iter()
        .map(|log| {
            log.matches("resumed the log from persistent memory")
                .count()
        })
        .sum::<usize>();
    keep_on_failure(dir, ok);
    assert!(ok, "exit {:?}", run.code);
    assert!(
        resumed >= 2,
        "{resumed} restarts resumed from persistent memory"
    );
}

/// The replicas' logs (`node-*.log` in a run's output directory `dir`).
fn node_logs(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    entries
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("node-") && name.ends_with(".log")
        })
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

/// The numbers of the summary's `multi-key:` line: groups, transfers, MSETs and MGETs
/// answered, wide groups, their MSETs and MGETs answered, unknown, refused.
fn multi_key_figures(stdout: &str) -> Option<[u64; 9]> {
    summary_numbers(stdout, "multi-key:")
}

#[test]
fn a_log_executed_at_each_replicas_own_clock_is_caught() {
    // The replicas of the log engine execute each batch at their own clock instead of the
    // leader's stamp: one paused, or restarted after kill -9 and replaying its log, executes
    // late and finds keys expired that were live when the others executed the same commands,
    // and then answers from a state the others do not have.
    let args = [
        SHORT_LIVED_EXPIRING,
        &["--engine", "multipaxos", "--nemesis", "kill,pause"],
    ]
    .concat();
    mutation_is_caught("log-execute-at-local-clock", "7", &args);
}

/// The psmr engine with two workers (three streams: `g0`, `g1`, `g_all`), sixteen clients on
/// four entries of the B⁺-tree service at a time: inserts and deletes run in synchronous mode,
/// reads and updates in their key's worker group, so that a key's commands cross both modes.
const PSMR_ENTRIES: &[&str] = &[
    "--engine",
    "psmr",
    "--psmr-threads",
    "2",
    "--key-kinds",
    "entry",
    "--keys",
    "4",
    "--nemesis",
    "kill,pause,partition",
    "--duration-s",
    "15",
];

#[test]
fn a_psmr_cluster_passes_kills_pauses_and_partitions() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    let args = with_options([CONTENDED, &["--seed", "3"]].concat(), PSMR_ENTRIES);
    let run = chaos(&args, dir.path(), Duration::from_secs(80));
    eprintln!("psmr run: {:.1} s", run.elapsed.as_secs_f64());
    let ok = run.code == Some(0)
        && run.stdout.contains("verdict:     PASS")
        && run.stdout.contains("digests:     equal on every replica");
    keep_on_failure(dir, ok);
    assert!(ok, "exit {:?}", run.code);
}

/// A run with `bug` injected into the psmr engine must end with the replicas' digests
/// different (besides the violations Porcupine finds): the comparison sees the divergence.
fn psmr_divergence_is_caught(bug: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = out_dir();
    let secs = bug_run_secs();
    let args = with_options(
        with_options(
            [CONTENDED, &["--seed", "3", "--inject-bug", bug]].concat(),
            PSMR_ENTRIES,
        ),
        &["--duration-s", &secs],
    );
    let run = chaos(&args, dir.path(), bug_run_limit(&secs));
    eprintln!("{bug}: {:.1} s", run.elapsed.as_secs_f64());
    let ok = run.code == Some(1) && run.stdout.contains("digests:     DIFFER");
    keep_on_failure(dir, ok);
    assert!(
        ok,
        "exit {:?}: the replicas' digests did not differ",
        run.code
    );
}

#[test]
fn psmr_synchronous_mode_without_the_barrier_is_caught() {
    // Worker 0 executes an insert or a delete (g_all) as soon as it reaches it while worker 1
    // runs past it: each replica interleaves them with worker 1's reads and updates of the same
    // keys as its threads happen to run, the replicas diverge, and reads from different
    // replicas contradict each other.
    psmr_divergence_is_caught("psmr-no-barrier");
}

#[test]
#[ignore = "by hand (cargo test -p logless-chaos --test chaos -- --ignored): CI's time; the P-SMR \
            simulations (engines/psmr tests) catch this bug in every CI run"]
fn a_psmr_merge_by_arrival_order_is_caught() {
    // Each worker merges its group's stream and g_all's in the order their batches reached its
    // replica, not by their stamps: the replicas order inserts and deletes differently against
    // reads and updates of the same keys, and their states diverge.
    psmr_divergence_is_caught("psmr-merge-by-arrival");
}
