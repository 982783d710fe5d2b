//! The admin and inspection commands the node answers from its own state: SCAN, KEYS,
//! RANDOMKEY, FLUSHALL/FLUSHDB, TIME, CLIENT LIST/KILL and CONFIG RESETSTAT. This module
//! parses them into an [`Admin`] query and holds what about them needs no I/O: the client
//! filters of CLIENT LIST and KILL, the CLIENT LIST line, and the Redis configuration
//! parameters logless accepts and ignores.
//!
//! None of them is a linearizable operation: SCAN, KEYS and RANDOMKEY read this replica's copy
//! of the keyspace (like DBSIZE), and FLUSHALL deletes the keys of that copy one by one, each
//! deletion a register command of its own.
use bytes::Bytes;
use logless_commands::glob::Glob;

use super::types::scan_options;
use super::{error, is, parse_int, shown, sub_arity, Local, Parsed, SYNTAX_ERROR};

/// An admin or inspection command, for the node to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admin {
    /// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`.
    Scan(KeyScan),
    /// `KEYS pattern`: every live key of this replica's copy that matches.
    Keys(Bytes),
    /// RANDOMKEY.
    RandomKey,
    /// FLUSHALL and FLUSHDB (`ASYNC` or `SYNC` alike): delete every key of this replica's
    /// copy, one register command each.
    Flush,
    /// TIME.
    Time,
    /// CLIENT INFO: the line CLIENT LIST shows for the connection asking.
    ClientInfo,
    /// `CLIENT LIST [TYPE type] [ID id ...]`.
    ClientList(ClientFilter),
    /// `CLIENT KILL addr:port` (`old_form`: answers OK or an error) or `CLIENT KILL filter
    /// value ...` (answers the number of connections killed).
    ClientKill {
        /// Which connections.
        filter: ClientFilter,
        /// Whether it was the old form.
        old_form: bool,
    },
    /// CONFIG RESETSTAT.
    ConfigResetStat,
}

/// What SCAN asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyScan {
    /// Where to resume; 0 starts.
    pub cursor: u64,
    /// MATCH, if given.
    pub pattern: Option<Bytes>,
    /// COUNT: about how many keys to visit (at least 1; default 10).
    pub count: usize,
    /// TYPE, if given: a type name as TYPE answers it (`string`, `hash`, ..., `lock`).
    pub type_name: Option<&'static str>,
    /// VOTED (a logless extension, for a ring's data mover): every key this replica holds a
    /// vote of, dead ones (deleted or expired) included, instead of its live keys.
    pub voted: bool,
}

/// The type names a SCAN's TYPE may give: every type TYPE can answer, and Redis's stream
/// (which no logless key has).
const TYPE_NAMES: [&str; 7] = ["string", "list", "set", "zset", "hash", "stream", "lock"];

/// Which client connections a CLIENT LIST or CLIENT KILL is about: those matching every
/// filter given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientFilter {
    /// `ID`: one of these connection ids.
    pub ids: Vec<u64>,
    /// `ADDR ip:port`: the client's address.
    pub addr: Option<Bytes>,
    /// `LADDR ip:port`: the address the client connected to.
    pub laddr: Option<Bytes>,
    /// `USER name`: connections logged in as this user (`default` before any login).
    pub user: Option<Bytes>,
    /// `TYPE normal|master|replica|slave|pubsub`: logless's connections are all `normal`.
    pub only_normal: Option<bool>,
    /// `MAXAGE seconds`: connections older than this.
    pub older_than_s: Option<u64>,
    /// `SKIPME yes|no` (CLIENT KILL; yes unless told): leave out the connection asking.
    pub skip_me: bool,
}

/// A client connection as CLIENT LIST shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientView {
    /// The connection id (CLIENT ID).
    pub id: u64,
    /// The client's address, `ip:port`.
    pub addr: String,
    /// The address it connected to, `ip:port`.
    pub laddr: String,
    /// CLIENT SETNAME's name (empty if none).
    pub name: String,
    /// Seconds since it connected.
    pub age_s: u64,
    /// Seconds since its last command.
    pub idle_s: u64,
    /// Its last command's name, lowercase (`NULL` before the first).
    pub cmd: String,
    /// The protocol it speaks, 2 or 3.
    pub resp: u8,
    /// Whether a MULTI is open, and how many commands it holds.
    pub multi: Option<usize>,
    /// The user it is logged in as (`default` before any login, as in Redis).
    pub user: String,
}

impl ClientFilter {
    /// Whether the connection `client` is one of those meant, when connection `caller` asks.
    pub fn matches(&self, client: &ClientView, caller: u64) -> bool {
        (self.ids.is_empty() || self.ids.contains(&client.id))
            && self
                .addr
                .as_ref()
                .is_none_or(|a| a[..] == *client.addr.as_bytes())
            && self
                .laddr
                .as_ref()
                .is_none_or(|a| a[..] == *client.laddr.as_bytes())
            && self
                .user
                .as_ref()
                .is_none_or(|u| u[..] == *client.user.as_bytes())
            && self.only_normal.unwrap_or(true)
            && self.older_than_s.is_none_or(|max| client.age_s > max)
            && !(self.skip_me && client.id == caller)
    }
}

