//! A replica handed its inputs in batches ([`Replica::handle_messages`],
//! [`Replica::handle_commands`]) decides exactly as one handed them one at a time: batching
//! only changes what the cache is asked for ahead of time.
mod arbitrary;

use arbitrary::{input, key, message, Input};
use logless_commands::command::Command;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{ClientTag, Key, NodeId};
use logless_rmw::message::Message;
use logless_rmw::replica::Replica;
use proptest::prelude::*;

/// A runtime's unit of work: one sender's messages, some clients' commands, or one other input.
#[derive(Debug, Clone)]
enum Batch {
    Messages(u16, Vec<Message>),
    Commands(Vec<(Key, bool)>),
    Other(Input),
}

/// Batches long enough to run past the prefetch window, and empty ones.
fn batch() -> impl Strategy<Value = Batch> {
    prop_oneof![
        4 => (0u16..5, proptest::collection::vec(message(), 0..24))
            .prop_map(|(from, messages)| Batch::Messages(from, messages)),
        2 => proptest::collection::vec((key(), any::<bool>()), 0..24).prop_map(Batch::Commands),
        1 => input().prop_map(Batch::Other),
    ]
}

fn command(read: bool) -> Command {
    if read {
        Command::Get
    } else {
        Command::IncrBy(1)
    }
}

fn replica(thrifty_writes: bool) -> Replica {
    let mut config = ProposerConfig::new(vec![NodeId(1), NodeId(2), NodeId(3)]);
    config.thrifty_writes = thrifty_writes;
    Replica::new(NodeId(1), 1, config, 7, [])
}

/// Hands `input` to `replica` alone.
fn handle_one(replica: &mut Replica, now_ms: u64, tag: &mut u64, input: Input) {
    match input {
        Input::Message(from, m) => replica.handle_message(now_ms, NodeId(from), &m),
        Input::Command(k, read) => {
            *tag += 1;
            replica.handle_command(now_ms, ClientTag(*tag), k, command(read));
        }
        Input::Timer(k, token) => replica.handle_timer(now_ms + 1_000, &k, token),
        Input::LinkBroken(peer) => replica.handle_link_broken(NodeId(peer)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn batches_decide_as_single_inputs_do(
        batches in proptest::collection::vec(batch(), 1..40),
        thrifty_writes in any::<bool>(),
    ) {
        let mut single = replica(thrifty_writes);
        let mut batched = replica(thrifty_writes);
        let (mut single_tag, mut batched_tag) = (0, 0);
        let mut commands = Vec::new();
        for (turn, batch) in batches.into_iter().enumerate() {
            let now_ms = turn as u64 + 1;
            match batch {
                Batch::Messages(from, messages) => {
                    for m in &messages {
                        single.handle_message(now_ms, NodeId(from), m);
                    }
                    batched.handle_messages(now_ms, NodeId(from), messages.iter());
                }
                Batch::Commands(keyed) => {
                    for (k, read) in keyed {
                        handle_one(&mut single, now_ms, &mut single_tag, Input::Command(k.clone(), read));
                        batched_tag += 1;
                        commands.push((ClientTag(batched_tag), k, command(read)));
                    }
                    batched.handle_commands(now_ms, &mut commands);
                    prop_assert!(commands.is_empty());
                }
                Batch::Other(input) => {
                    handle_one(&mut single, now_ms, &mut single_tag, input.clone());
                    handle_one(&mut batched, now_ms, &mut batched_tag, input);
                }
            }
            prop_assert_eq!(single.take_output(), batched.take_output());
        }
        prop_assert_eq!(&single, &batched);
    }
}
