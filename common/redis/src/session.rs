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
use bytes::Bytes;
use logless_commands::command::{Command, Reply};
use logless_commands::KEY_BYTES_MAX;

use crate::resp::{Protocol, ProtocolError, Value};
use crate::table::{self, Combine, Local, Parsed, ReplyShape};

/// The Redis version logless reports to clients that ask: the command set it follows.
pub const REDIS_COMPAT_VERSION: &str = "7.4.0";

/// The whole reply, RESP-encoded, to a connection refused because too many are open.
pub const MAX_CLIENTS_REPLY: &[u8] = b"-ERR max number of clients reached\r\n";

/// The error answered to `CONFIG SET`.
pub const CONFIG_SET_REFUSED: &str =
    "ERR logless is configured when a replica starts; CONFIG SET is not supported";

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
    /// A server command the node answers from its own state.
    Node(NodeQuery),
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
}

/// The transaction state of a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transaction {
    /// No MULTI is open.
    #[default]
    None,
    /// A MULTI was refused (every key is its own register, so a transaction spanning keys
    /// cannot be atomic). A client that goes on queueing commands expects none of them to run
    /// before EXEC, so until EXEC or DISCARD every command is answered with an error and not
    /// run: the client library's transaction applies nothing rather than a part of itself.
    Refused,
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
        }
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
    pub fn transaction(&self) -> Transaction {
        self.transaction
    }

    /// Decides what to do with one request (`args` non-empty, the command name first).
    pub fn handle(&mut self, args: &[Bytes]) -> Step {
        if let Some(reply) = self.in_refused_transaction(args) {
            return Step::Reply(reply);
        }
        match table::parse_command(args) {
            Parsed::Single {
                key,
                command,
                shape,
            } => match self.key_error(&key) {
                Some(e) => Step::Reply(e),
                None => Step::One {
                    key,
                    command,
                    shape,
                },
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
    pub fn combine(combine: Combine, answers: &[Answer]) -> Value {
        let mut worst: Option<Failure> = None;
        for answer in answers {
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
        let replies: Vec<Reply> = answers.iter().flatten().cloned().collect();
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

    /// The answer while a refused MULTI is open (see [`Transaction::Refused`]), or `None` if
    /// the request is to be parsed as usual.
    fn in_refused_transaction(&mut self, args: &[Bytes]) -> Option<Value> {
        let name = args.first()?;
        if name.eq_ignore_ascii_case(b"multi") {
            self.transaction = Transaction::Refused;
            return None; // the table's refusal names the reason
        }
        // RESET and QUIT leave a transaction as they would in Redis, which runs them at once.
        if self.transaction != Transaction::Refused
            || name.eq_ignore_ascii_case(b"reset")
            || name.eq_ignore_ascii_case(b"quit")
        {
            return None;
        }
        if name.eq_ignore_ascii_case(b"exec") {
            self.transaction = Transaction::None;
            return Some(Value::Error(
                "EXECABORT Transaction discarded: logless refused the MULTI; nothing was run"
                    .into(),
            ));
        }
        if name.eq_ignore_ascii_case(b"discard") {
            self.transaction = Transaction::None;
            return Some(simple("OK"));
        }
        Some(Value::Error(
            "ERR not run: this connection sent a MULTI, which logless refuses (every key is its \
             own register, so a transaction cannot be atomic); send EXEC or DISCARD to leave it"
                .into(),
        ))
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
            // There are no users: AUTH passes like Redis's default user without a password.
            Local::Auth => simple("OK"),
            Local::Quit => {
                self.closing = true;
                simple("OK")
            }
            Local::Reset => {
                self.protocol = Protocol::Resp2;
                self.name = None;
                self.transaction = Transaction::None;
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
            Local::ClientInfo => bulk(format!(
                "id={} name={} db=0 resp={}\n",
                self.id,
                self.name
                    .as_ref()
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .unwrap_or_default(),
                self.protocol_number()
            )),
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
        if auth.is_some_and(|(user, _)| &user[..] != b"default") {
            return Value::Error(
                "WRONGPASS invalid username-password pair or user is disabled.".into(),
            );
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
            (bulk("mode"), bulk("standalone")),
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

/// The error a client is told when its command got no result.
pub fn failure_value(failure: Failure) -> Value {
    Value::Error(
        match failure {
            Failure::NotApplied => "TRYAGAIN not applied; safe to retry",
            Failure::OutcomeUnknown => {
                "UNCERTAIN timed out after the command was proposed: it may or may not have been \
                 applied"
            }
            Failure::Overloaded => "TRYAGAIN too many commands wait on this key; not applied",
        }
        .to_owned(),
    )
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

fn simple(s: &str) -> Value {
    Value::Simple(s.to_owned())
}

fn bulk(s: impl Into<String>) -> Value {
    Value::Bulk(Bytes::from(s.into()))
}
