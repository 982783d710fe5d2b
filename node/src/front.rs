//! The Redis front end: one task per client connection, keeping its socket and buffers.
//!
//! A connection reads whatever requests have arrived and gives each to its
//! [`logless_redis::session::Session`], which decides what it asks for; every engine
//! command is handed to the shard that owns its key at once (so a pipeline reaches the proposer
//! as one batch), and the replies are written in request order. A command the node answers
//! itself (INFO, CONFIG, SCAN, CLIENT LIST, ...) waits for the replies of the commands before
//! it in the pipeline. A client that breaks the protocol gets an error reply and loses its own
//! connection only; one that goes over a limit of [`crate::limits`] (idle, a pending request's
//! or its unread replies' bytes) loses it without one, and the closing is counted. Every
//! connection is in the node's registry ([`crate::clients`]) while it lasts, and ends at once
//! when CLIENT KILL names it (after the replies it has read, when it named itself). The TLS
//! listener's connections are served the same way once their handshake is done
//! ([`crate::tls`]). Under the log engine every engine step is one operation handed to the
//! log's loop instead ([`crate::log_ops`]), and answered once executed in the log's order.
//! Under the psmr engine the B⁺-tree service's commands ([`crate::psmr_ops`]) go to its loop,
//! and are answered once a worker thread executed them.
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use logless_commands::command::Command;
use logless_multipaxos::kv::Operation;
use logless_redis::resp::{parse_request, ParseLimits, Protocol, Value};
use logless_redis::session::{Answer, Failure, Session, Step, MAX_CLIENTS_REPLY};
use logless_redis::table::{Combine, ReplyShape};
use logless_rmw::ids::Key;
use logless_rmw::proposer::ProposeError;
use rustc_hash::FxHashMap;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tracing::debug;

use crate::clients::Connection;
use crate::context::{shard_of, NodeContext};
use crate::forward::{Forwarded, Route};
use crate::info;
use crate::limits::{check_query, ClientLimits, Ended, IdleClock, Output};
use crate::log_loop::{LogInput, LogReplyTo, LogSubmitted};
use crate::log_ops::{self, Shown};
use crate::log_turn::LogAnswer;
use crate::psmr_loop::{PsmrInput, PsmrReplyTo, PsmrSubmitted};
use crate::psmr_ops::{self, PsmrStep};
use crate::psmr_service::ServiceKind;
use crate::psmr_turn::PsmrAnswer;
use crate::shard::{CommandResult, ReplyTo, ShardInput, Submitted};
use crate::tls;
use crate::turn::{answer_of, take_batch};

/// Accepts client connections until `shutdown`; with `tls`, each one's TLS handshake first.
pub async fn accept(
    listener: TcpListener,
    context: Arc<NodeContext>,
    shutdown: watch::Receiver<bool>,
    tls: Option<TlsAcceptor>,
) {
    let mut stop = shutdown.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            a = listener.accept() => a,
        };
        let Ok((mut stream, addr)) = accepted else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let clients = &context.clients;
        let clients_max = context.settings.clients_max.load(Ordering::Relaxed);
        if clients.connected.load(Ordering::Relaxed) as usize >= clients_max {
            clients.refused.fetch_add(1, Ordering::Relaxed);
            if tls.is_none() {
                let _ = stream.write_all(MAX_CLIENTS_REPLY).await;
            }
            continue;
        }
        let id = clients.accepted.fetch_add(1, Ordering::Relaxed) + 1;
        clients.connected.fetch_add(1, Ordering::Relaxed);
        let laddr = stream.local_addr().unwrap_or(context.bound.client);
        let registration = context.connections.register(id, addr, laddr);
        let context = context.clone();
        let mut shutdown = shutdown.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let connection = registration.connection();
            tokio::select! {
                _ = shutdown.changed() => {}
                () = connection.killed() => debug!(client = id, "client connection killed"),
                result = serve_tcp(stream, tls, connection, &context) => match result {
                    Ok(()) => {}
                    Err(Ended::Cut(cut)) => {
                        cut.count(&context.clients);
                        debug!(client = id, ?cut, "client connection closed over a limit");
                    }
                    Err(Ended::Io(e)) => debug!(client = id, error = %e, "client connection ended"),
                }
            }
            drop(registration);
            context.clients.connected.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// A reply that may still be on its way, with the protocol it is written in.
