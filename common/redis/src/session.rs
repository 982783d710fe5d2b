//! One client connection's Redis session, without I/O.
//!
//! A [`Session`] owns what Redis keeps per connection — the protocol version, the client name,
//! the transaction state, whether the connection is closing — and turns each parsed request
//! into a [`Step`]: a reply at once, engine commands to submit, or a question for the node
//! (INFO, DBSIZE, CONFIG). The answers of submitted commands come back through
//! [`Session::reply`] and [`Session::combine`]. The node's front end keeps only the socket and
//! its buffers; everything a client can observe of the protocol is decided here, and every
//! error text logless answers beyond the command table's is written in this module.
//!
//! Like the engines, a session reads no clock and touches no socket, so it is tested without
//! one and the whole-node simulation drives the same code as a running node.
//!
//! # Transactions
//!
//! MULTI opens a [`Queue`]. Each command after it is parsed at once: a command that parses is
//! answered `QUEUED`; one that does not (unknown, wrong arity, a syntax error, a key or an
//! argument over its limit) answers its error and marks the transaction, whose EXEC then
//! answers `EXECABORT Transaction discarded because of previous errors.` (Redis checks only the
//! name and the arity when queueing and lets the other errors answer inside EXEC's array;
//! logless checks everything it can before anything runs). Connection and server commands
//! (PING, CLIENT, INFO, ...) are not queued: they answer an error and mark the transaction
//! too, since the transaction is one register command; MULTI (nested), EXEC, DISCARD, RESET
//! and QUIT act at once as in Redis. EXEC of commands that all name one key is one
//! [`Step::One`] of [`Command::Transaction`], applied in one consensus decision; its reply is
//! the array of the commands' replies, each shown as its command asks
//! ([`ReplyShape::Exec`]). EXEC of commands naming several keys runs nothing and says why:
//! every key is its own register, so a transaction is not atomic across keys in the per-key
//! engine. A transaction holds at most [`TRANSACTION_COMMANDS_MAX`] commands, and its
//! arguments at most `value_bytes_max` plus [`TRANSACTION_ROOM_BYTES`]. WATCH is refused (a
//! transaction on one key needs none); UNWATCH answers OK.
//!
//! # WATCH under the log engine
//!
//! A session with one order over all keys serves WATCH as Redis does: `WATCH key ...` is a
//! [`Step::Watch`], which the node runs through the log (after every request before it has been
//! answered, and before it takes the next) and whose stamps it gives back with
//! [`Session::watched`]. EXEC then carries the watched keys and their stamps
//! ([`CrossKey::WatchedTransaction`]): the engine runs the transaction only if no watched key
//! changed or expired since, else EXEC answers a null array. EXEC (even one answering
//! EXECABORT), DISCARD, UNWATCH and RESET forget the watched keys; WATCH inside MULTI is an
//! error that aborts the transaction; a connection watches at most [`WATCHED_KEYS_MAX`] keys.
//!
//! Under the log engine, which orders every key in one log ([`Session::with_total_order`]),
//! MSET, MSETNX, RENAME, RENAMENX, SMOVE and COPY are parsed into a [`Step::Cross`] of their
//! own, and EXEC of commands naming several keys is one [`Step::Cross`] of
//! [`CrossKey::Transaction`], executed atomically as one log entry. Such a transaction may
//! queue those commands and DEL, EXISTS and MGET of several keys too ([`Queued`]): each
//! answers in EXEC's array as it would alone.
//!
//! # Authentication
//!
//! A session checks every request against the node's users ([`crate::acl`], given with
//! [`Session::with_acl`]). It starts logged in as `default` unless that user needs a password;
//! until it logs in, every request but AUTH, HELLO, PING, QUIT and RESET is answered
//! `NOAUTH` before it is even parsed. AUTH and `HELLO ... AUTH` log in (a failed one changes
//! nothing and is counted, [`Session::auth_failures`]); RESET logs out to the initial user. A
//! logged-in user's key patterns and access are checked on the parsed request: a refused one
//! is answered `NOPERM`, and in a transaction it aborts EXEC like any refused command.
//!
//! # Cluster mode
//!
//! A session given the ring ([`Session::with_cluster`], the node's `cluster_enabled`) decides
//! as a Redis Cluster node does, after the login and ACL checks and before anything runs: a
//! request whose keys hash to several slots answers `CROSSSLOT` (in a transaction, the keys of
//! the commands queued so far count too), and one on a slot the node does not replicate
//! answers `MOVED` ([`ClusterMap::redirect`]). CLUSTER is a [`Step::Node`] (the node knows
//! which peers are up); ASKING, READONLY and READWRITE answer OK. Without the ring those four
//! answer [`CLUSTER_DISABLED`], as Redis outside cluster mode does.
//!
//! # Seeds
//!
//! SPOP, SRANDMEMBER and HRANDFIELD choose at random, and every replica must choose the same:
//! the session gives each request's command its seed ([`Command::seed`]) when it parses it, a
//! SplitMix64 mix of the connection id and the number of requests the session has handled. The
//! choice is thus a function of the connection and its request sequence (replayable in the
//! simulation) and differs between requests and connections. A transaction is seeded once, at
//! EXEC, and [`Command::seed`] derives each queued command's seed from its place.
//!
//! # Value size
//!
//! Every argument is held to `value_bytes_max` (Redis's `proto-max-bulk-len`, set by the
//! node's `value_bytes_max`): a register's whole value travels in every vote, so no argument
//! may be longer than a value may be. A longer one is answered with the register's error for a
//! value over the limit (`ERR value exceeds the configured size limit`) and the connection
//! goes on; only a bulk past the wire parser's own bound (which the node sets well
//! above, see `ParseLimits`) breaks the protocol and closes the connection, as in Redis.
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use logless_commands::command::{Command, CommandError, Reply};
use logless_commands::KEY_BYTES_MAX;

