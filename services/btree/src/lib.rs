//! The B⁺-tree key-value service of P-SMR (seed 004 §V-A).
//!
//! [`tree`] is an ordered map kept as a B⁺-tree: entries live in leaves chained left to right,
//! internal nodes hold separator keys, inserts split full nodes and deletes borrow from or merge
//! with a sibling, so the tree's shape follows the history of inserts and deletes.
//! [`service`] serves it as a P-SMR [`logless_service::Service`]: insert (SET NX), update
//! (SET XX), read (GET), delete (DEL) and an ordered range read, with the C-G that follows from
//! the commands' dependencies.
pub mod service;
pub mod tree;

pub use service::{KvCommand, KvReply, KvService};
pub use tree::BPlusTree;
