//! Running the Porcupine checker of `verify/checker/` (Go) on the history.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The checker's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0: every key is linearizable.
    Linearizable,
    /// Exit 1: some key is not (the checker's output names them).
    NotLinearizable,
    /// Exit 2: the check timed out.
    TimedOut,
    /// Exit 3 or anything else: the checker could not run or rejected the input.
    Error(String),
}

impl Verdict {
    /// A word for the summary.
    pub fn describe(&self) -> String {
        match self {
            Verdict::Linearizable => "linearizable".into(),
            Verdict::NotLinearizable => "NOT linearizable".into(),
            Verdict::TimedOut => "timed out (inconclusive)".into(),
            Verdict::Error(e) => format!("checker error: {e}"),
        }
    }
}

/// The checker's directory: `LOGLESS_CHECKER_DIR`, else `verify/checker/` of the source tree this
/// binary was built from.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LOGLESS_CHECKER_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../checker")
}

/// Runs `go run ./cmd/checker -timeout T -html OUT/html HISTORY` in `dir`; returns the verdict
/// and what the checker printed.
pub fn run(dir: &Path, history: &Path, html: &Path, timeout: Duration) -> (Verdict, String) {
    let output = Command::new("go")
        .current_dir(dir)
        .args(["run", "./cmd/checker"])
        .args(["-timeout", &format!("{}s", timeout.as_secs().max(1))])
        .arg("-html")
        .arg(html)
        .arg(history)
        .output();
    let output = match output {
        Ok(o) => o,
        Err(e) => {
            return (
                Verdict::Error(format!("cannot run go in {}: {e}", dir.display())),
                String::new(),
            )
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    // `go run` exits 1 whatever the program's status and prints "exit status N"; the first
    // word of the checker's own line tells the verdict.
    let first = stdout.split(':').next().unwrap_or_default().trim();
    let verdict = match (output.status.code(), first) {
        (Some(0), "Ok") => Verdict::Linearizable,
        (_, "Illegal") => Verdict::NotLinearizable,
        (_, "Unknown") => Verdict::TimedOut,
        (code, _) => Verdict::Error(format!("exit {code:?}")),
    };
    (verdict, text.trim_end().to_string())
}
