//! Properties of the register map: operations and responses round-trip through their encodings
//! and no bytes panic the decoders; two machines, one restored from the other's snapshot
//! midway, give the same replies and states; the map never keeps a dead key.
mod kv_arbitrary;

use bytes::Bytes;
use kv_arbitrary::operation;
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq};
use logless_multipaxos::kv::codec::{decode_command, put_command};
use logless_multipaxos::kv::{Operation, RegisterMachine, Response};
use logless_multipaxos::message::Request;
use logless_multipaxos::state_machine::StateMachine;
use proptest::prelude::*;

fn request(operation: &Operation) -> Request {
    Request {
        client: ClientId(1),
        seq: RequestSeq(1),
        payload: operation.encode(),
    }
}

/// Batches of operations, each with the stamp step before it.
fn batches() -> impl Strategy<Value = Vec<(u64, Vec<Operation>)>> {
    proptest::collection::vec(
        (0u64..25, proptest::collection::vec(operation(), 0..5)),
        1..12,
    )
}

/// Runs `batches` (instance, stamp, operations); returns the replies.
fn run(machine: &mut RegisterMachine, batches: &[(Instance, u64, Vec<Operation>)]) -> Vec<Bytes> {
    let mut replies = Vec::new();
    for (instance, stamp_ms, operations) in batches {
        machine.begin_batch(*instance, *stamp_ms);
        for operation in operations {
            replies.push(machine.execute(&request(operation)));
        }
        for (key, reg) in machine.map() {
            assert!(
                reg.is_live(*stamp_ms) || (reg.fence != 0 && reg.data == Default::default()),
                "dead key {key:?} kept: {reg:?}"
            );
        }
    }
    replies
}

/// Numbers the batches and turns stamp steps into stamps.
fn stamped(batches: Vec<(u64, Vec<Operation>)>) -> Vec<(Instance, u64, Vec<Operation>)> {
    let mut stamp_ms = 0;
    let mut instance = Instance(0);
    batches
        .into_iter()
        .map(|(step, operations)| {
            stamp_ms += step;
            instance = instance.next();
            (instance, stamp_ms, operations)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_operation_round_trips(operation in operation()) {
        prop_assert_eq!(Operation::decode(&operation.encode()), Ok(operation));
    }

    #[test]
    fn every_command_round_trips(command in kv_arbitrary::command()) {
        let mut out = Vec::new();
        put_command(&mut out, &command);
        prop_assert_eq!(decode_command(&out), Ok(command));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = Operation::decode(&bytes);
        let _ = Response::decode(&bytes);
        let _ = decode_command(&bytes);
        let mut versioned = vec![1];
        versioned.extend_from_slice(&bytes);
        let _ = Operation::decode(&versioned);
        let _ = Response::decode(&versioned);
    }

    #[test]
    fn damaged_operations_never_panic_the_decoder(
        operation in operation(),
        flip in any::<proptest::sample::Index>(),
        bit in 0u8..8,
        cut in any::<proptest::sample::Index>(),
    ) {
        let mut bytes = operation.encode().to_vec();
        let i = flip.index(bytes.len());
        bytes[i] ^= 1 << bit;
        let _ = Operation::decode(&bytes);
        let _ = Operation::decode(&bytes[..cut.index(bytes.len())]);
    }

    #[test]
    fn no_operation_or_payload_panics_at_any_stamp(
        operations in proptest::collection::vec(operation(), 0..12),
        garbage in proptest::collection::vec(any::<u8>(), 0..32),
        stamp_ms in prop_oneof![any::<u64>(), u64::MAX - 50..=u64::MAX, 0u64..50],
    ) {
        let mut machine = RegisterMachine::default();
        machine.begin_batch(Instance(1), stamp_ms);
        for operation in &operations {
            machine.execute(&request(operation));
        }
        let reply = machine.execute(&Request { payload: Bytes::from(garbage), ..request(&Operation::Del(vec![])) });
        prop_assert!(Response::decode(&reply).is_ok());
        machine.begin_batch(Instance(2), stamp_ms.saturating_add(10));
        for operation in &operations {
            machine.execute(&request(operation));
        }
    }

    #[test]
    fn a_machine_restored_from_a_snapshot_midway_agrees_with_the_original(
        batches in batches(),
        split in any::<proptest::sample::Index>(),
    ) {
        let batches = stamped(batches);
        let (head, tail) = batches.split_at(split.index(batches.len() + 1));
        let mut original = RegisterMachine::default();
        run(&mut original, head);
        let mut restored = RegisterMachine::default();
        restored.restore(&original.snapshot());
        prop_assert_eq!(original.map(), restored.map());
        let after = run(&mut original, tail);
        let again = run(&mut restored, tail);
        prop_assert_eq!(&after, &again);
        prop_assert_eq!(original.map(), restored.map());
        prop_assert_eq!(original.snapshot(), restored.snapshot());
        for reply in &after {
            let response = Response::decode(reply).expect("replies decode");
            prop_assert_eq!(&response.encode(), reply);
        }
    }
}
