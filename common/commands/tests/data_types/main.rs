//! The data types of issue 27 (hashes, lists, sorted sets, the further string and set
//! commands) and single-key transactions, by exact replies and resulting registers. The
//! expected replies are Redis's, from its command documentation and its own test suite.
mod encoding;
mod errors;
mod hashes;
mod invariants;
mod lists;
mod sorted_sets;
mod strings_and_sets;
mod support;
mod transactions;
