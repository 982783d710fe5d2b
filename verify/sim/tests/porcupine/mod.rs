//! The Porcupine checker (`verify/checker/`, a Go module) run on histories written by the
//! simulations (`History::to_checker_lines`), shared by the whole-node tests.

/// Runs the Porcupine checker on `lines` and returns its exit code and output (`go run` exits 1
/// whatever non-zero status the checker gave; its output says which), or `None` if there is no
/// `go` to run it with.
pub fn porcupine(lines: &str) -> Option<(Option<i32>, String)> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let history = dir.path().join("history.jsonl");
    std::fs::write(&history, lines).expect("history written");
    let checker = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../checker");
    let output = match std::process::Command::new("go")
        .args(["run", "./cmd/checker", "-timeout", "120s"])
        .arg(&history)
        .current_dir(checker)
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("go does not run: {e}"),
    };
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    Some((output.status.code(), text))
}

/// The keys (named with `prefix`) that the Porcupine checker's output calls not linearizable.
pub fn bad_keys(text: &str, prefix: &str) -> std::collections::BTreeSet<String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("not linearizable:"))
        .unwrap_or("");
    line.split('"')
        .filter_map(|k| k.strip_prefix(prefix))
        .map(str::to_string)
        .collect()
}
