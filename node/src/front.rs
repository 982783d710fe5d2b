//! The Redis front end: one task per client connection.
//!
//! A connection reads whatever requests have arrived, hands every register command to the
//! shard that owns its key at once (so a pipeline reaches the proposer as one batch), then
//! writes the replies in request order. Connection and server commands are answered here. A
//! client that breaks the protocol gets an error reply and loses its own connection only.
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use logless_commands::command::{Command, Reply};
use logless_redis::resp::{parse_request, write_value, ParseLimits, Protocol, Value};
use logless_redis::table::{self, Combine, Parsed, ReplyShape};
use logless_rmw::ids::Key;
use logless_rmw::proposer::ProposeError;
use rustc_hash::FxHashMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tracing::debug;

use crate::info;
use crate::node::NodeContext;
use crate::shard::{CommandResult, ReplyTo, ShardInput, Submitted};

/// The longest key accepted (the store's limit).
pub const KEY_BYTES_MAX: usize = 1024;

/// Accepts client connections until `shutdown`.
pub async fn accept(
    listener: TcpListener,
    context: Arc<NodeContext>,
    shutdown: watch::Receiver<bool>,
) {
    let mut stop = shutdown.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            a = listener.accept() => a,
        };
        let Ok((mut stream, _)) = accepted else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        if context.clients_connected.load(Ordering::Relaxed) as usize >= context.config.clients_max
        {
            context.clients_refused.fetch_add(1, Ordering::Relaxed);
            let _ = stream
                .write_all(b"-ERR max number of clients reached\r\n")
                .await;
            continue;
        }
        let id = context.clients_accepted.fetch_add(1, Ordering::Relaxed) + 1;
        context.clients_connected.fetch_add(1, Ordering::Relaxed);
        let context = context.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            tokio::select! {
                _ = shutdown.changed() => {}
                result = serve(stream, id, &context) => {
                    if let Err(e) = result {
                        debug!(client = id, error = %e, "client connection ended");
                    }
                }
            }
            context.clients_connected.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// The longest bulk string a request may carry: a value at the limit plus room for the
/// arguments of commands such as SET ... IFEQ.
pub fn bulk_bytes_max(value_bytes_max: usize) -> usize {
    value_bytes_max + 1024
}

/// One client's connection state.
pub struct Connection {
    /// The connection id (CLIENT ID).
    pub id: u64,
    /// RESP2 until HELLO 3.
    pub protocol: Protocol,
    /// CLIENT SETNAME.
    pub name: Option<Bytes>,
    /// Set by QUIT: close after the replies are written.
    pub closing: bool,
    /// After a refused MULTI, commands are not run until EXEC or DISCARD, so that a client
    /// library's transaction applies nothing rather than a part of itself.
    pub refused_multi: bool,
}

/// A reply that may still be on its way.
enum Pending {
    Ready(Value, Protocol),
    One(u64, ReplyShape, Protocol),
    Many(Vec<u64>, Combine, Protocol),
}

/// Submits a connection's commands to the shards in batches and collects the answers, which
/// arrive on one channel in any order and are taken by sequence number.
struct Exchange {
    tx: mpsc::UnboundedSender<(u64, CommandResult)>,
    rx: mpsc::UnboundedReceiver<(u64, CommandResult)>,
    next_seq: u64,
    /// Commands waiting to be handed to each shard.
    outbox: Vec<Vec<Submitted>>,
    outbox_len: usize,
    arrived: FxHashMap<u64, CommandResult>,
}

/// A connection hands its commands to the shards at least every this many commands.
const OUTBOX_MAX: usize = 1024;

impl Exchange {
    fn new(shards: usize) -> Exchange {
        let (tx, rx) = mpsc::unbounded_channel();
        Exchange {
            tx,
            rx,
            next_seq: 0,
            outbox: (0..shards).map(|_| Vec::new()).collect(),
            outbox_len: 0,
            arrived: FxHashMap::default(),
        }
    }

