//! Operations of the register map as the tests of its semantics write them.
use bytes::Bytes;
use logless_commands::command::{Command, Condition, Expiry, SetArgs};
use logless_multipaxos::ids::Instance;
use logless_multipaxos::kv::{Operation, RegisterMachine};
use logless_multipaxos::state_machine::StateMachine;

/// The execution stamp of the first batch.
pub const T0: u64 = 1_000;

pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// A machine without limits, in its first batch at [`T0`].
pub fn machine() -> RegisterMachine {
    let mut m = RegisterMachine::default();
    m.begin_batch(Instance(1), T0);
    m
}

pub fn cmd(key: &str, command: Command) -> Operation {
    Operation::Command {
        key: b(key),
        command,
    }
}

/// SET key value, with `expiry`.
pub fn set_with(key: &str, value: &str, expiry: Expiry) -> Operation {
    cmd(
        key,
        Command::Set(SetArgs {
            value: b(value),
            condition: Condition::Always,
            get: false,
            expiry,
        }),
    )
}

/// SET key value.
pub fn set(key: &str, value: &str) -> Operation {
    set_with(key, value, Expiry::Clear)
}