use crate::acl::{self, Acl, UserId};
use crate::cluster::{ClusterCommand, ClusterMap, CLUSTER_DISABLED};
use crate::resp::{Protocol, ProtocolError, Value};
use crate::table::admin::Admin;
use crate::table::cross_key::{self, CrossKey, Queued};
use crate::table::{
    self, Combine, CommandSpec, ExecShapes, Local, Parsed, ReplyShape, TRANSACTION_COMMANDS_MAX,
};

/// The longest argument (and so value) a session accepts unless told otherwise
/// ([`Session::with_value_bytes_max`]): 1 MiB, the node's default `value_bytes_max`.
pub const VALUE_BYTES_MAX_DEFAULT: usize = 1 << 20;

/// Room a transaction's arguments may take beyond one value at the limit: keys, names and
/// small arguments of the other commands.
pub const TRANSACTION_ROOM_BYTES: usize = 64 * 1024;

/// The most keys one connection watches at once (they travel in the EXEC's log entry).
pub const WATCHED_KEYS_MAX: usize = 1024;

/// The Redis version logless reports to clients that ask: the command set it follows.
pub const REDIS_COMPAT_VERSION: &str = "7.4.0";

/// The whole reply, RESP-encoded, to a connection refused because too many are open.
pub const MAX_CLIENTS_REPLY: &[u8] = b"-ERR max number of clients reached\r\n";

/// Why an engine command got no result. The engine's own error types map onto these, and the
/// client is told which one it was, since they differ in whether a retry is safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The command was definitely not applied: a retry is safe.
    NotApplied,
    /// The replica timed out after proposing it: it may or may not have been applied.
    OutcomeUnknown,
    /// Too many commands wait on the key; the command was not applied.
    Overloaded,
    /// The replica's disk has no space for a new key; the command was not applied.
    DiskFull,
    /// Too many replicas' disks have no space for a new key for a quorum to take it; the
    /// command was not applied.
    QuorumFull,
    /// The replica's disk has no space for its log (the log engine); the command was not
    /// applied.
    LogFull,
}

/// What became of a submitted command.
pub type Answer = Result<Reply, Failure>;

/// What the node must do with one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Answer with this value, in the protocol the session speaks after the request.
    Reply(Value),
    /// Submit one command on `key`; its answer goes to [`Session::reply`] with `shape`.
    One {
        /// The register.
        key: Bytes,
        /// The command on it.
        command: Command,
        /// How its reply is shown.
        shape: ReplyShape,
    },
    /// Submit every part (each linearizable on its own); their answers, in order, go to
    /// [`Session::combine`] with `combine`.
    Many {
        /// The registers and their commands, in request order.
        parts: Vec<(Bytes, Command)>,
        /// How the replies combine.
        combine: Combine,
    },
    /// Submit one step over several keys, executed atomically (only a session told that the
    /// engine orders every key in one log, [`Session::with_total_order`], asks for one).
    Cross {
        /// The step.
        op: CrossKey,
        /// How its reply is shown (a transaction's: [`ReplyShape::Exec`]).
        shape: ReplyShape,
    },
    /// A server command the node answers from its own state.
    Node(NodeQuery),
    /// WATCH of these keys (only a session with one order over all keys asks for one): read
    /// their stamps through the log, in order, after every earlier request was answered, and
    /// give them to [`Session::watched`] before handling the next request.
    Watch(Vec<Bytes>),
}

/// A server command that needs the node's state or configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeQuery {
    /// `INFO [section ...]`.
    Info(Vec<Bytes>),
    /// DBSIZE.
    DbSize,
    /// `CONFIG GET pattern [pattern ...]`.
    ConfigGet(Vec<Bytes>),
    /// `CONFIG SET parameter value [...]`.
    ConfigSet(Vec<(Bytes, Bytes)>),
    /// An admin or inspection command (see [`table::admin`]).
    Admin(table::admin::Admin),
    /// A `CLUSTER` subcommand, asked in cluster mode (see [`crate::cluster`]).
    Cluster(ClusterCommand),
}

/// The transaction state of a connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Transaction {
    /// No MULTI is open.
    #[default]
    None,
    /// A MULTI is open and these commands wait for EXEC.
    Queued(Queue),
}