    async fn submit(&mut self, context: &NodeContext, key: Bytes, command: Command) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        let shard = shard_of(&key, self.outbox.len());
        self.outbox[shard].push(Submitted {
            key: Key::new(key),
            command,
            reply: ReplyTo {
                tx: self.tx.clone(),
                seq,
            },
        });
        self.outbox_len += 1;
        if self.outbox_len >= OUTBOX_MAX {
            self.send(context).await;
        }
        seq
    }

    /// Hands every waiting command to its shard.
    async fn send(&mut self, context: &NodeContext) {
        for (shard, commands) in self.outbox.iter_mut().enumerate() {
            if commands.is_empty() {
                continue;
            }
            let batch = std::mem::take(commands);
            if let Err(refused) = context.shards[shard]
                .send(ShardInput::Commands(batch))
                .await
            {
                // A stopped shard: none of these commands ran.
                if let ShardInput::Commands(batch) = refused.0 {
                    for submitted in batch {
                        self.arrived
                            .insert(submitted.reply.seq, Err(ProposeError::NotApplied));
                    }
                }
            }
        }
        self.outbox_len = 0;
    }

    async fn take(&mut self, seq: u64) -> CommandResult {
        loop {
            if let Some(result) = self.arrived.remove(&seq) {
                return result;
            }
            match self.rx.recv().await {
                Some((s, result)) => {
                    self.arrived.insert(s, result);
                }
                None => return Err(ProposeError::NotApplied),
            }
        }
    }
}

