//! Shared helpers: registers of each kind, and running a command with the checks every
//! command must pass.
use bytes::Bytes;
use logless_commands::command::{Command, CommandError, Limits, Outcome, Reply};
use logless_commands::float::Float;
use logless_commands::value::{Data, Register};

/// Small limits, so tests can reach them.
pub const LIMITS: Limits = Limits {
    value_bytes_max: 64,
    set_members_max: 8,
};

/// The clock stamp commands run at unless a test says otherwise.
pub const NOW_MS: u64 = 1_000;

pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub fn f(v: f64) -> Float {
    Float::new(v).expect("not NaN")
}

fn register(data: Data) -> Register {
    Register {
        data,
        expires_at_ms: None,
        fence: 0,
    }
}

pub fn string(s: &str) -> Register {
    register(Data::Str(b(s)))
}

pub fn set(members: &[&str]) -> Register {
    register(Data::Set(members.iter().map(|m| b(m)).collect()))
}

pub fn hash(pairs: &[(&str, &str)]) -> Register {
    register(Data::Hash(
        pairs.iter().map(|(k, v)| (b(k), b(v))).collect(),
    ))
}

pub fn list(items: &[&str]) -> Register {
    register(Data::List(items.iter().map(|i| b(i)).collect()))
}

pub fn zset(pairs: &[(f64, &str)]) -> Register {
    register(Data::ZSet(
        pairs.iter().map(|(s, m)| (b(m), f(*s))).collect(),
    ))
}

/// The register with a time to live until `at`.
pub fn expiring(mut reg: Register, at: u64) -> Register {
    reg.expires_at_ms = Some(at);
    reg
}

/// One register of each kind but `except`'s, for WRONGTYPE checks.
pub fn other_kinds(except: &str) -> Vec<Register> {
    [
        ("string", string("v")),
        ("set", set(&["a"])),
        ("hash", hash(&[("f", "v")])),
        ("list", list(&["a"])),
        ("zset", zset(&[(1.0, "a")])),
    ]
    .into_iter()
    .filter(|(kind, _)| *kind != except)
    .map(|(_, reg)| reg)
    .collect()
}

/// Applies `cmd` at `now_ms` with the checks every command must pass: an unchanged register
/// is identical, a read-only command changes nothing and `read` answers it as `apply` does,
/// and the result encodes and decodes to itself.
pub fn run_at(cmd: &Command, mut reg: Register, now_ms: u64) -> (Outcome, Register) {
    let before = reg.clone();
    let read = cmd.read(&reg, now_ms);
    let outcome = cmd.apply(&mut reg, now_ms, &LIMITS);
    if !outcome.changed {
        assert_eq!(reg, before, "unchanged must mean identical: {cmd:?}");
    }
    if cmd.is_read_only() {
        assert!(
            !outcome.changed,
            "a read-only command changed the register: {cmd:?}"
        );
        assert_eq!(read, outcome.reply, "read and apply disagree: {cmd:?}");
    }
    let mut bytes = Vec::new();
    reg.encode(&mut bytes);
    assert_eq!(Register::decode(&bytes).as_ref(), Ok(&reg));
    (outcome, reg)
}

pub fn run(cmd: Command, reg: Register) -> (Outcome, Register) {
    run_at(&cmd, reg, NOW_MS)
}

pub fn reply(cmd: Command, reg: Register) -> Reply {
    run(cmd, reg).0.reply
}

pub fn bulk(s: &str) -> Reply {
    Reply::Bulk(b(s))
}

pub fn array(items: &[&str]) -> Reply {
    Reply::Array(items.iter().map(|i| b(i)).collect())
}

pub fn ints(items: &[i64]) -> Reply {
    Reply::Items(items.iter().map(|i| Reply::Int(*i)).collect())
}

pub fn double(v: f64) -> Reply {
    Reply::Double(f(v))
}

/// Runs a scan from cursor 0 to its end, `step(cursor)` building each call: the number of
/// calls, and the elements of every call in order.
pub fn scan_all(reg: &Register, step: impl Fn(u64) -> Command) -> (usize, Vec<Bytes>) {
    scan_with(reg.clone(), step, |reg, _| reg)
}

/// As [`scan_all`], with `between(register, call)` changing the register after each call.
pub fn scan_with(
    mut reg: Register,
    step: impl Fn(u64) -> Command,
    mut between: impl FnMut(Register, usize) -> Register,
) -> (usize, Vec<Bytes>) {
    let mut cursor = 0;
    let mut elements = Vec::new();
    for calls in 1..=100 {
        let answer = reply(step(cursor), reg.clone());
        let Reply::Items(parts) = &answer else {
            panic!("a scan answers its cursor and elements: {answer:?}")
        };
        let [Reply::Bulk(next), Reply::Array(visited)] = &parts[..] else {
            panic!("a scan answers its cursor and elements: {answer:?}")
        };
        elements.extend(visited.iter().cloned());
        cursor = std::str::from_utf8(next).unwrap().parse().unwrap();
        if cursor == 0 {
            return (calls, elements);
        }
        reg = between(reg, calls);
    }
    panic!("the scan did not end in 100 calls");
}

/// Asserts that each of `commands` answers WRONGTYPE on a key of every kind but `kind`.
pub fn assert_wrongtype(commands: &[Command], kind: &str) {
    for cmd in commands {
        for reg in other_kinds(kind) {
            assert_eq!(
                reply(cmd.clone(), reg.clone()),
                Reply::Error(CommandError::WrongType),
                "{cmd:?} on {reg:?}"
            );
        }
    }
}