impl ClientView {
    /// Its line of CLIENT LIST (and CLIENT INFO), in Redis's field order, newline included.
    /// The fields about Redis's buffers and memory, which logless does not track per client,
    /// are 0.
    pub fn line(&self) -> String {
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db=0 sub=0 psub=0 \
             ssub=0 multi={} watch=0 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 \
             obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={} \
             lib-name= lib-ver=\n",
            self.id,
            self.addr,
            self.laddr,
            self.name,
            self.age_s,
            self.idle_s,
            if self.multi.is_some() { "x" } else { "N" },
            self.multi.map_or(-1, |n| n as i64),
            self.cmd,
            self.user,
            self.resp,
        )
    }
}

/// Whether `name` matches the glob `pattern`, ignoring case like Redis's CONFIG GET.
pub fn config_name_matches(pattern: &[u8], name: &str) -> bool {
    Glob::new(&pattern.to_ascii_lowercase()).matches(name.to_ascii_lowercase().as_bytes())
}

/// The Redis configuration parameters that mean nothing to logless, with the value CONFIG
/// GET shows for each (Redis's default, or what logless does instead): CONFIG SET accepts and
/// ignores them, so that tools and test suites that tune them go on. Encoding thresholds (a
/// register's value has one encoding), persistence (every acceptor state is made durable
/// before its vote leaves, see the node's `durability`), eviction, and the tuning of Redis's
/// event loop, slow log and lazy freeing.
pub const IGNORED_CONFIG: &[(&str, &str)] = &[
    ("active-expire-effort", "1"),
    ("activedefrag", "no"),
    ("activerehashing", "yes"),
    ("appendfsync", "everysec"),
    ("appendonly", "no"),
    ("busy-reply-threshold", "5000"),
    ("dynamic-hz", "yes"),
    ("hash-max-listpack-entries", "128"),
    ("hash-max-listpack-value", "64"),
    ("hash-max-ziplist-entries", "128"),
    ("hash-max-ziplist-value", "64"),
    ("hll-sparse-max-bytes", "3000"),
    ("hz", "10"),
    ("latency-monitor-threshold", "0"),
    ("latency-tracking", "yes"),
    ("lazyfree-lazy-eviction", "no"),
    ("lazyfree-lazy-expire", "no"),
    ("lazyfree-lazy-server-del", "no"),
    ("lazyfree-lazy-user-del", "no"),
    ("lazyfree-lazy-user-flush", "no"),
    ("list-compress-depth", "0"),
    ("list-max-listpack-size", "-2"),
    ("list-max-ziplist-size", "-2"),
    ("lua-time-limit", "5000"),
    ("maxmemory-policy", "noeviction"),
    ("maxmemory-samples", "5"),
    ("notify-keyspace-events", ""),
    ("rdbchecksum", "yes"),
    ("rdbcompression", "yes"),
    ("save", ""),
    ("set-max-intset-entries", "512"),
    ("set-max-listpack-entries", "128"),
    ("set-max-listpack-value", "64"),
    ("slowlog-log-slower-than", "10000"),
    ("slowlog-max-len", "128"),
    ("stop-writes-on-bgsave-error", "no"),
    ("stream-node-max-bytes", "4096"),
    ("stream-node-max-entries", "100"),
    ("tcp-keepalive", "300"),
    ("zset-max-listpack-entries", "128"),
    ("zset-max-listpack-value", "64"),
    ("zset-max-ziplist-entries", "128"),
    ("zset-max-ziplist-value", "64"),
];

/// Whether `name` (any case) is one of [`IGNORED_CONFIG`].
pub fn is_ignored_config(name: &[u8]) -> bool {
    IGNORED_CONFIG.iter().any(|(n, _)| is(name, n))
}

/// Redis's error for CONFIG SET of a parameter it does not know.
pub fn unknown_config(name: &[u8]) -> String {
    format!(
        "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
        shown(name, 128)
    )
}

/// Redis's error for CONFIG SET of a value a parameter does not take.
pub fn bad_config_value(name: &[u8], why: &str) -> String {
    format!(
        "ERR CONFIG SET failed (possibly related to argument '{}') - {why}",
        shown(name, 128)
    )
}

