//! The sans-IO core of logless: RMWPaxos (Algorithm 3 of the RMWPaxos paper, with the
//! optimisations of its §5.8).