async fn serve(mut stream: TcpStream, id: u64, context: &NodeContext) -> std::io::Result<()> {
    let limits = ParseLimits {
        bulk_bytes_max: bulk_bytes_max(context.config.value_bytes_max),
        ..ParseLimits::default()
    };
    let mut connection = Connection {
        id,
        protocol: Protocol::Resp2,
        name: None,
        closing: false,
        refused_multi: false,
    };
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = BytesMut::with_capacity(16 * 1024);
    let mut pending = VecDeque::new();
    let mut exchange = Exchange::new(context.shards.len());
    loop {
        let n = stream.read_buf(&mut input).await?;
        if n == 0 {
            return Ok(());
        }
        context
            .client_bytes_in
            .fetch_add(n as u64, Ordering::Relaxed);
        let mut broken = None;
        while !connection.closing {
            match parse_request(&mut input, &limits) {
                Ok(Some(args)) if args.is_empty() => {}
                Ok(Some(args)) => {
                    context.client_requests.fetch_add(1, Ordering::Relaxed);
                    pending
                        .push_back(dispatch(&args, &mut connection, &mut exchange, context).await);
                }
                Ok(None) => break,
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
        }
        exchange.send(context).await;
        for p in pending.drain(..) {
            let (value, protocol) = resolve(p, &mut exchange).await;
            write_value(&mut output, &value, protocol);
        }
        if let Some(e) = &broken {
            context
                .client_protocol_errors
                .fetch_add(1, Ordering::Relaxed);
            write_value(
                &mut output,
                &Value::Error(format!("ERR {e}")),
                connection.protocol,
            );
        }
        stream.write_all(&output).await?;
        context
            .client_bytes_out
            .fetch_add(output.len() as u64, Ordering::Relaxed);
        output.clear();
        if broken.is_some() || connection.closing {
            return stream.shutdown().await;
        }
        // Keep the buffer small when a big request has passed.
        if input.is_empty() && input.capacity() > 1 << 20 {
            input = BytesMut::with_capacity(16 * 1024);
        }
    }
}

/// The shard that owns `key`: the same on every replica.
pub fn shard_of(key: &[u8], shards: usize) -> usize {
    (crc32c::crc32c(key) as usize) % shards
}

fn key_error(key: &[u8]) -> Option<Value> {
    (key.len() > KEY_BYTES_MAX).then(|| {
        Value::Error(format!(
            "ERR key of {} bytes exceeds the limit of {KEY_BYTES_MAX}",
            key.len()
        ))
    })
}

async fn dispatch(
    args: &[Bytes],
    connection: &mut Connection,
    exchange: &mut Exchange,
    context: &NodeContext,
) -> Pending {
    let protocol = connection.protocol;
    if let Some(reply) = refused_transaction(args, connection) {
        return Pending::Ready(reply, protocol);
    }
    // Registers keep keys and values for as long as they live; copies let the connection's
    // read buffer be reused instead of being pinned by slices of it.
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
    match table::parse_command(&args) {
        Parsed::Single {
            key,
            command,
            shape,
        } => {
            if let Some(e) = key_error(&key) {
                return Pending::Ready(e, protocol);
            }
            Pending::One(
                exchange.submit(context, key, command).await,
                shape,
                protocol,
            )
        }
        Parsed::Multi { parts, combine } => {
            if let Some(e) = parts.iter().find_map(|(k, _)| key_error(k)) {
                return Pending::Ready(e, protocol);
            }
            let mut seqs = Vec::with_capacity(parts.len());
            for (key, command) in parts {
                seqs.push(exchange.submit(context, key, command).await);
            }
            Pending::Many(seqs, combine, protocol)
        }
        Parsed::Local(local) => {
            let value = info::answer_local(local, connection, context).await;
            // HELLO answers in the protocol it switches to.
            Pending::Ready(value, connection.protocol)
        }
        Parsed::Error(text) => Pending::Ready(Value::Error(text), protocol),
    }
}

/// MULTI is refused (keys are independent registers, so a transaction cannot be atomic). A
/// client that goes on queueing commands expects none of them to run before EXEC, so until
/// EXEC or DISCARD every command is answered with an error and not run.
fn refused_transaction(args: &[Bytes], connection: &mut Connection) -> Option<Value> {
    let name = args.first()?;
    if name.eq_ignore_ascii_case(b"multi") {
        connection.refused_multi = true;
        return None; // the table's refusal names the reason
    }
    if !connection.refused_multi {
        return None;
    }
    if name.eq_ignore_ascii_case(b"exec") {
        connection.refused_multi = false;
        return Some(Value::Error(
            "EXECABORT Transaction discarded: logless refused the MULTI; nothing was run".into(),
        ));
    }
    if name.eq_ignore_ascii_case(b"discard") {
        connection.refused_multi = false;
        return Some(Value::Simple("OK".into()));
    }
    Some(Value::Error(
        "ERR not run: this connection sent a MULTI, which logless refuses (every key is its \
         own register, so a transaction cannot be atomic); send EXEC or DISCARD to leave it"
            .into(),
    ))
}

/// The error text of a command that did not get a result.
pub fn propose_error(e: ProposeError) -> Value {
    Value::Error(match e {
        ProposeError::NotApplied => "TRYAGAIN not applied; safe to retry".to_string(),
        ProposeError::OutcomeUnknown => {
            "UNCERTAIN timed out after the command was proposed: it may or may not have been \
             applied"
                .to_string()
        }
        ProposeError::Overloaded => {
            "TRYAGAIN too many commands wait on this key; not applied".to_string()
        }
    })
}

async fn resolve(pending: Pending, exchange: &mut Exchange) -> (Value, Protocol) {
    match pending {
        Pending::Ready(value, protocol) => (value, protocol),
        Pending::One(seq, shape, protocol) => {
            let value = match exchange.take(seq).await {
                Ok(reply) => table::reply_to_value(&reply, shape),
                Err(e) => propose_error(e),
            };
            (value, protocol)
        }
        Pending::Many(seqs, combine, protocol) => {
            let mut results = Vec::with_capacity(seqs.len());
            for seq in seqs {
                results.push(exchange.take(seq).await);
            }
            (combine_replies(results, combine), protocol)
        }
    }
}

/// Combines the replies of a multi-key command's parts. A part that did not get a result makes
/// the whole command report that (for a sum, with "outcome unknown" winning over "not applied"
/// because some parts may have been applied).
fn combine_replies(results: Vec<CommandResult>, combine: Combine) -> Value {
    let mut worst: Option<ProposeError> = None;
    for r in &results {
        if let Err(e) = r {
            worst = Some(match (worst, *e) {
                (Some(ProposeError::OutcomeUnknown), _) | (_, ProposeError::OutcomeUnknown) => {
                    ProposeError::OutcomeUnknown
                }
                (_, e) => e,
            });
        }
    }
    if let Some(e) = worst {
        let applied_some = results.iter().any(|r| r.is_ok());
        return if matches!(combine, Combine::Sum) && applied_some {
            propose_error(ProposeError::OutcomeUnknown)
        } else {
            propose_error(e)
        };
    }
    let replies: Vec<Reply> = results.into_iter().flatten().collect();
    table::combine_replies(combine, &replies)
}