/// The commands of an open transaction, waiting for EXEC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queue {
    /// The key of the first command, if any.
    key: Option<Bytes>,
    /// Another key some command names, if any: then EXEC refuses, unless the engine orders
    /// every key in one log.
    other_key: Option<Bytes>,
    /// The queued commands: each on one key, but for those over several keys that only a
    /// session with one order over all keys queues.
    items: Vec<Queued>,
    shapes: ExecShapes,
    /// The bytes of the queued requests' arguments.
    bytes: usize,
    /// A command was refused while queueing: EXEC answers EXECABORT.
    aborted: bool,
}

impl Queue {
    /// The number of queued commands.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no command is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether a command was refused while queueing, so that EXEC will run nothing.
    pub fn is_aborted(&self) -> bool {
        self.aborted
    }

    /// Notes that `key` is named by a command of the transaction.
    fn name_key(&mut self, key: &Bytes) {
        match &self.key {
            None => self.key = Some(key.clone()),
            Some(first) if first != key && self.other_key.is_none() => {
                self.other_key = Some(key.clone());
            }
            Some(_) => {}
        }
    }
}

/// One client connection's protocol state.
#[derive(Clone, Debug)]
pub struct Session {
    id: u64,
    protocol: Protocol,
    name: Option<Bytes>,
    closing: bool,
    transaction: Transaction,
    key_bytes_max: usize,
    value_bytes_max: usize,
    /// Requests handled so far; with the id, the seed of the next random choice.
    requests: u64,
    /// The node's users.
    acl: Arc<Acl>,
    /// Who the connection is logged in as (none: it must log in first).
    user: Option<UserId>,
    /// Failed logins (AUTH or HELLO AUTH) so far.
    auth_failures: u64,
    /// Whether the engine orders every key in one log, so that commands and transactions over
    /// several keys run atomically.
    total_order: bool,
    /// The watched keys, each with the stamp WATCH got for it.
    watched: Vec<(Bytes, u64)>,
    /// The ring, in cluster mode: commands over keys of several slots are refused, and those
    /// on a slot this node does not replicate are redirected.
    cluster: Option<Arc<ClusterMap>>,
}

impl Session {
    /// The session of connection `id` (CLIENT ID), speaking RESP2 until HELLO 3.
    pub fn new(id: u64) -> Session {
        Session {
            id,
            protocol: Protocol::Resp2,
            name: None,
            closing: false,
            transaction: Transaction::None,
            key_bytes_max: KEY_BYTES_MAX,
            value_bytes_max: VALUE_BYTES_MAX_DEFAULT,
            requests: 0,
            acl: open_acl(),
            user: open_acl().initial_user(),
            auth_failures: 0,
            total_order: false,
            watched: Vec::new(),
            cluster: None,
        }
    }

    /// The same session in cluster mode (`cluster_enabled`) when given the ring, as a node of
    /// a Redis Cluster: a command whose keys hash to several slots is answered `CROSSSLOT`
    /// (keys sharing a hash tag share a slot), one on a slot this node does not replicate is
    /// answered `MOVED`, CLUSTER is answered, and ASKING, READONLY and READWRITE are accepted.
    /// Without it, those four are refused as by a Redis not in cluster mode.
    pub fn with_cluster(mut self, cluster: Option<Arc<ClusterMap>>) -> Session {
        self.cluster = cluster;
        self
    }

    /// The same session for an engine that orders every key in one log (the log engine): MSET,
    /// MSETNX, RENAME, RENAMENX, SMOVE and COPY are parsed into [`Step::Cross`], and EXEC of a
    /// transaction naming several keys runs it as one [`CrossKey::Transaction`] instead of
    /// refusing it.
    pub fn with_total_order(mut self, total_order: bool) -> Session {
        self.total_order = total_order;
        self
    }

    /// The same session checking its commands against `acl`: it starts logged in as the
    /// default user if that one takes any password, else it must log in (see [`crate::acl`]).
    pub fn with_acl(mut self, acl: Arc<Acl>) -> Session {
        self.user = acl.initial_user();
        self.acl = acl;
        self
    }

