//! Helpers of the session tests: requests from words, and reply values.
#![allow(dead_code)]
use bytes::Bytes;
use logless_redis::resp::Value;
use logless_redis::session::{Session, Step};

pub fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

pub fn handle(session: &mut Session, words: &[&str]) -> Step {
    session.handle(&args(words))
}

pub fn reply(session: &mut Session, words: &[&str]) -> Value {
    match handle(session, words) {
        Step::Reply(value) => value,
        other => panic!("{words:?} gave {other:?}, not a reply"),
    }
}

pub fn error(text: &str) -> Value {
    Value::Error(text.to_owned())
}

pub fn simple(text: &str) -> Value {
    Value::Simple(text.to_owned())
}

pub fn bulk(text: &str) -> Value {
    Value::Bulk(Bytes::copy_from_slice(text.as_bytes()))
}
