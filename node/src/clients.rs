//! The registry of a replica's client connections, for CLIENT LIST and CLIENT KILL.
//!
//! Each connection registers when it is accepted and leaves when it ends. What CLIENT LIST
//! shows of it (name, last command, protocol, open transaction) is noted by the connection
//! once per batch of requests it reads, so the hot path takes one uncontended lock per batch;
//! the registry's own lock is taken only when a connection comes or goes and by CLIENT
//! LIST/KILL.
use logless_redis::acl::DEFAULT_USER;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use logless_redis::resp::Protocol;
use logless_redis::session::{Session, Transaction};
use logless_redis::table::admin::ClientView;
use tokio::sync::Notify;

/// The most bytes of a command's name CLIENT LIST shows.
const CMD_BYTES_SHOWN: usize = 32;

/// Every connection open now.
#[derive(Debug, Default)]
pub struct ClientRegistry {
    connections: Mutex<BTreeMap<u64, Arc<Connection>>>,
}

/// One client connection as the registry knows it.
#[derive(Debug)]
pub struct Connection {
    id: u64,
    addr: SocketAddr,
    laddr: SocketAddr,
    connected: Instant,
    noted: Mutex<Noted>,
    /// Set by CLIENT KILL: the connection closes.
    killed: AtomicBool,
    /// Set by a CLIENT KILL that the connection sent itself: it closes after its replies.
    closing: AtomicBool,
    kill: Notify,
}

/// What the connection last told the registry.
#[derive(Debug)]
struct Noted {
    name: Option<Bytes>,
    /// The latest command's name, lowercase (empty before the first).
    cmd: String,
    last: Instant,
    resp: u8,
    multi: Option<usize>,
    /// The user it is logged in as.
    user: String,
}

/// A connection's place in the registry: it leaves when this is dropped.
#[derive(Debug)]
pub struct Registration {
    registry: Arc<ClientRegistry>,
    connection: Arc<Connection>,
}

impl ClientRegistry {
    /// Registers connection `id` from `addr` to `laddr`.
    pub fn register(
        self: &Arc<Self>,
        id: u64,
        addr: SocketAddr,
        laddr: SocketAddr,
    ) -> Registration {
        let now = Instant::now();
        let connection = Arc::new(Connection {
            id,
            addr,
            laddr,
            connected: now,
            noted: Mutex::new(Noted {
                name: None,
                cmd: String::new(),
                last: now,
                resp: 2,
                multi: None,
                user: DEFAULT_USER.to_owned(),
            }),
            killed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            kill: Notify::new(),
        });
        self.lock().insert(id, connection.clone());
        Registration {
            registry: self.clone(),
            connection,
        }
    }

    /// Every connection open now, by id.
    pub fn connections(&self) -> Vec<Arc<Connection>> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Connection>>> {
        // A panic while holding the lock leaves the map consistent (single inserts/removes).
        self.connections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Registration {
    /// The registered connection.
    pub fn connection(&self) -> &Arc<Connection> {
        &self.connection
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.connection.id);
    }
}

impl Connection {
    /// The connection id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Notes the session's state and its latest command's name (if it sent one since).
    pub fn note(&self, session: &Session, cmd: Option<&Bytes>) {
        let mut noted = self.noted.lock().unwrap_or_else(|p| p.into_inner());
        noted.last = Instant::now();
        if let Some(cmd) = cmd {
            let cmd = &cmd[..cmd.len().min(CMD_BYTES_SHOWN)];
            if !noted.cmd.as_bytes().eq_ignore_ascii_case(cmd) {
                noted.cmd.clear();
                noted
                    .cmd
                    .push_str(&String::from_utf8_lossy(cmd).to_ascii_lowercase());
            }
        }
        if noted.name.as_ref() != session.name() {
            noted.name = session.name().cloned();
        }
        noted.resp = match session.protocol() {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        let user = session.user().unwrap_or(DEFAULT_USER);
        if noted.user != user {
            noted.user.clear();
            noted.user.push_str(user);
        }
        noted.multi = match session.transaction() {
            Transaction::None => None,
            Transaction::Queued(queue) => Some(queue.len()),
        };
    }

    /// The connection as CLIENT LIST shows it.
    pub fn view(&self) -> ClientView {
        let noted = self.noted.lock().unwrap_or_else(|p| p.into_inner());
        let text = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
        ClientView {
            id: self.id,
            addr: self.addr.to_string(),
            laddr: self.laddr.to_string(),
            name: text(&noted.name).unwrap_or_default(),
            age_s: self.connected.elapsed().as_secs(),
            idle_s: noted.last.elapsed().as_secs(),
            cmd: if noted.cmd.is_empty() {
                "NULL".to_owned()
            } else {
                noted.cmd.clone()
            },
            resp: noted.resp,
            multi: noted.multi,
            user: noted.user.clone(),
        }
    }

    /// Closes the connection (CLIENT KILL): at once, or, when it is the connection asking
    /// (`by_itself`), once the replies it has read so far are written, as Redis does.
    pub fn kill(&self, by_itself: bool) {
        if by_itself {
            self.closing.store(true, Ordering::Relaxed);
        } else {
            self.killed.store(true, Ordering::Relaxed);
            self.kill.notify_waiters();
        }
    }

    /// Whether the connection must close once its replies are written.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// Resolves once another connection killed this one.
    pub async fn killed(&self) {
        let notified = self.kill.notified();
        if self.killed.load(Ordering::Relaxed) {
            return;
        }
        notified.await;
    }
}
