//! The CPU time a system under test uses, read from Linux's `/proc`.
//!
//! Each system runs as a tree of processes (`timeout`, then the server, and for `logless up`
//! its replicas), so a point's CPU time is that of every process descending from the ones this
//! program started, summed over their threads, user and system time together. Processes that
//! exit during a point take their time with them; the systems' servers do not exit while
//! measured.
use std::collections::HashMap;

/// The unit of `/proc/<pid>/stat` times: the kernel's `USER_HZ`, 100 on every Linux
/// architecture (it is fixed by the kernel's user-space interface, not by its tick rate).
const TICKS_PER_SECOND: f64 = 100.0;

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Its id.
    pub pid: u32,
    /// Its parent's id.
    pub ppid: u32,
    /// User and system time of all its threads, in clock ticks (100 per second).
    pub ticks: u64,
}

/// Parses one `/proc/<pid>/stat` line. The command name, in parentheses, may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<ProcStat> {
    let (head, tail) = line.rsplit_once(')')?;
    let pid = head.split_once(" (")?.0.trim().parse().ok()?;
    // After the name: state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt, cminflt,
    // majflt, cmajflt, utime, stime (fields 3 to 15 of proc(5)).
    let fields: Vec<&str> = tail.split_whitespace().collect();
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(ProcStat {
        pid,
        ppid: u32::try_from(number(1)?).ok()?,
        ticks: number(11)? + number(12)?,
    })
}

/// Every process now running.
fn all_processes() -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter_map(|line| parse_stat(&line))
        .collect()
}

/// The CPU time of `roots` and all their descendants in `processes`, in ticks.
pub fn tree_ticks(processes: &[ProcStat], roots: &[u32]) -> u64 {
    let mut children: HashMap<u32, Vec<&ProcStat>> = HashMap::new();
    for p in processes {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut total = 0;
    let mut stack: Vec<&ProcStat> = processes
        .iter()
        .filter(|p| roots.contains(&p.pid))
        .collect();
    while let Some(p) = stack.pop() {
        total += p.ticks;
        stack.extend(children.get(&p.pid).into_iter().flatten());
    }
    total
}

/// The processes descending from `root` now (not `root` itself), children before their own
/// children.
pub fn descendants(root: u32) -> Vec<u32> {
    let processes = all_processes();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for p in processes.iter().filter(|p| p.ppid == parent) {
            found.push(p.pid);
            frontier.push(p.pid);
        }
    }
    found
}

/// The CPU seconds used so far by the running processes `roots` and their descendants.
pub fn tree_seconds(roots: &[u32]) -> f64 {
    tree_ticks(&all_processes(), roots) as f64 / TICKS_PER_SECOND
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_pid_parent_and_time() {
        let line = "4242 (redis-server) S 17 4242 17 0 -1 4194560 1000 0 0 0 250 37 0 0 20 0 4 0 \
                    123 456 789";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                pid: 4242,
                ppid: 17,
                ticks: 287
            })
        );
        // A name with spaces and parentheses.
        let odd = "7 (a) (b c) R 1 7 7 0 -1 0 0 0 0 0 5 6 0 0";
        assert_eq!(
            parse_stat(odd),
            Some(ProcStat {
                pid: 7,
                ppid: 1,
                ticks: 11
            })
        );
        assert_eq!(parse_stat("7 (short) R 1 2"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn a_tree_sums_its_descendants_only() {
        let p = |pid, ppid, ticks| ProcStat { pid, ppid, ticks };
        let processes = [
            p(1, 0, 1_000),
            p(10, 1, 1),
            p(11, 10, 20),
            p(12, 11, 300),
            p(13, 10, 4_000),
            p(20, 1, 50_000),
        ];
        assert_eq!(tree_ticks(&processes, &[10]), 4_321);
        assert_eq!(tree_ticks(&processes, &[11, 20]), 50_320);
        assert_eq!(tree_ticks(&processes, &[99]), 0);
    }

    #[test]
    fn this_process_uses_cpu_time() {
        let me = std::process::id();
        let before = tree_seconds(&[me]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let (mut used, mut x) = (0.0, 0u64);
        while used < 0.1 && std::time::Instant::now() < deadline {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            used = tree_seconds(&[me]) - before;
        }
        assert!(used >= 0.1, "{used} s");
    }
}