    /// The user the connection is logged in as, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.map(|id| self.acl.user(id).name.as_str())
    }

    /// How many logins (AUTH, HELLO AUTH) failed on this connection.
    pub fn auth_failures(&self) -> u64 {
        self.auth_failures
    }

    /// The same session with arguments held to `value_bytes_max` (the node's
    /// `value_bytes_max`, Redis's `proto-max-bulk-len`).
    pub fn with_value_bytes_max(mut self, value_bytes_max: usize) -> Session {
        self.value_bytes_max = value_bytes_max;
        self
    }

    /// Holds later arguments to `value_bytes_max` (CONFIG SET proto-max-bulk-len).
    pub fn set_value_bytes_max(&mut self, value_bytes_max: usize) {
        self.value_bytes_max = value_bytes_max;
    }

    /// The connection id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The protocol replies are written in now.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The client's name (CLIENT SETNAME).
    pub fn name(&self) -> Option<&Bytes> {
        self.name.as_ref()
    }

    /// Whether the connection closes once the replies so far are written (QUIT).
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// The transaction state.
    pub fn transaction(&self) -> &Transaction {
        &self.transaction
    }

    /// The watched keys, each with the stamp WATCH got for it, in the order watched.
    pub fn watched_keys(&self) -> &[(Bytes, u64)] {
        &self.watched
    }

    /// Records the stamps the engine gave the keys of a [`Step::Watch`] (one per key, in
    /// order); the client's reply to WATCH is then OK.
    ///
    /// # Panics
    /// If there are not as many stamps as keys.
    pub fn watched(&mut self, keys: Vec<Bytes>, stamps: Vec<u64>) -> Value {
        assert_eq!(keys.len(), stamps.len(), "one stamp per watched key");
        self.watched.extend(keys.into_iter().zip(stamps));
        simple("OK")
    }

    /// Decides what to do with one request (`args` non-empty, the command name first).
    pub fn handle(&mut self, args: &[Bytes]) -> Step {
        self.requests += 1;
        if self.user.is_none() && !acl::allowed_before_auth(&args[0]) {
            return Step::Reply(Value::Error(acl::NOAUTH.into()));
        }
        if self.total_order && args[0].eq_ignore_ascii_case(b"watch") {
            return self.watch(args);
        }
        if let (true, Some(spec)) = (self.total_order, cross_key::find(&args[0])) {
            let op = match self.cross_key(spec, args) {
                Ok(op) => op,
                Err(text) if self.transaction == Transaction::None => {
                    return Step::Reply(Value::Error(text))
                }
                Err(text) => return self.refuse_queued(text),
            };
            if self.transaction == Transaction::None {
                return Step::Cross {
                    op,
                    shape: ReplyShape::Plain,
                };
            }
            return self.queue(args, Queued::Cross(op), ReplyShape::Plain);
        }
        let parsed = match self.argument_error(args) {
            Some(text) => Parsed::Error(text),
            None => {
                let (parsed, spec) = table::parse_command_with_spec(args);
                self.routed(self.permitted(spec, parsed))
            }
        };
        if let Transaction::Queued(_) = self.transaction {
            return self.in_transaction(args, parsed);
        }
        match parsed {
            Parsed::Single {
                key,
                mut command,
                shape,
            } => match self.key_error(&key) {
                Some(e) => Step::Reply(e),
                None => {
                    command.seed(self.seed());
                    Step::One {
                        key,
                        command,
                        shape,
                    }
                }
            },
            Parsed::Multi { parts, combine } => {
                match parts.iter().find_map(|(k, _)| self.key_error(k)) {
                    Some(e) => Step::Reply(e),
                    None => Step::Many { parts, combine },
                }
            }
            Parsed::Local(local) => self.local(local),
            Parsed::Error(text) => Step::Reply(Value::Error(text)),
        }
    }

    /// A command over several keys, for an engine with one order over all keys: the step, or
    /// the error reply (a key or an argument over its limit, a syntax error, NOPERM).
    fn cross_key(&self, spec: &'static CommandSpec, args: &[Bytes]) -> Result<CrossKey, String> {
        if let Some(text) = self.argument_error(args) {
            return Err(text);
        }
        let op = cross_key::parse(spec, args)?;
        let keys = op.keys();
        if let Some(Value::Error(text)) = keys.iter().find_map(|k| self.key_error(k)) {
            return Err(text);
        }
        if let Some(user) = self.user {
            let keys = keys.iter().map(|k| &k[..]);
            self.acl.check(user, spec, false, keys)?;
        }
        match self.redirect(keys.iter().map(|k| &k[..])) {
            Some(text) => Err(text),
            None => Ok(op),
        }
    }

    /// WATCH, for an engine with one order over all keys: the keys to read stamps of, or the
    /// error reply.
    fn watch(&mut self, args: &[Bytes]) -> Step {
        if let Transaction::Queued(_) = self.transaction {
            return self.refuse_queued("ERR WATCH inside MULTI is not allowed".into());
        }
        if args.len() < 2 {
            return Step::Reply(Value::Error(
                "ERR wrong number of arguments for 'watch' command".into(),
            ));
        }
        let keys = &args[1..];
        if let Some(text) = self.argument_error(args) {
            return Step::Reply(Value::Error(text));
        }
        if let Some(e) = keys.iter().find_map(|k| self.key_error(k)) {
            return Step::Reply(e);
        }
        if let Some(user) = self.user {
            let keys = keys.iter().map(|k| &k[..]);
            if let Err(text) = self.acl.check(user, &cross_key::WATCH, true, keys) {
                return Step::Reply(Value::Error(text));
            }
        }
        if let Some(text) = self.redirect(keys.iter().map(|k| &k[..])) {
            return Step::Reply(Value::Error(text));
        }
        if self.watched.len() + keys.len() > WATCHED_KEYS_MAX {
            return Step::Reply(Value::Error(format!(
                "ERR a connection may watch at most {WATCHED_KEYS_MAX} keys: they travel in \
                 the EXEC's log entry (UNWATCH forgets them)"
            )));
        }
        Step::Watch(keys.to_vec())
    }

    /// The parsed request (of the command `spec`, if it names one), or NOPERM if the user may
    /// not run it on its keys.
    fn permitted(&self, spec: Option<&'static CommandSpec>, parsed: Parsed) -> Parsed {
        let (Some(user), Some(spec)) = (self.user, spec) else {
            return parsed;
        };
        let reads_only = reads_only(spec, &parsed);
        // The keys are borrowed from the request, not gathered into a vector of their own:
        // this runs for every command.
        let checked = match &parsed {
            Parsed::Single { key, .. } => {
                self.acl
                    .check(user, spec, reads_only, std::iter::once(&key[..]))
            }
            Parsed::Multi { parts, .. } => self.acl.check(
                user,
                spec,
                reads_only,
                parts.iter().map(|(key, _)| &key[..]),
            ),
            // A command over the whole keyspace names every key: only a user who may access
            // every key may run it (FLUSHALL would otherwise delete keys outside its patterns,
            // and SCAN or KEYS show their names).
            Parsed::Local(Local::Admin(
                Admin::Scan(_) | Admin::Keys(_) | Admin::RandomKey | Admin::Flush,
            )) if !self.acl.user(user).may_access_every_key() => {
                return Parsed::Error(acl::NOPERM_KEY.to_owned());
            }
            Parsed::Local(_) | Parsed::Error(_) => {
                self.acl.check(user, spec, reads_only, std::iter::empty())
            }
        };
        match checked {
            Ok(()) => parsed,
            Err(text) => Parsed::Error(text),
        }
    }

    /// The parsed request, or the cluster's refusal of its keys (see [`Session::redirect`]).
    fn routed(&self, parsed: Parsed) -> Parsed {
        if self.cluster.is_none() {
            return parsed; // no allocation on the served path outside cluster mode
        }
        let keys: Vec<&[u8]> = match &parsed {
            Parsed::Single { key, .. } => vec![key],
            Parsed::Multi { parts, .. } => parts.iter().map(|(key, _)| &key[..]).collect(),
            Parsed::Local(_) | Parsed::Error(_) => return parsed,
        };
        match self.redirect(keys.into_iter()) {
            Some(text) => Parsed::Error(text),
            None => parsed,
        }
    }

    /// In cluster mode, the error text for a request on `keys` that this node does not run
    /// (`CROSSSLOT`, `MOVED`, see [`ClusterMap::redirect`]); in an open transaction the keys of
    /// the commands queued so far count too, so that a transaction's keys share one slot.
    fn redirect<'k>(&'k self, keys: impl Iterator<Item = &'k [u8]>) -> Option<String> {
        let cluster = self.cluster.as_ref()?;
        let queued = match &self.transaction {
            Transaction::Queued(queue) => queue.key.as_deref(),
            Transaction::None => None,
        };
        cluster.redirect(queued.into_iter().chain(keys))
    }

    /// Logs in as `user` (`default` if none) with `password`: whether it passed. A failed
    /// login leaves the connection as it was, as in Redis.
    fn log_in(&mut self, user: Option<&[u8]>, password: &[u8]) -> bool {
        let name = user.unwrap_or(acl::DEFAULT_USER.as_bytes());
        match self.acl.authenticate(name, password) {
            Some(id) => {
                self.user = Some(id);
                true
            }
            None => {
                self.auth_failures += 1;
                false
            }
        }
    }

    /// The seed of the current request's random choice: SplitMix64 of the connection id and
    /// the request's number, so that requests and connections choose independently.
    fn seed(&self) -> u64 {
        splitmix64(splitmix64(self.id) ^ self.requests)
    }

    /// An argument longer than a value may be, refused before parsing with the register's
    /// own error for a value over the limit (nothing that long could be stored).
    fn argument_error(&self, args: &[Bytes]) -> Option<String> {
        let long = args.iter().map(Bytes::len).max()?;
        (long > self.value_bytes_max).then(|| CommandError::ValueTooLarge.to_string())
    }

    /// A request while a MULTI is open.
    fn in_transaction(&mut self, args: &[Bytes], parsed: Parsed) -> Step {
        match parsed {
            Parsed::Local(Local::Multi) => {
                Step::Reply(Value::Error("ERR MULTI calls can not be nested".into()))
            }
            Parsed::Local(Local::Exec) => self.exec(),
            Parsed::Local(Local::Discard) => {
                self.transaction = Transaction::None;
                self.watched.clear();
                Step::Reply(simple("OK"))
            }
            Parsed::Local(local @ (Local::Reset | Local::Quit)) => self.local(local),
            Parsed::Local(_) => self.refuse_queued(format!(
                "ERR logless does not queue '{}' in a transaction: a transaction is one \
                     register command, so only commands on its key can be queued",
                String::from_utf8_lossy(&args[0]).to_ascii_lowercase()
            )),
            Parsed::Error(text) => self.refuse_queued(text),
            Parsed::Multi { parts, combine } if self.total_order => {
                if let Some(Value::Error(text)) = parts.iter().find_map(|(k, _)| self.key_error(k))
                {
                    return self.refuse_queued(text);
                }
                self.queue(args, Queued::Many(parts, combine), ReplyShape::Plain)
            }
            Parsed::Multi { .. } => self.refuse_queued(format!(
                "ERR '{}' on several keys cannot be queued: a transaction is not atomic \
                     across keys in the per-key engine",
                String::from_utf8_lossy(&args[0]).to_ascii_lowercase()
            )),
            Parsed::Single {
                key,
                command,
                shape,
            } => {
                if let Some(Value::Error(text)) = self.key_error(&key) {
                    return self.refuse_queued(text);
                }
                self.queue(args, Queued::One(key, command), shape)
            }
        }
    }

    /// Queues `item` (the request `args`), answered `QUEUED`, unless the transaction would
    /// go over its bounds.
    fn queue(&mut self, args: &[Bytes], item: Queued, shape: ReplyShape) -> Step {
        let bytes_max = self.value_bytes_max + TRANSACTION_ROOM_BYTES;
        let Transaction::Queued(queue) = &mut self.transaction else {
            unreachable!("called with a transaction open");
        };
        let bytes = queue.bytes + args.iter().map(Bytes::len).sum::<usize>();
        if bytes > bytes_max {
            return self.refuse_queued(format!(
                "ERR a transaction's arguments may take at most {bytes_max} bytes: it \
                     travels in every vote as one register command"
            ));
        }
        if !queue.shapes.push(shape) {
            return self.refuse_queued(format!(
                "ERR a transaction may queue at most {TRANSACTION_COMMANDS_MAX} \
                     commands: it travels in every vote as one register command"
            ));
        }
        queue.bytes = bytes;
        for key in item.keys() {
            queue.name_key(key);
        }
        queue.items.push(item);
        Step::Reply(simple("QUEUED"))
    }

    fn refuse_queued(&mut self, text: String) -> Step {
        if let Transaction::Queued(queue) = &mut self.transaction {
            queue.aborted = true;
        }
        Step::Reply(Value::Error(text))
    }

    /// EXEC of the open transaction: one register command if it names one key.
    fn exec(&mut self) -> Step {
        let Transaction::Queued(queue) = std::mem::take(&mut self.transaction) else {
            unreachable!("called with a transaction open");
        };
        let watched = std::mem::take(&mut self.watched);
        assert_eq!(
            queue.items.len(),
            queue.shapes.len(),
            "one reply shape per queued command"
        );
        if queue.aborted {
            return Step::Reply(Value::Error(
                "EXECABORT Transaction discarded because of previous errors.".into(),
            ));
        }
        if !watched.is_empty() {
            // Only a session with one order over all keys watches: the log checks the stamps.
            return Step::Cross {
                op: CrossKey::WatchedTransaction {
                    watched,
                    items: queue.items,
                },
                shape: ReplyShape::Exec(queue.shapes),
            };
        }
        let Some(key) = queue.key else {
            return Step::Reply(Value::Array(Vec::new()));
        };
        let over_several_keys = queue.other_key.is_some()
            || queue
                .items
                .iter()
                .any(|item| !matches!(item, Queued::One(..)));
        if over_several_keys && self.total_order {
            // No seeds: the log engine seeds random choices from the log position.
            return Step::Cross {
                op: CrossKey::Transaction(queue.items),
                shape: ReplyShape::Exec(queue.shapes),
            };
        }
        if let Some(other) = queue.other_key {
            return Step::Reply(Value::Error(format!(
                "EXECABORT Transaction discarded: its commands name several keys ('{}', '{}', \
                 ...), and a transaction is not atomic across keys in the per-key engine, \
                 where every key is its own replicated register; send each key's commands in \
                 a MULTI of their own (transactions across keys are for the log engine)",
                shown(&key),
                shown(&other)
            )));
        }
        let commands = queue.items.into_iter().map(|item| match item {
            Queued::One(_, command) => command,
            // Only a session with one order over all keys queues these (above).
            Queued::Many(..) | Queued::Cross(_) => unreachable!("one key, one command each"),
        });
        let mut command = Command::Transaction(commands.collect());
        command.seed(self.seed());
        Step::One {
            key,
            command,
            shape: ReplyShape::Exec(queue.shapes),
        }
    }

    /// The reply to a command submitted for [`Step::One`].
    pub fn reply(shape: ReplyShape, answer: &Answer) -> Value {
        match answer {
            Ok(reply) => table::reply_to_value(reply, shape),
            Err(failure) => failure_value(*failure),
        }
    }

    /// The reply to the parts submitted for [`Step::Many`], from their answers in order. A
    /// part that did not get a result makes the whole command report that; for a sum,
    /// "outcome unknown" wins over "not applied" as soon as some part was applied or may have
    /// been.
    pub fn combine(combine: Combine, answers: Vec<Answer>) -> Value {
        let mut worst: Option<Failure> = None;
        for answer in &answers {
            if let Err(failure) = answer {
                worst = Some(match (worst, *failure) {
                    (Some(Failure::OutcomeUnknown), _) | (_, Failure::OutcomeUnknown) => {
                        Failure::OutcomeUnknown
                    }
                    (_, failure) => failure,
                });
            }
        }
        if let Some(failure) = worst {
            let applied_some = answers.iter().any(Result::is_ok);
            return if combine == Combine::Sum && applied_some {
                failure_value(Failure::OutcomeUnknown)
            } else {
                failure_value(failure)
            };
        }
        let replies: Vec<Reply> = answers.into_iter().flatten().collect();
        table::combine_replies(combine, &replies)
    }

    /// The reply to a request that broke the protocol; the connection closes after it.
    pub fn protocol_error(error: &ProtocolError) -> Value {
        Value::Error(format!("ERR {error}"))
    }

    fn key_error(&self, key: &[u8]) -> Option<Value> {
        (key.len() > self.key_bytes_max).then(|| {
            Value::Error(format!(
                "ERR key of {} bytes exceeds the limit of {}",
                key.len(),
                self.key_bytes_max
            ))
        })
    }

    /// A connection or server command.
    fn local(&mut self, local: Local) -> Step {
        Step::Reply(match local {
            Local::Ping(None) => simple("PONG"),
            Local::Ping(Some(message)) | Local::Echo(message) => Value::Bulk(message),
            Local::Hello {
                protocol,
                auth,
                setname,
            } => self.hello(protocol, auth, setname),
            Local::Auth { user: None, .. } if self.acl.default_takes_any_password() => {
                Value::Error(acl::AUTH_WITHOUT_PASSWORD.into())
            }
            Local::Auth { user, password } => {
                if self.log_in(user.as_deref(), &password) {
                    simple("OK")
                } else {
                    Value::Error(acl::WRONGPASS.into())
                }
            }
            Local::Acl(command) => match self.user {
                Some(user) => self.acl.answer(user, &command),
                None => Value::Error(acl::NOAUTH.into()),
            },
            Local::Quit => {
                self.closing = true;
                simple("OK")
            }
            Local::Reset => {
                self.protocol = Protocol::Resp2;
                self.name = None;
                self.transaction = Transaction::None;
                self.watched.clear();
                self.user = self.acl.initial_user();
                simple("RESET")
            }
            Local::Select(0) => simple("OK"),
            Local::Select(_) => Value::Error(
                "ERR DB index is out of range (logless has one keyspace, database 0)".into(),
            ),
            Local::ClientSetName(name) => {
                self.name = (!name.is_empty()).then_some(name);
                simple("OK")
            }
            Local::ClientGetName => self.name.clone().map_or(Value::Nil, Value::Bulk),
            Local::ClientSetInfo => simple("OK"),
            Local::ClientId => Value::Int(self.id as i64),
            Local::Command => Value::Array(
                table::command_names()
                    .map(table::command_info_value)
                    .collect(),
            ),
            Local::CommandCount => Value::Int(table::command_names().len() as i64),
            Local::CommandInfo(names) => Value::Array(
                names
                    .iter()
                    .map(|name| {
                        table::find_command(name).map_or(Value::Nil, table::command_info_value)
                    })
                    .collect(),
            ),
            Local::CommandDocs(names) => command_docs(&names),
            Local::ConfigGet(patterns) => return Step::Node(NodeQuery::ConfigGet(patterns)),
            Local::ConfigSet(pairs) => return Step::Node(NodeQuery::ConfigSet(pairs)),
            Local::Info(sections) => return Step::Node(NodeQuery::Info(sections)),
            Local::DbSize => return Step::Node(NodeQuery::DbSize),
            Local::Admin(admin) => return Step::Node(NodeQuery::Admin(admin)),
            Local::Cluster(command) => match self.cluster {
                Some(_) => return Step::Node(NodeQuery::Cluster(command)),
                None => Value::Error(CLUSTER_DISABLED.into()),
            },
            Local::ClusterConnection => match self.cluster {
                Some(_) => simple("OK"),
                None => Value::Error(CLUSTER_DISABLED.into()),
            },
            Local::Multi => {
                self.transaction = Transaction::Queued(Queue::default());
                simple("OK")
            }
            Local::Exec => Value::Error("ERR EXEC without MULTI".into()),
            Local::Discard => Value::Error("ERR DISCARD without MULTI".into()),
            // Under the per-key engine nothing is ever watched: WATCH is refused.
            Local::Unwatch => {
                self.watched.clear();
                simple("OK")
            }
        })
    }

    /// HELLO: switches the protocol (the reply is written in the new one) and describes the
    /// server.
    fn hello(
        &mut self,
        protocol: Option<Protocol>,
        auth: Option<(Bytes, Bytes)>,
        setname: Option<Bytes>,
    ) -> Value {
        match auth {
            Some((user, password)) if !self.log_in(Some(&user), &password) => {
                return Value::Error(acl::WRONGPASS.into());
            }
            None if self.user.is_none() => return Value::Error(acl::NOAUTH_HELLO.into()),
            _ => {}
        }
        if let Some(protocol) = protocol {
            self.protocol = protocol;
        }
        if let Some(name) = setname {
            self.name = Some(name);
        }
        Value::Map(vec![
            (bulk("server"), bulk("redis")),
            (bulk("version"), bulk(REDIS_COMPAT_VERSION)),
            (bulk("proto"), Value::Int(self.protocol_number())),
            (bulk("id"), Value::Int(self.id as i64)),
            (
                bulk("mode"),
                bulk(if self.cluster.is_some() {
                    "cluster"
                } else {
                    "standalone"
                }),
            ),
            (bulk("role"), bulk("master")),
            (bulk("modules"), Value::Array(Vec::new())),
            (bulk("logless_version"), bulk(env!("CARGO_PKG_VERSION"))),
        ])
    }

    fn protocol_number(&self) -> i64 {
        match self.protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// Whether a request only reads, so that a read-only user may send it: a register command
/// flagged `readonly`, an error (which runs nothing), or a connection command that changes
/// nothing but the connection's own state. Anything else — writes, CONFIG, the ACL
/// subcommands that show users, and any command added later until it is listed here — needs
/// a user with every command.
fn reads_only(spec: &CommandSpec, parsed: &Parsed) -> bool {
    match parsed {
        Parsed::Single { .. } | Parsed::Multi { .. } => spec.flags.contains(&"readonly"),
        Parsed::Error(_) => true,
        Parsed::Local(Local::Acl(command)) => !command.shows_users(),
        Parsed::Local(local) => matches!(
            local,
            Local::Ping(_)
                | Local::Echo(_)
                | Local::Hello { .. }
                | Local::Auth { .. }
                | Local::Quit
                | Local::Reset
                | Local::Select(_)
                | Local::ClientSetName(_)
                | Local::ClientGetName
                | Local::ClientSetInfo
                | Local::ClientId
                | Local::Command
                | Local::CommandCount
                | Local::CommandDocs(_)
                | Local::CommandInfo(_)
                | Local::Info(_)
                | Local::DbSize
                | Local::Admin(
                    Admin::Scan(_)
                        | Admin::Keys(_)
                        | Admin::RandomKey
                        | Admin::Time
                        | Admin::ClientList(_)
                        | Admin::ClientInfo
                )
                | Local::Multi
                | Local::Exec
                | Local::Discard
                | Local::Unwatch
                | Local::Cluster(_)
                | Local::ClusterConnection
        ),
    }
}

/// The users of a node without passwords, shared by every session that is given no other.
fn open_acl() -> Arc<Acl> {
    static OPEN: OnceLock<Arc<Acl>> = OnceLock::new();
    OPEN.get_or_init(|| Arc::new(Acl::open())).clone()
}

/// How every refusal for want of disk space starts: Redis's code for a failed persistence.
pub const DISK_FULL: &str = "MISCONF disk full: no space left on this replica's disk";

/// The error a client is told when its command got no result.
pub fn failure_value(failure: Failure) -> Value {
    Value::Error(match failure {
        Failure::NotApplied => "TRYAGAIN not applied; safe to retry".to_owned(),
        Failure::OutcomeUnknown => "UNCERTAIN timed out after the command was proposed: it may \
                                    or may not have been applied"
            .to_owned(),
        Failure::Overloaded => {
            "TRYAGAIN too many commands wait on this key; not applied".to_owned()
        }
        Failure::DiskFull => format!(
            "{DISK_FULL} for a new key; not applied (reads and writes of existing keys go on)"
        ),
        Failure::QuorumFull => "MISCONF disk full: too many replicas have no space left for a \
                                 new key; not applied (reads and writes of existing keys go on)"
            .to_owned(),
        Failure::LogFull => {
            format!("{DISK_FULL} for its log; not applied (replicas with space go on serving)")
        }
    })
}

/// `COMMAND DOCS`: enough for redis-cli's hints, a summary per known command.
fn command_docs(names: &[Bytes]) -> Value {
    let specs: Vec<_> = if names.is_empty() {
        table::command_names().collect()
    } else {
        names
            .iter()
            .filter_map(|n| table::find_command(n))
            .collect()
    };
    Value::Map(
        specs
            .into_iter()
            .map(|spec| {
                (
                    bulk(spec.name),
                    Value::Map(vec![
                        (bulk("summary"), bulk(format!("the {} command", spec.name))),
                        (bulk("since"), bulk("1.0.0")),
                        (bulk("group"), bulk("generic")),
                    ]),
                )
            })
            .collect(),
    )
}

/// SplitMix64's output function: a bijection of 64-bit numbers that mixes every bit.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A key in an error text: at most 64 bytes, lossy UTF-8.
fn shown(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[..key.len().min(64)]).into_owned()
}

fn simple(s: &str) -> Value {
    Value::Simple(s.to_owned())
}

fn bulk(s: impl Into<String>) -> Value {
    Value::Bulk(Bytes::from(s.into()))
}