enum Pending {
    Ready(Value, Protocol),
    One(u64, ReplyShape, Protocol),
    Many(Vec<u64>, Combine, Protocol),
    /// One operation of the log engine.
    Log(u64, Shown, Protocol),
    /// One command of the psmr engine.
    Psmr(u64, ServiceKind, Protocol),
    /// One request forwarded to another node of a ring.
    Forwarded(Forwarded, Protocol),
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
    /// The log engine's answers, and its operations waiting to be handed to the log.
    log: Answers<LogAnswer>,
    log_outbox: Vec<LogSubmitted>,
    /// The psmr engine's answers, and its commands waiting to be handed to its loop.
    psmr: Answers<PsmrAnswer>,
    psmr_outbox: Vec<PsmrSubmitted>,
}

/// The answers of an engine's one loop (the log's, psmr's) to a connection: they arrive on one
/// channel in any order and are taken by number.
struct Answers<A> {
    tx: mpsc::UnboundedSender<(u64, A)>,
    rx: mpsc::UnboundedReceiver<(u64, A)>,
    arrived: FxHashMap<u64, A>,
}

impl<A> Answers<A> {
    fn new() -> Answers<A> {
        let (tx, rx) = mpsc::unbounded_channel();
        Answers {
            tx,
            rx,
            arrived: FxHashMap::default(),
        }
    }