fn admin(query: Admin) -> Parsed {
    Parsed::Local(Local::Admin(query))
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type] [VOTED]`.
pub(super) fn parse_scan(args: &[Bytes]) -> Parsed {
    let mut type_name = None;
    let mut voted = false;
    let scan = scan_options(args, 1, |option, rest| {
        if is(option, "voted") {
            voted = true;
            return Ok(Some(0));
        }
        if !is(option, "type") || rest.is_empty() {
            return Ok(None);
        }
        let wanted = TYPE_NAMES
            .iter()
            .find(|t| is(&rest[0], t))
            .ok_or_else(|| format!("ERR unknown type name '{}'", shown(&rest[0], 128)))?;
        type_name = Some(*wanted);
        Ok(Some(1))
    });
    match scan {
        Ok(scan) => admin(Admin::Scan(KeyScan {
            cursor: scan.cursor,
            pattern: scan.pattern,
            count: usize::try_from(scan.count).unwrap_or(usize::MAX),
            type_name,
            voted,
        })),
        Err(text) => Parsed::Error(text),
    }
}

/// `FLUSHALL [ASYNC|SYNC]` and `FLUSHDB [ASYNC|SYNC]`: the mode changes nothing (every
/// deletion is a register command, answered once done).
pub(super) fn parse_flush(args: &[Bytes]) -> Parsed {
    match args.get(1..) {
        Some([]) => admin(Admin::Flush),
        Some([mode]) if is(mode, "async") || is(mode, "sync") => admin(Admin::Flush),
        _ => error(SYNTAX_ERROR),
    }
}

/// `KEYS pattern`.
pub(super) fn parse_keys(args: &[Bytes]) -> Parsed {
    admin(Admin::Keys(args[1].clone()))
}

/// RANDOMKEY.
pub(super) fn parse_randomkey(_: &[Bytes]) -> Parsed {
    admin(Admin::RandomKey)
}

/// TIME.
pub(super) fn parse_time(_: &[Bytes]) -> Parsed {
    admin(Admin::Time)
}

/// CONFIG RESETSTAT.
pub(super) fn parse_config_resetstat(args: &[Bytes]) -> Parsed {
    sub_arity("config", "resetstat", 2, args.len()).unwrap_or_else(|| admin(Admin::ConfigResetStat))
}

/// `CLIENT LIST [TYPE normal|master|replica|pubsub] [ID client-id [client-id ...]]`.
pub(super) fn parse_client_list(args: &[Bytes]) -> Parsed {
    let mut filter = ClientFilter::default();
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "type") && i + 1 < args.len() {
            match client_type(&args[i + 1]) {
                Ok(normal) => filter.only_normal = Some(normal),
                Err(e) => return Parsed::Error(e),
            }
            i += 2;
        } else if is(&args[i], "id") && i + 1 < args.len() {
            for id in &args[i + 1..] {
                match parse_int(id).and_then(|id| u64::try_from(id).ok()) {
                    Some(id) if id > 0 => filter.ids.push(id),
                    _ => return error("ERR Invalid client ID"),
                }
            }
            i = args.len();
        } else {
            return error(SYNTAX_ERROR);
        }
    }
    admin(Admin::ClientList(filter))
}

/// A CLIENT TYPE: whether it is `normal` (the only type of logless's connections).
fn client_type(name: &[u8]) -> Result<bool, String> {
    if is(name, "normal") {
        Ok(true)
    } else if ["master", "replica", "slave", "pubsub"]
        .iter()
        .any(|t| is(name, t))
    {
        Ok(false)
    } else {
        Err(format!("ERR Unknown client type '{}'", shown(name, 128)))
    }
}

/// `CLIENT KILL ip:port` or `CLIENT KILL [ID id] [TYPE type] [USER name] [ADDR ip:port]
/// [LADDR ip:port] [SKIPME yes|no] [MAXAGE seconds] ...`.
pub(super) fn parse_client_kill(args: &[Bytes]) -> Parsed {
    if args.len() == 3 {
        let filter = ClientFilter {
            addr: Some(args[2].clone()),
            ..ClientFilter::default()
        };
        return admin(Admin::ClientKill {
            filter,
            old_form: true,
        });
    }
    if args.len() < 4 || args.len() % 2 == 1 {
        return error(SYNTAX_ERROR);
    }
    let mut filter = ClientFilter {
        skip_me: true,
        ..ClientFilter::default()
    };
    for pair in args[2..].chunks_exact(2) {
        let (option, value) = (&pair[0], &pair[1]);
        if is(option, "id") {
            match parse_int(value).and_then(|id| u64::try_from(id).ok()) {
                Some(id) if id > 0 => filter.ids = vec![id],
                _ => return error("ERR client-id should be greater than 0"),
            }
        } else if is(option, "type") {
            match client_type(value) {
                Ok(normal) => filter.only_normal = Some(normal),
                Err(e) => return Parsed::Error(e),
            }
        } else if is(option, "user") {
            filter.user = Some(value.clone());
        } else if is(option, "addr") {
            filter.addr = Some(value.clone());
        } else if is(option, "laddr") {
            filter.laddr = Some(value.clone());
        } else if is(option, "skipme") {
            filter.skip_me = if is(value, "yes") {
                true
            } else if is(value, "no") {
                false
            } else {
                return error(SYNTAX_ERROR);
            };
        } else if is(option, "maxage") {
            match parse_int(value).and_then(|s| u64::try_from(s).ok()) {
                Some(seconds) => filter.older_than_s = Some(seconds),
                None => return error(SYNTAX_ERROR),
            }
        } else {
            return error(SYNTAX_ERROR);
        }
    }
    admin(Admin::ClientKill {
        filter,
        old_form: false,
    })
}