    /// The answer numbered `seq`, or `None` if the loop stopped without giving it.
    async fn take(&mut self, seq: u64) -> Option<A> {
        loop {
            if let Some(answer) = self.arrived.remove(&seq) {
                return Some(answer);
            }
            let (s, answer) = self.rx.recv().await?;
            self.arrived.insert(s, answer);
        }
    }
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
            log: Answers::new(),
            log_outbox: Vec::new(),
            psmr: Answers::new(),
            psmr_outbox: Vec::new(),
        }
    }

    /// Queues one operation for the log; returns its number.
    async fn submit_log(&mut self, context: &NodeContext, operation: Operation) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.log_outbox.push(LogSubmitted {
            operation,
            reply: LogReplyTo {
                tx: self.log.tx.clone(),
                seq,
            },
        });
        if self.log_outbox.len() >= OUTBOX_MAX {
            self.send(context).await;
        }
        seq
    }

    /// Queues one command for the psmr loop; returns its number.
    async fn submit_psmr(&mut self, context: &NodeContext, command: Bytes) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.psmr_outbox.push(PsmrSubmitted {
            command,
            reply: PsmrReplyTo {
                tx: self.psmr.tx.clone(),
                seq,
            },
        });
        if self.psmr_outbox.len() >= OUTBOX_MAX {
            self.send(context).await;
        }
        seq
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

    /// Hands every waiting command to its shard, and every waiting operation to the log.
    async fn send(&mut self, context: &NodeContext) {
        if let (Some(log), false) = (&context.log, self.log_outbox.is_empty()) {
            let batch = take_batch(&mut self.log_outbox);
            if let Err(refused) = log.send(LogInput::Submit(batch)).await {
                // A stopped log: none of these operations ran.
                if let LogInput::Submit(batch) = refused.0 {
                    for submitted in batch {
                        self.log
                            .arrived
                            .insert(submitted.reply.seq, Err(Failure::NotApplied));
                    }
                }
            }
        }
        if let (Some(psmr), false) = (&context.psmr, self.psmr_outbox.is_empty()) {
            let batch = take_batch(&mut self.psmr_outbox);
            if let Err(refused) = psmr.send(PsmrInput::Submit(batch)).await {
                // A stopped loop: none of these commands ran.
                if let PsmrInput::Submit(batch) = refused.0 {
                    for submitted in batch {
                        self.psmr
                            .arrived
                            .insert(submitted.reply.seq, Err(Failure::NotApplied));
                    }
                }
            }
        }
        for (shard, commands) in self.outbox.iter_mut().enumerate() {
            if commands.is_empty() {
                continue;
            }
            let batch = take_batch(commands);
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

/// Serves an accepted connection, after its TLS handshake with `tls`.
async fn serve_tcp(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    connection: &Connection,
    context: &NodeContext,
) -> Result<(), Ended> {
    match tls {
        None => serve(stream, connection, context).await,
        Some(acceptor) => {
            let stream = tls::accept_client(&acceptor, stream, &context.clients).await?;
            serve(stream, connection, context).await
        }
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    connection: &Connection,
    context: &NodeContext,
) -> Result<(), Ended> {
    let id = connection.id();
    let parse_limits = ParseLimits {
        bulk_bytes_max: context.config.bulk_bytes_max(),
        ..ParseLimits::default()
    };
    let limits = ClientLimits::of(&context.config);
    let counters = &context.clients;
    let mut session = Session::new(id)
        .with_value_bytes_max(context.config.value_bytes_max)
        .with_acl(context.acl.clone())
        .with_cluster(context.cluster.as_ref().map(|c| c.map()))
        // Under psmr, commands over several keys parse, to be refused as the engine's.
        .with_total_order(context.log.is_some() || context.psmr.is_some());
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = Output::new(limits.output_bytes_max);
    let mut clock = IdleClock::new(limits.idle);
    let mut pending = VecDeque::new();
    let mut exchange = Exchange::new(context.shards.len());
    let mut cluster_generation = context.cluster.as_ref().map_or(0, |c| c.generation());
    loop {
        let n = clock.read(&mut stream, &mut input).await?;
        if n == 0 {
            return Ok(());
        }
        counters.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        session.set_value_bytes_max(context.settings.value_bytes_max.load(Ordering::Relaxed));
        session = refresh_cluster(session, &mut cluster_generation, context);
        let mut broken = None;
        let mut last_command = None;
        let auth_failures = session.auth_failures();
        // Checked before the node started.
        let psmr_service = context.config.psmr_service().unwrap_or_default();
        while !session.is_closing() && !connection.is_closing() {
            match parse_request(&mut input, &parse_limits) {
                Ok(Some(args)) if args.is_empty() => {}
                Ok(Some(args)) => {
                    clock.restart();
                    counters.requests.fetch_add(1, Ordering::Relaxed);
                    let mut args = owned(&args);
                    let step = match context.psmr {
                        None => session.handle(&args),
                        Some(_) => {
                            match psmr_ops::handle_for(
                                &mut session,
                                &context.acl,
                                psmr_service,
                                &args,
                            ) {
                                PsmrStep::Session(step) => step,
                                submit @ (PsmrStep::Submit(_) | PsmrStep::Frame(_)) => {
                                    let protocol = session.protocol();
                                    let command = submit.encoded().expect("a step that submits");
                                    let seq = exchange.submit_psmr(context, command).await;
                                    pending.push_back(Pending::Psmr(seq, psmr_service, protocol));
                                    last_command = Some(args.swap_remove(0));
                                    continue;
                                }
                                PsmrStep::Digest => {
                                    exchange.send(context).await;
                                    write_replies(
                                        &mut stream,
                                        &mut output,
                                        &mut pending,
                                        &mut exchange,
                                    )
                                    .await?;
                                    let value = psmr_ops::digest(context).await;
                                    output.push(&mut stream, &value, session.protocol()).await?;
                                    last_command = Some(args.swap_remove(0));
                                    continue;
                                }
                            }
                        }
                    };
                    let protocol = session.protocol();
                    if let (Step::Watch(keys), Some(_)) = (&step, &context.log) {
                        // The commands before it in the pipeline run first, and the next
                        // request is handled only with the stamps kept: an EXEC must carry
                        // them, and must enter the log after the WATCH.
                        exchange.send(context).await;
                        write_replies(&mut stream, &mut output, &mut pending, &mut exchange)
                            .await?;
                        let seq = exchange
                            .submit_log(context, Operation::Watch(keys.clone()))
                            .await;
                        exchange.send(context).await;
                        let answer = exchange.log.take(seq).await;
                        let answer = answer.unwrap_or(Err(Failure::NotApplied));
                        let value = log_ops::watched(&mut session, keys.clone(), answer);
                        output.push(&mut stream, &value, protocol).await?;
                    } else if let Step::Node(query) = step {
                        // The commands before it in the pipeline take effect first (a SET
                        // before a KEYS or DBSIZE shows in it), and CLIENT LIST shows this
                        // connection as it is now.
                        exchange.send(context).await;
                        write_replies(&mut stream, &mut output, &mut pending, &mut exchange)
                            .await?;
                        connection.note(&session, Some(&args[0]));
                        let value = info::answer(query, connection, context).await;
                        output.push(&mut stream, &value, protocol).await?;
                    } else if let Some(forwarded) = forward(&step, &args, protocol, context) {
                        pending.push_back(forwarded);
                    } else {
                        pending.push_back(dispatch(step, protocol, &mut exchange, context).await);
                    }
                    last_command = Some(args.swap_remove(0));
                }
                Ok(None) => break,
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
        }
        counters
            .rejected_auth
            .fetch_add(session.auth_failures() - auth_failures, Ordering::Relaxed);
        connection.note(&session, last_command.as_ref());
        exchange.send(context).await;
        let written = write_replies(&mut stream, &mut output, &mut pending, &mut exchange).await;
        output.count_written(&counters.bytes_out);
        written?;
        if broken.is_none() && !session.is_closing() {
            check_query(&input, &limits)?;
        }
        if let Some(e) = &broken {
            counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
            output
                .push(&mut stream, &Session::protocol_error(e), session.protocol())
                .await?;
        }
        let flushed = output.flush(&mut stream, &mut clock).await;
        output.count_written(&counters.bytes_out);
        flushed?;
        if broken.is_some() || session.is_closing() || connection.is_closing() {
            return Ok(stream.shutdown().await?);
        }
        // Keep the buffer small when a big request has passed.
        if input.is_empty() && input.capacity() > 1 << 20 {
            input = BytesMut::with_capacity(16 * 1024);
        }
    }
}

/// Resolves the pending replies in order and hands them to `output`.
async fn write_replies<S: AsyncWrite + Unpin>(
    stream: &mut S,
    output: &mut Output,
    pending: &mut VecDeque<Pending>,
    exchange: &mut Exchange,
) -> Result<(), Ended> {
    while let Some(p) = pending.pop_front() {
        let (value, protocol) = resolve(p, exchange).await;
        output.push(stream, &value, protocol).await?;
    }
    Ok(())
}

/// The request's arguments in one buffer of their own. Registers keep keys and values for as
/// long as they live; slices of the connection's read buffer would pin all of it, so the
/// arguments are copied, in one allocation per request rather than one per argument.
fn owned(args: &[Bytes]) -> Vec<Bytes> {
    let mut buffer = BytesMut::with_capacity(args.iter().map(Bytes::len).sum());
    for arg in args {
        buffer.extend_from_slice(arg);
    }
    let mut buffer = buffer.freeze();
    args.iter().map(|arg| buffer.split_to(arg.len())).collect()
}

/// In cluster mode, `session` with the node's current map if a stage was installed since it
/// took the one of `generation` (docs/ring.md §4 "Operating": no session redirects by a stage
/// its node has left).
fn refresh_cluster(session: Session, generation: &mut u64, context: &NodeContext) -> Session {
    match &context.cluster {
        Some(cluster) if cluster.generation() != *generation => {
            *generation = cluster.generation();
            session.with_cluster(Some(cluster.map()))
        }
        _ => session,
    }
}

/// On a ring, the reply of a request on keys this node does not hold: forwarded to one of
/// their replicas, or refused ([`crate::forward`]). `None` runs it here.
fn forward(
    step: &Step,
    args: &[Bytes],
    protocol: Protocol,
    context: &NodeContext,
) -> Option<Pending> {
    let forwarder = context.forwarder.as_ref()?;
    match forwarder.route(&args[0], step) {
        Route::Local => None,
        Route::Refuse(value) => Some(Pending::Ready(value, protocol)),
        Route::Forward(replicas) => {
            let up = crate::cluster::peers_up(context);
            let forwarded = forwarder.forward(replicas, |n| up.contains(&n), args, protocol);
            Some(Pending::Forwarded(forwarded, protocol))
        }
    }
}

/// Carries out what the session decided for one request.
async fn dispatch(
    step: Step,
    protocol: Protocol,
    exchange: &mut Exchange,
    context: &NodeContext,
) -> Pending {
    if context.log.is_some() {
        return dispatch_log(step, protocol, exchange, context).await;
    }
    match step {
        Step::Reply(value) => Pending::Ready(value, protocol),
        Step::One {
            key,
            command,
            shape,
        } => Pending::One(
            exchange.submit(context, key, command).await,
            shape,
            protocol,
        ),
        Step::Many { parts, combine } => {
            let mut seqs = Vec::with_capacity(parts.len());
            for (key, command) in parts {
                seqs.push(exchange.submit(context, key, command).await);
            }
            Pending::Many(seqs, combine, protocol)
        }
        Step::Cross { .. } => Pending::Ready(
            Value::Error("ERR commands over several keys need the multipaxos engine".into()),
            protocol,
        ),
        // Only a session with one order over all keys watches; under psmr, WATCH is refused
        // as the engine's.
        Step::Watch(_) => {
            let service = context.config.psmr_service().unwrap_or_default();
            Pending::Ready(Value::Error(psmr_ops::refusal(service, b"watch")), protocol)
        }
        Step::Node(_) => unreachable!("serve answers node queries itself"),
    }
}

/// Carries out what the session decided for one request, under the log engine: every step is
/// one operation of the log ([`crate::log_ops`]).
async fn dispatch_log(
    step: Step,
    protocol: Protocol,
    exchange: &mut Exchange,
    context: &NodeContext,
) -> Pending {
    let (operation, shown) = match step {
        Step::Reply(value) => return Pending::Ready(value, protocol),
        Step::One {
            key,
            command,
            shape,
        } => (log_ops::single(key, command), Shown::Shape(shape)),
        Step::Many { parts, combine } => (log_ops::many(parts, combine), Shown::Combine(combine)),
        Step::Cross { op, shape } => (log_ops::cross(op), Shown::Shape(shape)),
        Step::Node(_) | Step::Watch(_) => unreachable!("serve runs these itself"),
    };
    Pending::Log(
        exchange.submit_log(context, operation).await,
        shown,
        protocol,
    )
}

async fn resolve(pending: Pending, exchange: &mut Exchange) -> (Value, Protocol) {
    match pending {
        Pending::Ready(value, protocol) => (value, protocol),
        Pending::One(seq, shape, protocol) => {
            let answer = answer_of(exchange.take(seq).await);
            (Session::reply(shape, &answer), protocol)
        }
        Pending::Many(seqs, combine, protocol) => {
            let mut answers: Vec<Answer> = Vec::with_capacity(seqs.len());
            for seq in seqs {
                answers.push(answer_of(exchange.take(seq).await));
            }
            (Session::combine(combine, answers), protocol)
        }
        Pending::Log(seq, shown, protocol) => {
            let answer = exchange.log.take(seq).await;
            let answer = answer.unwrap_or(Err(Failure::NotApplied));
            (log_ops::reply(answer, shown), protocol)
        }
        Pending::Forwarded(forwarded, protocol) => (forwarded.reply().await, protocol),
        Pending::Psmr(seq, service, protocol) => {
            let answer = exchange.psmr.take(seq).await;
            let answer = answer.unwrap_or(Err(Failure::NotApplied));
            (psmr_ops::reply_for(service, answer), protocol)
        }
    }
}
