//! The command table: what a Redis request asks the node to do.
//!
//! [`parse_command`] turns a request's arguments into a [`Parsed`]: one register command, several
//! independent register commands whose replies combine, a command the node answers itself, or
//! an error reply in Redis's words. [`reply_to_value`] and [`combine_replies`] turn register
//! replies back into RESP values, and [`command_names`] describes every command for `COMMAND`.
use bytes::Bytes;
use logless_commands::command::{
    Command, CommandError, Condition, ExpireArgs, ExpireFlags, ExpireKind, Expiry, HashCmd,
    ListCmd, ListEnd, Reply, SetArgs, ZSetCmd,
};

use crate::resp::{Protocol, Value};

pub mod admin;
pub mod cross_key;
pub mod redis_names;
mod types;

use types::RangeBy;

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// One linearizable register command.
    Single {
        /// The register.
        key: Bytes,
        /// The command on it.
        command: Command,
        /// How its reply is shown to the client.
        shape: ReplyShape,
    },
    /// Several independent single-key commands whose replies combine (MGET, multi-key DEL and
    /// EXISTS). Each is linearizable on its own; together they are not one atomic snapshot.
    Multi {
        /// The registers and their commands, in request order (keys may repeat).
        parts: Vec<(Bytes, Command)>,
        /// How the replies combine, see [`combine_replies`].
        combine: Combine,
    },
    /// A connection or server command the node answers itself.
    Local(Local),
    /// An error reply, already formatted with its prefix (`"ERR ..."`).
    Error(String),
}

/// How the replies of a [`Parsed::Multi`] combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// The sum of the integer replies (DEL k1 k2, EXISTS k1 k2).
    Sum,
    /// An array of the replies, strings as they are and anything else as nil (MGET).
    Array,
}

/// How a register reply is shown to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyShape {
    /// As it is.
    Plain,
    /// An array reply is a set (SMEMBERS, SPOP with a count: a RESP3 set).
    Set,
    /// SETNX: OK becomes 1 and nil becomes 0.
    SetNx,
    /// As it is, but an invalid expire time is reported in the words of the named command
    /// (SETEX and PSETEX run as SET).
    ExpireErrorsOf(&'static str),
    /// HMSET: HSET's reply, shown as OK.
    Ok,
    /// EXEC: the array of the queued commands' replies, each shown with its own shape.
    Exec(ExecShapes),
}

/// The most commands one transaction (MULTI ... EXEC) may queue. The whole transaction is one
/// register command, which travels in every vote; the bound also lets [`ExecShapes`] be a
/// small value that is copied like the other shapes.
pub const TRANSACTION_COMMANDS_MAX: usize = 128;

/// The shapes of a transaction's commands, in order: four bits each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecShapes {
    len: u8,
    nibbles: [u64; TRANSACTION_COMMANDS_MAX / 16],
}

/// The commands whose expire-time errors are shown in their own words (see
/// [`ReplyShape::ExpireErrorsOf`]): the only names that shape carries.
const EXPIRE_ERROR_NAMES: [&str; 2] = ["setex", "psetex"];

impl ExecShapes {
    /// The number of shapes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the shape of the next command; `false` (and nothing changes) if
    /// [`TRANSACTION_COMMANDS_MAX`] are there already.
    ///
    /// # Panics
    /// For a shape no queued command has: `Exec`, or `ExpireErrorsOf` another command.
    pub fn push(&mut self, shape: ReplyShape) -> bool {
        let i = self.len();
        if i == TRANSACTION_COMMANDS_MAX {
            return false;
        }
        let code: u64 = match shape {
            ReplyShape::Plain => 0,
            ReplyShape::Set => 1,
            ReplyShape::SetNx => 2,
            ReplyShape::Ok => 3,
            ReplyShape::ExpireErrorsOf(name) => {
                let at = EXPIRE_ERROR_NAMES.iter().position(|n| *n == name);
                4 + at.expect("only SETEX and PSETEX report expire errors as their own") as u64
            }
            ReplyShape::Exec(_) => panic!("a transaction does not queue a transaction"),
        };
        self.nibbles[i / 16] |= code << (4 * (i % 16));
        self.len += 1;
        debug_assert_eq!(self.get(i), shape, "a shape reads back as written");
        true
    }

    /// The shape of command `i` (`Plain` past the end).
    pub fn get(&self, i: usize) -> ReplyShape {
        if i >= self.len() {
            return ReplyShape::Plain;
        }
        match (self.nibbles[i / 16] >> (4 * (i % 16))) & 0xf {
            0 => ReplyShape::Plain,
            1 => ReplyShape::Set,
            2 => ReplyShape::SetNx,
            3 => ReplyShape::Ok,
            code => ReplyShape::ExpireErrorsOf(EXPIRE_ERROR_NAMES[(code - 4) as usize]),
        }
    }
}

/// A command the node answers without touching a register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    /// `PING [message]`: PONG, or the message as a bulk string.
    Ping(Option<Bytes>),
    /// ECHO message.
    Echo(Bytes),
    /// `HELLO [protover [AUTH username password] [SETNAME name]]`: switch protocol and answer
    /// the server's description.
    Hello {
        /// The requested protocol, if given (already checked to be 2 or 3).
        protocol: Option<Protocol>,
        /// The AUTH username and password, if given; the node decides whether they pass.
        auth: Option<(Bytes, Bytes)>,
        /// The client name to set, if given (already validated).
        setname: Option<Bytes>,
    },
    /// QUIT: answer OK and close the connection.
    Quit,
    /// RESET: reset the connection's state (protocol, name) and answer `RESET`.
    Reset,
    /// SELECT index: only database 0 exists.
    Select(i64),
    /// CLIENT SETNAME name (already validated; empty clears the name).
    ClientSetName(Bytes),
    /// CLIENT GETNAME.
    ClientGetName,
    /// CLIENT SETINFO LIB-NAME|LIB-VER value: accepted and ignored (answer OK).
    ClientSetInfo,
    /// CLIENT ID.
    ClientId,
    /// COMMAND: the info of every command.
    Command,
    /// COMMAND COUNT.
    CommandCount,
    /// `COMMAND DOCS [name ...]`.
    CommandDocs(Vec<Bytes>),
    /// `COMMAND INFO [name ...]`.
    CommandInfo(Vec<Bytes>),
    /// `CONFIG GET pattern [pattern ...]`.
    ConfigGet(Vec<Bytes>),
    /// `CONFIG SET parameter value [parameter value ...]`: the pairs, for the node to refuse or
    /// accept.
    ConfigSet(Vec<(Bytes, Bytes)>),
    /// `INFO [section ...]`.
    Info(Vec<Bytes>),
    /// DBSIZE.
    DbSize,
    /// An admin or inspection command (SCAN, KEYS, FLUSHALL, TIME, CLIENT LIST, ...).
    Admin(admin::Admin),
    /// MULTI: open a transaction (the session keeps it).
    Multi,
    /// EXEC: run the open transaction.
    Exec,
    /// DISCARD: drop the open transaction.
    Discard,
    /// UNWATCH: forgets the watched keys (under the per-key engine, which refuses WATCH, none).
    Unwatch,
    /// `AUTH [username] password`: the session checks it against its users.
    Auth {
        /// The user name, if given (else `default`).
        user: Option<Bytes>,
        /// The password.
        password: Bytes,
    },
    /// `ACL WHOAMI|LIST|USERS|CAT`, see [`crate::acl`].
    Acl(crate::acl::AclCommand),
    /// A `CLUSTER` subcommand, see [`crate::cluster`].
    Cluster(crate::cluster::ClusterCommand),
    /// ASKING, READONLY or READWRITE: accepted in cluster mode, where every replica of a slot
    /// serves its reads and writes and no slot is ever half-moved, so none changes anything.
    ClusterConnection,
}

/// One command as `COMMAND INFO` describes it (Redis's conventions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandSpec {
    /// The lowercase name.
    pub name: &'static str,
    /// The number of arguments including the name; negative means at least that many.
    pub arity: i64,
    /// Redis's command flags (`readonly`, `write`, `fast`, ...).
    pub flags: &'static [&'static str],
    /// The position of the first key argument (0 if none).
    pub first_key: i64,
    /// The position of the last key argument (-1: the last argument).
    pub last_key: i64,
    /// The step between key arguments.
    pub step: i64,
}

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
    }
}

const READ_FAST: &[&str] = &["readonly", "fast"];
const WRITE: &[&str] = &["write"];
const WRITE_FAST: &[&str] = &["write", "fast"];
const WRITE_DENYOOM: &[&str] = &["write", "denyoom"];
const WRITE_DENYOOM_FAST: &[&str] = &["write", "denyoom", "fast"];
const CONNECTION: &[&str] = &[
    "noscript",
    "loading",
    "stale",
    "fast",
    "no_auth",
    "allow_busy",
];
const READ: &[&str] = &["readonly"];
const TRANSACTION: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];
const ONE_KEY: (i64, i64, i64) = (1, 1, 1);
const TWO_KEYS: (i64, i64, i64) = (1, 2, 1);
const ALL_KEYS: (i64, i64, i64) = (1, -1, 1);
const NO_KEYS: (i64, i64, i64) = (0, 0, 0);

/// One command: how `COMMAND INFO` describes it and how its arguments are parsed. The parser
/// is called with the whole request (name first) once the arity has been checked.
struct Entry {
    spec: CommandSpec,
    parse: fn(&[Bytes]) -> Parsed,
}

const fn entry(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
    parse: fn(&[Bytes]) -> Parsed,
) -> Entry {
    Entry {
        spec: spec(name, arity, flags, keys),
        parse,
    }
}

/// One register command on the key `args[1]`, its reply shown as it is.
fn single(args: &[Bytes], command: Command) -> Parsed {
    Parsed::Single {
        key: args[1].clone(),
        command,
        shape: ReplyShape::Plain,
    }
}

fn hash(args: &[Bytes], command: HashCmd) -> Parsed {
    single(args, Command::Hash(command))
}

fn list(args: &[Bytes], command: ListCmd) -> Parsed {
    single(args, Command::List(command))
}

fn zset(args: &[Bytes], command: ZSetCmd) -> Parsed {
    single(args, Command::ZSet(command))
}

/// Every command the node answers, in the order `COMMAND` lists them.
static TABLE: &[Entry] = &[
    entry("get", 2, READ_FAST, ONE_KEY, |a| single(a, Command::Get)),
    entry("set", -3, WRITE_DENYOOM, ONE_KEY, parse_set),
    entry("setnx", 3, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        Parsed::Single {
            key: a[1].clone(),
            command: Command::Set(SetArgs {
                value: a[2].clone(),
                condition: Condition::Nx,
                get: false,
                expiry: Expiry::Clear,
            }),
            shape: ReplyShape::SetNx,
        }
    }),
    entry("setex", 4, WRITE_DENYOOM, ONE_KEY, |a| {
        parse_setex("setex", a)
    }),
    entry("psetex", 4, WRITE_DENYOOM, ONE_KEY, |a| {
        parse_setex("psetex", a)
    }),
    entry("getset", 3, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        single(
            a,
            Command::Set(SetArgs {
                value: a[2].clone(),
                condition: Condition::Always,
                get: true,
                expiry: Expiry::Clear,
            }),
        )
    }),
    entry("getdel", 2, WRITE_FAST, ONE_KEY, |a| {
        single(a, Command::GetDel)
    }),
    entry("append", 3, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        single(a, Command::Append(a[2].clone()))
    }),
    entry("strlen", 2, READ_FAST, ONE_KEY, |a| {
        single(a, Command::StrLen)
    }),
    entry("del", -2, WRITE, ALL_KEYS, |a| {
        per_key(a, Command::Del, Combine::Sum)
    }),
    entry("unlink", -2, WRITE_FAST, ALL_KEYS, |a| {
        per_key(a, Command::Del, Combine::Sum)
    }),
    entry("exists", -2, READ_FAST, ALL_KEYS, |a| {
        per_key(a, Command::Exists, Combine::Sum)
    }),
    entry("mget", -2, READ_FAST, ALL_KEYS, |a| Parsed::Multi {
        parts: a[1..].iter().map(|k| (k.clone(), Command::Get)).collect(),
        combine: Combine::Array,
    }),
    entry("incr", 2, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        single(a, Command::IncrBy(1))
    }),
    entry(
        "incrby",
        3,
        WRITE_DENYOOM_FAST,
        ONE_KEY,
        |a| match parse_int(&a[2]) {
            Some(delta) => single(a, Command::IncrBy(delta)),
            None => error(NOT_AN_INTEGER),
        },
    ),
    entry("decr", 2, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        single(a, Command::IncrBy(-1))
    }),
    entry(
        "decrby",
        3,
        WRITE_DENYOOM_FAST,
        ONE_KEY,
        |a| match parse_int(&a[2]) {
            Some(i64::MIN) => error("ERR decrement would overflow"),
            Some(delta) => single(a, Command::IncrBy(-delta)),
            None => error(NOT_AN_INTEGER),
        },
    ),
    entry("sadd", -3, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        single(a, Command::SAdd(a[2..].to_vec()))
    }),
    entry("srem", -3, WRITE_FAST, ONE_KEY, |a| {
        single(a, Command::SRem(a[2..].to_vec()))
    }),
    entry("smembers", 2, READ, ONE_KEY, |a| Parsed::Single {
        key: a[1].clone(),
        command: Command::SMembers,
        shape: ReplyShape::Set,
    }),
    entry("sismember", 3, READ_FAST, ONE_KEY, |a| {
        single(a, Command::SIsMember(a[2].clone()))
    }),
    entry("scard", 2, READ_FAST, ONE_KEY, |a| {
        single(a, Command::SCard)
    }),
    entry("delex", -2, WRITE_FAST, ONE_KEY, parse_delex),
    entry("digest", 2, READ_FAST, ONE_KEY, |a| {
        single(a, Command::Digest)
    }),
    entry(
        "lock.acquire",
        4,
        WRITE_DENYOOM_FAST,
        ONE_KEY,
        parse_lock_acquire,
    ),
    entry("lock.release", 3, WRITE_FAST, ONE_KEY, |a| {
        single(
            a,
            Command::LockRelease {
                owner: a[2].clone(),
            },
        )
    }),
    entry("ttl", 2, READ_FAST, ONE_KEY, |a| single(a, Command::Ttl)),
    entry("pttl", 2, READ_FAST, ONE_KEY, |a| single(a, Command::PTtl)),
    entry("type", 2, READ_FAST, ONE_KEY, |a| single(a, Command::Type)),
    entry("expire", -3, WRITE_FAST, ONE_KEY, |a| {
        parse_expire(ExpireKind::Expire, a)
    }),
    entry("pexpire", -3, WRITE_FAST, ONE_KEY, |a| {
        parse_expire(ExpireKind::PExpire, a)
    }),
    entry("expireat", -3, WRITE_FAST, ONE_KEY, |a| {
        parse_expire(ExpireKind::ExpireAt, a)
    }),
    entry("pexpireat", -3, WRITE_FAST, ONE_KEY, |a| {
        parse_expire(ExpireKind::PExpireAt, a)
    }),
    entry("persist", 2, WRITE_FAST, ONE_KEY, |a| {
        single(a, Command::Persist)
    }),
    entry("hset", -4, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        types::parse_hset("hset", a)
    }),
    entry("hmset", -4, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        types::parse_hset("hmset", a)
    }),
    entry("hsetnx", 4, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        hash(
            a,
            HashCmd::HSetNx {
                field: a[2].clone(),
                value: a[3].clone(),
            },
        )
    }),
    entry("hget", 3, READ_FAST, ONE_KEY, |a| {
        hash(a, HashCmd::HGet(a[2].clone()))
    }),
    entry("hmget", -3, READ_FAST, ONE_KEY, |a| {
        hash(a, HashCmd::HMGet(a[2..].to_vec()))
    }),
    entry("hdel", -3, WRITE_FAST, ONE_KEY, |a| {
        hash(a, HashCmd::HDel(a[2..].to_vec()))
    }),
    entry("hexists", 3, READ_FAST, ONE_KEY, |a| {
        hash(a, HashCmd::HExists(a[2].clone()))
    }),
    entry("hlen", 2, READ_FAST, ONE_KEY, |a| hash(a, HashCmd::HLen)),
    entry("hstrlen", 3, READ_FAST, ONE_KEY, |a| {
        hash(a, HashCmd::HStrLen(a[2].clone()))
    }),
    entry("hkeys", 2, READ, ONE_KEY, |a| hash(a, HashCmd::HKeys)),
    entry("hvals", 2, READ, ONE_KEY, |a| hash(a, HashCmd::HVals)),
    entry("hgetall", 2, READ, ONE_KEY, |a| hash(a, HashCmd::HGetAll)),
    entry(
        "hincrby",
        4,
        WRITE_DENYOOM_FAST,
        ONE_KEY,
        types::parse_hincrby,
    ),
    entry(
        "hincrbyfloat",
        4,
        WRITE_DENYOOM_FAST,
        ONE_KEY,
        types::parse_hincrbyfloat,
    ),
    entry("hrandfield", -2, READ, ONE_KEY, types::parse_hrandfield),
    entry("hscan", -3, READ, ONE_KEY, types::parse_hscan),
    entry("lpush", -3, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        types::parse_push(a, ListEnd::Left, false)
    }),
    entry("rpush", -3, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        types::parse_push(a, ListEnd::Right, false)
    }),
    entry("lpushx", -3, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        types::parse_push(a, ListEnd::Left, true)
    }),
    entry("rpushx", -3, WRITE_DENYOOM_FAST, ONE_KEY, |a| {
        types::parse_push(a, ListEnd::Right, true)
    }),
    entry("lpop", -2, WRITE_FAST, ONE_KEY, |a| {
        types::parse_pop("lpop", a, ListEnd::Left)
    }),
    entry("rpop", -2, WRITE_FAST, ONE_KEY, |a| {
        types::parse_pop("rpop", a, ListEnd::Right)
    }),
    entry("llen", 2, READ_FAST, ONE_KEY, |a| list(a, ListCmd::Len)),
    entry("lrange", 4, READ, ONE_KEY, types::parse_lrange),
    entry("lindex", 3, READ, ONE_KEY, types::parse_lindex),
    entry("lset", 4, WRITE_DENYOOM, ONE_KEY, types::parse_lset),
    entry("linsert", 5, WRITE_DENYOOM, ONE_KEY, types::parse_linsert),
    entry("lrem", 4, WRITE, ONE_KEY, types::parse_lrem),
    entry("ltrim", 4, WRITE, ONE_KEY, types::parse_ltrim),
    entry("lpos", -3, READ, ONE_KEY, types::parse_lpos),
    entry("lmove", 5, WRITE_DENYOOM, TWO_KEYS, types::parse_lmove),
    entry("rpoplpush", 3, WRITE_DENYOOM, TWO_KEYS, |a| {
        types::parse_move("rpoplpush", a, ListEnd::Right, ListEnd::Left)
    }),
    entry("zadd", -4, WRITE_DENYOOM_FAST, ONE_KEY, types::parse_zadd),
    entry("zrem", -3, WRITE_FAST, ONE_KEY, |a| {
        zset(a, ZSetCmd::Rem(a[2..].to_vec()))
    }),
    entry("zscore", 3, READ_FAST, ONE_KEY, |a| {
        zset(a, ZSetCmd::Score(a[2].clone()))
    }),
    entry("zmscore", -3, READ_FAST, ONE_KEY, |a| {
        zset(a, ZSetCmd::MScore(a[2..].to_vec()))
    }),
    entry(
        "zincrby",
        4,
        WRITE_DENYOOM_FAST,
        ONE_KEY,
        types::parse_zincrby,
    ),
    entry("zcard", 2, READ_FAST, ONE_KEY, |a| zset(a, ZSetCmd::Card)),
    entry("zcount", 4, READ_FAST, ONE_KEY, types::parse_zcount),
    entry("zrank", -3, READ_FAST, ONE_KEY, |a| {
        types::parse_zrank("zrank", a, false)
    }),
    entry("zrevrank", -3, READ_FAST, ONE_KEY, |a| {
        types::parse_zrank("zrevrank", a, true)
    }),
    entry("zrange", -4, READ, ONE_KEY, |a| {
        types::parse_zrange(a, RangeBy::Auto, None)
    }),
    entry("zrevrange", -4, READ, ONE_KEY, |a| {
        types::parse_zrange(a, RangeBy::Rank, Some(true))
    }),
    entry("zrangebyscore", -4, READ, ONE_KEY, |a| {
        types::parse_zrange(a, RangeBy::Score, Some(false))
    }),
    entry("zrevrangebyscore", -4, READ, ONE_KEY, |a| {
        types::parse_zrange(a, RangeBy::Score, Some(true))
    }),
    entry("zrangebylex", -4, READ, ONE_KEY, |a| {
        types::parse_zrange(a, RangeBy::Lex, Some(false))
    }),
    entry("zrevrangebylex", -4, READ, ONE_KEY, |a| {
        types::parse_zrange(a, RangeBy::Lex, Some(true))
    }),
    entry("zpopmin", -2, WRITE_FAST, ONE_KEY, |a| {
        types::parse_zpop("zpopmin", a, false)
    }),
    entry("zpopmax", -2, WRITE_FAST, ONE_KEY, |a| {
        types::parse_zpop("zpopmax", a, true)
    }),
    entry("zscan", -3, READ, ONE_KEY, types::parse_zscan),
    entry(
        "incrbyfloat",
        3,
        WRITE_DENYOOM_FAST,
        ONE_KEY,
        types::parse_incrbyfloat,
    ),
    entry("getex", -2, WRITE_FAST, ONE_KEY, types::parse_getex),
    entry("getrange", 4, READ, ONE_KEY, types::parse_getrange),
    entry("setrange", 4, WRITE_DENYOOM, ONE_KEY, types::parse_setrange),
    entry("spop", -2, WRITE_FAST, ONE_KEY, types::parse_spop),
    entry("srandmember", -2, READ, ONE_KEY, types::parse_srandmember),
    entry("smismember", -3, READ_FAST, ONE_KEY, |a| {
        single(a, Command::SMIsMember(a[2..].to_vec()))
    }),
    entry("sscan", -3, READ, ONE_KEY, types::parse_sscan),
    entry("multi", 1, TRANSACTION, NO_KEYS, |_| {
        Parsed::Local(Local::Multi)
    }),
    entry(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        NO_KEYS,
        |_| Parsed::Local(Local::Exec),
    ),
    entry("discard", 1, TRANSACTION, NO_KEYS, |_| {
        Parsed::Local(Local::Discard)
    }),
    entry("unwatch", 1, TRANSACTION, NO_KEYS, |_| {
        Parsed::Local(Local::Unwatch)
    }),
    entry("ping", -1, &["fast"], NO_KEYS, parse_ping),
    entry("echo", 2, &["fast"], NO_KEYS, |a| {
        Parsed::Local(Local::Echo(a[1].clone()))
    }),
    entry("hello", -1, CONNECTION, NO_KEYS, parse_hello),
    entry("quit", -1, CONNECTION, NO_KEYS, |_| {
        Parsed::Local(Local::Quit)
    }),
    entry("reset", 1, CONNECTION, NO_KEYS, |_| {
        Parsed::Local(Local::Reset)
    }),
    entry(
        "select",
        2,
        &["loading", "stale", "fast"],
        NO_KEYS,
        |a| match parse_int(&a[1]) {
            Some(index) => Parsed::Local(Local::Select(index)),
            None => error(NOT_AN_INTEGER),
        },
    ),
    entry("client", -2, &[], NO_KEYS, parse_client),
    entry(
        "command",
        -1,
        &["loading", "stale"],
        NO_KEYS,
        parse_command_command,
    ),
    entry("config", -2, &[], NO_KEYS, parse_config),
    entry("info", -1, &["loading", "stale"], NO_KEYS, |a| {
        Parsed::Local(Local::Info(a[1..].to_vec()))
    }),
    entry("dbsize", 1, READ_FAST, NO_KEYS, |_| {
        Parsed::Local(Local::DbSize)
    }),
    entry("scan", -2, READ, NO_KEYS, admin::parse_scan),
    entry("keys", 2, READ, NO_KEYS, admin::parse_keys),
    entry("randomkey", 1, READ, NO_KEYS, admin::parse_randomkey),
    entry("flushall", -1, WRITE, NO_KEYS, admin::parse_flush),
    entry("flushdb", -1, WRITE, NO_KEYS, admin::parse_flush),
    entry(
        "time",
        1,
        &["loading", "stale", "fast"],
        NO_KEYS,
        admin::parse_time,
    ),
    entry(
        "auth",
        -2,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "sentinel",
            "allow_busy",
        ],
        NO_KEYS,
        parse_auth,
    ),
    entry("cluster", -2, &[], NO_KEYS, parse_cluster),
    entry("asking", 1, &["fast"], NO_KEYS, |_| {
        Parsed::Local(Local::ClusterConnection)
    }),
    entry(
        "readonly",
        1,
        &["loading", "stale", "fast"],
        NO_KEYS,
        |_| Parsed::Local(Local::ClusterConnection),
    ),
    entry(
        "readwrite",
        1,
        &["loading", "stale", "fast"],
        NO_KEYS,
        |_| Parsed::Local(Local::ClusterConnection),
    ),
    entry(
        "acl",
        -2,
        &["sentinel"],
        NO_KEYS,
        |a| match crate::acl::parse_acl(a) {
            Ok(command) => Parsed::Local(Local::Acl(command)),
            Err(text) => Parsed::Error(text),
        },
    ),
];

/// The longest command name in [`TABLE`], so that a name is lowercased on the stack.
const NAME_BYTES_MAX: usize = 16;

/// The entries of [`TABLE`] ordered by name, for a binary search.
fn by_name() -> &'static [&'static Entry] {
    static SORTED: std::sync::OnceLock<Vec<&'static Entry>> = std::sync::OnceLock::new();
    SORTED.get_or_init(|| {
        let mut sorted: Vec<&'static Entry> = TABLE.iter().collect();
        sorted.sort_by_key(|e| e.spec.name);
        assert!(sorted.iter().all(|e| e.spec.name.len() <= NAME_BYTES_MAX));
        assert!(
            sorted.windows(2).all(|w| w[0].spec.name < w[1].spec.name),
            "command names repeat"
        );
        sorted
    })
}

/// The entry of the command called `name` (case-insensitive), without allocating.
fn find_entry(name: &[u8]) -> Option<&'static Entry> {
    if name.len() > NAME_BYTES_MAX {
        return None;
    }
    let mut lower = [0u8; NAME_BYTES_MAX];
    let lower = &mut lower[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let sorted = by_name();
    sorted
        .binary_search_by(|e| e.spec.name.as_bytes().cmp(lower))
        .ok()
        .map(|i| sorted[i])
}

/// Every command the node answers.
pub fn command_names() -> impl ExactSizeIterator<Item = &'static CommandSpec> {
    TABLE.iter().map(|e| &e.spec)
}

/// The spec of the command called `name` (case-insensitive).
pub fn find_command(name: &[u8]) -> Option<&'static CommandSpec> {
    find_entry(name).map(|e| &e.spec)
}

/// A command's entry in the reply of `COMMAND INFO`: name, arity, flags, first key, last key,
/// step, ACL categories, tips, key specs and subcommands (the last four empty).
pub fn command_info_value(spec: &CommandSpec) -> Value {
    Value::Array(vec![
        Value::Bulk(Bytes::from_static(spec.name.as_bytes())),
        Value::Int(spec.arity),
        Value::Set(
            spec.flags
                .iter()
                .map(|f| Value::Simple((*f).to_owned()))
                .collect(),
        ),
        Value::Int(spec.first_key),
        Value::Int(spec.last_key),
        Value::Int(spec.step),
        Value::Set(Vec::new()),
        Value::Set(Vec::new()),
        Value::Array(Vec::new()),
        Value::Array(Vec::new()),
    ])
}

const SYNTAX_ERROR: &str = "ERR syntax error";
const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
const INVALID_EXPIRE: &str = "ERR invalid expire time in 'set' command";

fn error(text: &str) -> Parsed {
    Parsed::Error(text.to_owned())
}

fn is(arg: &[u8], name: &str) -> bool {
    arg.eq_ignore_ascii_case(name.as_bytes())
}

/// Parses an integer argument with Redis's strict rules.
fn parse_int(bytes: &[u8]) -> Option<i64> {
    logless_commands::command::parse_i64(bytes)
}

fn arity_error(name: &str) -> Parsed {
    Parsed::Error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn arity_ok(arity: i64, argc: usize) -> bool {
    let argc = i64::try_from(argc).unwrap_or(i64::MAX);
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

/// `bytes` as text for an error message: at most `max` bytes, lossy UTF-8.
fn shown(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned()
}

fn unknown_command(args: &[Bytes]) -> Parsed {
    let mut listed = String::new();
    for arg in &args[1..] {
        if listed.len() >= 128 {
            break;
        }
        let budget = 128 - listed.len();
        listed.push('\'');
        listed.push_str(&shown(arg, budget));
        listed.push_str("' ");
    }
    Parsed::Error(format!(
        "ERR unknown command '{}', with args beginning with: {listed}",
        shown(&args[0], 128)
    ))
}

fn unknown_subcommand(sub: &[u8], container: &str) -> Parsed {
    Parsed::Error(format!(
        "ERR unknown subcommand '{}'. Try {container} HELP.",
        shown(sub, 128)
    ))
}

/// The refusal of a command Redis has and logless does not, in lowercase `name`, with the
/// reason where there is one; `None` for a name Redis does not know.
fn refusal(name: &str) -> Option<String> {
    if !redis_names::is_redis_command(name) {
        return None;
    }
    Some(match redis_names::reason(name) {
        Some(reason) => format!("ERR logless does not implement '{name}': {reason}"),
        None => format!("ERR logless does not implement '{name}'"),
    })
}

/// Parses a request's arguments (the command name is case-insensitive): one lookup of the
/// name, then the entry's own parser.
///
/// An empty request yields an error; callers normally skip empty requests before.
pub fn parse_command(args: &[Bytes]) -> Parsed {
    parse_command_with_spec(args).0
}

/// [`parse_command`], with the spec of the command the request names (`None` if it names
/// none), for a caller that needs both: the session checks the spec against the user's
/// permissions, and a second lookup of the name would cost a binary search of the table for
/// every request.
pub fn parse_command_with_spec(args: &[Bytes]) -> (Parsed, Option<&'static CommandSpec>) {
    let Some(name) = args.first() else {
        return (error("ERR empty command"), None);
    };
    let Some(entry) = find_entry(name) else {
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        let parsed = refusal(&lower).map_or_else(|| unknown_command(args), Parsed::Error);
        return (parsed, None);
    };
    if !arity_ok(entry.spec.arity, args.len()) {
        return (arity_error(entry.spec.name), Some(&entry.spec));
    }
    ((entry.parse)(args), Some(&entry.spec))
}

/// `DELEX key [IFEQ v|IFNE v|IFDEQ d|IFDNE d]`.
fn parse_delex(args: &[Bytes]) -> Parsed {
    match args.len() {
        2 => single(args, Command::DelEx(Condition::Always)),
        4 => match parse_if_condition(&args[2], &args[3]) {
            Some(Ok(condition)) => single(args, Command::DelEx(condition)),
            Some(Err(e)) => Parsed::Error(e),
            None => error(SYNTAX_ERROR),
        },
        _ => error(SYNTAX_ERROR),
    }
}

/// `LOCK.ACQUIRE key owner lease-ms`.
fn parse_lock_acquire(args: &[Bytes]) -> Parsed {
    match parse_int(&args[3]) {
        Some(lease) if lease > 0 => single(
            args,
            Command::LockAcquire {
                owner: args[2].clone(),
                lease_ms: lease.unsigned_abs(),
            },
        ),
        Some(_) => error("ERR invalid lease time in 'lock.acquire' command"),
        None => error(NOT_AN_INTEGER),
    }
}

/// `EXPIRE|PEXPIRE|EXPIREAT|PEXPIREAT key time [NX|XX|GT|LT ...]`, checked in Redis's order:
/// the options, then the integer (the register checks the time's range, which may depend on the
/// stamp).
fn parse_expire(kind: ExpireKind, args: &[Bytes]) -> Parsed {
    let mut flags = ExpireFlags::default();
    for option in &args[3..] {
        if is(option, "nx") {
            flags.nx = true;
        } else if is(option, "xx") {
            flags.xx = true;
        } else if is(option, "gt") {
            flags.gt = true;
        } else if is(option, "lt") {
            flags.lt = true;
        } else {
            return Parsed::Error(format!("ERR Unsupported option {}", shown(option, 128)));
        }
    }
    if flags.nx && (flags.xx || flags.gt || flags.lt) {
        return error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if flags.gt && flags.lt {
        return error("ERR GT and LT options at the same time are not compatible");
    }
    let Some(time) = parse_int(&args[2]) else {
        return error(NOT_AN_INTEGER);
    };
    Parsed::Single {
        key: args[1].clone(),
        command: Command::Expire(ExpireArgs { kind, time, flags }),
        shape: ReplyShape::Plain,
    }
}

/// `SETEX key seconds value` and `PSETEX key milliseconds value`: SET with EX or PX, and errors
/// naming the command.
fn parse_setex(name: &'static str, args: &[Bytes]) -> Parsed {
    let unit = if name == "setex" {
        ExpireUnit::Ex
    } else {
        ExpireUnit::Px
    };
    let expiry = match parse_expiry(unit, &args[2]) {
        Ok(expiry) => expiry,
        Err(ExpiryError::NotAnInteger) => return error(NOT_AN_INTEGER),
        Err(ExpiryError::Invalid) => {
            return Parsed::Error(CommandError::InvalidExpireTimeIn(name).to_string())
        }
    };
    Parsed::Single {
        key: args[1].clone(),
        command: Command::Set(SetArgs {
            value: args[3].clone(),
            condition: Condition::Always,
            get: false,
            expiry,
        }),
        shape: ReplyShape::ExpireErrorsOf(name),
    }
}

/// DEL and EXISTS: one key is a single command, several are independent parts.
fn per_key(args: &[Bytes], command: Command, combine: Combine) -> Parsed {
    if args.len() == 2 {
        return Parsed::Single {
            key: args[1].clone(),
            command,
            shape: ReplyShape::Plain,
        };
    }
    Parsed::Multi {
        parts: args[1..]
            .iter()
            .map(|k| (k.clone(), command.clone()))
            .collect(),
        combine,
    }
}

/// Parses a hex digest as DIGEST prints it (1 to 16 hex digits, any case).
fn parse_digest(hex: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(hex)
        .ok()
        .filter(|s| (1..=16).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| "ERR invalid digest: expected 1 to 16 hexadecimal digits".to_owned())
}

/// IFEQ/IFNE/IFDEQ/IFDNE `value`; `None` if `option` is none of them.
fn parse_if_condition(option: &[u8], value: &Bytes) -> Option<Result<Condition, String>> {
    Some(if is(option, "ifeq") {
        Ok(Condition::IfEq(value.clone()))
    } else if is(option, "ifne") {
        Ok(Condition::IfNe(value.clone()))
    } else if is(option, "ifdeq") {
        parse_digest(value).map(Condition::IfDigestEq)
    } else if is(option, "ifdne") {
        parse_digest(value).map(Condition::IfDigestNe)
    } else {
        return None;
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpireUnit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// `SET key value [NX|XX|IFEQ v|IFNE v|IFDEQ d|IFDNE d] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`
/// with Redis's rules: the options may come in any order, conditions exclude each other, the
/// expiry options exclude each other and KEEPTTL (but one may repeat, the last time counting);
/// the expire time is checked after the syntax.
fn parse_set(args: &[Bytes]) -> Parsed {
    let mut condition: Option<Condition> = None;
    let mut get = false;
    let mut keep_ttl = false;
    let mut expire: Option<(ExpireUnit, &Bytes)> = None;
    let mut i = 3;
    while i < args.len() {
        let option = &args[i];
        let next = args.get(i + 1);
        if is(option, "nx") && matches!(condition, None | Some(Condition::Nx)) {
            condition = Some(Condition::Nx);
        } else if is(option, "xx") && matches!(condition, None | Some(Condition::Xx)) {
            condition = Some(Condition::Xx);
        } else if is(option, "get") {
            get = true;
        } else if is(option, "keepttl") && expire.is_none() {
            keep_ttl = true;
        } else if let (Some(unit), Some(value), false) = (expire_unit(option), next, keep_ttl) {
            // Redis accepts `EX 1 EX 2` (the last counts) but not `EX 1 PX 2`.
            if expire.is_some_and(|(u, _)| u != unit) {
                return error(SYNTAX_ERROR);
            }
            expire = Some((unit, value));
            i += 1;
        } else if let (Some(value), None) = (next, &condition) {
            match parse_if_condition(option, value) {
                Some(Ok(c)) => condition = Some(c),
                Some(Err(e)) => return Parsed::Error(e),
                None => return error(SYNTAX_ERROR),
            }
            i += 1;
        } else {
            return error(SYNTAX_ERROR);
        }
        i += 1;
    }
    let expiry = match expire {
        None if keep_ttl => Expiry::Keep,
        None => Expiry::Clear,
        Some((unit, raw)) => match parse_expiry(unit, raw) {
            Ok(expiry) => expiry,
            Err(ExpiryError::NotAnInteger) => return error(NOT_AN_INTEGER),
            Err(ExpiryError::Invalid) => return error(INVALID_EXPIRE),
        },
    };
    Parsed::Single {
        key: args[1].clone(),
        command: Command::Set(SetArgs {
            value: args[2].clone(),
            condition: condition.unwrap_or(Condition::Always),
            get,
            expiry,
        }),
        shape: ReplyShape::Plain,
    }
}

enum ExpiryError {
    NotAnInteger,
    Invalid,
}

/// An EX/PX/EXAT/PXAT time: a positive integer whose milliseconds fit in 64 bits.
fn parse_expiry(unit: ExpireUnit, raw: &[u8]) -> Result<Expiry, ExpiryError> {
    let n = parse_int(raw).ok_or(ExpiryError::NotAnInteger)?;
    let ms = match unit {
        ExpireUnit::Ex | ExpireUnit::ExAt => n.checked_mul(1000),
        ExpireUnit::Px | ExpireUnit::PxAt => Some(n),
    };
    let ms = ms.filter(|ms| *ms > 0).ok_or(ExpiryError::Invalid)?;
    let ms = ms.unsigned_abs();
    Ok(match unit {
        ExpireUnit::Ex | ExpireUnit::Px => Expiry::AfterMs(ms),
        ExpireUnit::ExAt | ExpireUnit::PxAt => Expiry::AtMs(ms),
    })
}

fn expire_unit(option: &[u8]) -> Option<ExpireUnit> {
    [
        ("ex", ExpireUnit::Ex),
        ("px", ExpireUnit::Px),
        ("exat", ExpireUnit::ExAt),
        ("pxat", ExpireUnit::PxAt),
    ]
    .into_iter()
    .find(|(name, _)| is(option, name))
    .map(|(_, unit)| unit)
}

/// Whether a client name is acceptable: printable ASCII without spaces.
fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|b| (b'!'..=b'~').contains(b))
}

const BAD_CLIENT_NAME: &str =
    "ERR Client names cannot contain spaces, newlines or special characters.";

/// `PING [message]`.
fn parse_ping(args: &[Bytes]) -> Parsed {
    match args.len() {
        1 => Parsed::Local(Local::Ping(None)),
        2 => Parsed::Local(Local::Ping(Some(args[1].clone()))),
        _ => arity_error("ping"),
    }
}

/// `AUTH [username] password`.
fn parse_auth(args: &[Bytes]) -> Parsed {
    match args {
        [_, password] => Parsed::Local(Local::Auth {
            user: None,
            password: password.clone(),
        }),
        [_, user, password] => Parsed::Local(Local::Auth {
            user: Some(user.clone()),
            password: password.clone(),
        }),
        _ => error(SYNTAX_ERROR),
    }
}

fn parse_hello(args: &[Bytes]) -> Parsed {
    let mut protocol = None;
    let mut auth = None;
    let mut setname = None;
    let mut i = 1;
    if let Some(version) = args.get(1) {
        protocol = match parse_int(version) {
            Some(2) => Some(Protocol::Resp2),
            Some(3) => Some(Protocol::Resp3),
            Some(_) => return error("NOPROTO unsupported protocol version"),
            None => return error("ERR Protocol version is not an integer or out of range"),
        };
        i = 2;
    }
    while i < args.len() {
        let more = args.len() - 1 - i;
        if is(&args[i], "auth") && more >= 2 {
            auth = Some((args[i + 1].clone(), args[i + 2].clone()));
            i += 3;
        } else if is(&args[i], "setname") && more >= 1 {
            if !valid_client_name(&args[i + 1]) {
                return error(BAD_CLIENT_NAME);
            }
            setname = Some(args[i + 1].clone());
            i += 2;
        } else {
            return Parsed::Error(format!(
                "ERR Syntax error in HELLO option '{}'",
                shown(&args[i], 128)
            ));
        }
    }
    Parsed::Local(Local::Hello {
        protocol,
        auth,
        setname,
    })
}

/// Checks a container's subcommand arity (Redis's convention, counting the container name).
fn sub_arity(container: &str, sub: &str, arity: i64, argc: usize) -> Option<Parsed> {
    (!arity_ok(arity, argc)).then(|| arity_error(&format!("{container}|{sub}")))
}

fn parse_client(args: &[Bytes]) -> Parsed {
    let sub = &args[1];
    let checked = |name: &str, arity: i64, local: Local| {
        sub_arity("client", name, arity, args.len()).unwrap_or(Parsed::Local(local))
    };
    if is(sub, "setname") {
        if args.len() == 3 && !valid_client_name(&args[2]) {
            return error(BAD_CLIENT_NAME);
        }
        let name = args.get(2).cloned().unwrap_or_default();
        checked("setname", 3, Local::ClientSetName(name))
    } else if is(sub, "getname") {
        checked("getname", 2, Local::ClientGetName)
    } else if is(sub, "setinfo") {
        if args.len() == 4 && !(is(&args[2], "lib-name") || is(&args[2], "lib-ver")) {
            return Parsed::Error(format!(
                "ERR Unrecognized option '{}'",
                shown(&args[2], 128)
            ));
        }
        checked("setinfo", 4, Local::ClientSetInfo)
    } else if is(sub, "id") {
        checked("id", 2, Local::ClientId)
    } else if is(sub, "info") {
        checked("info", 2, Local::Admin(admin::Admin::ClientInfo))
    } else if is(sub, "list") {
        admin::parse_client_list(args)
    } else if is(sub, "kill") {
        sub_arity("client", "kill", -3, args.len())
            .unwrap_or_else(|| admin::parse_client_kill(args))
    } else {
        unknown_subcommand(sub, "CLIENT")
    }
}

/// `CLUSTER SLOTS|SHARDS|NODES|INFO|MYID|HELP|KEYSLOT key|COUNTKEYSINSLOT slot|GETKEYSINSLOT
/// slot count`; the subcommands that change a Redis Cluster by hand are refused with the reason.
fn parse_cluster(args: &[Bytes]) -> Parsed {
    use crate::cluster::{ClusterCommand, INVALID_SLOT};
    let sub = &args[1];
    let local = |command| Parsed::Local(Local::Cluster(command));
    let slot = |arg: &Bytes| {
        parse_int(arg)
            .and_then(|n| u16::try_from(n).ok())
            .and_then(logless_placement::Slot::new)
    };
    let fixed = [
        ("slots", ClusterCommand::Slots),
        ("shards", ClusterCommand::Shards),
        ("nodes", ClusterCommand::Nodes),
        ("info", ClusterCommand::Info),
        ("myid", ClusterCommand::MyId),
        ("help", ClusterCommand::Help),
    ];
    if let Some((name, command)) = fixed.into_iter().find(|(name, _)| is(sub, name)) {
        return sub_arity("cluster", name, 2, args.len()).unwrap_or_else(|| local(command));
    }
    if is(sub, "keyslot") {
        sub_arity("cluster", "keyslot", 3, args.len())
            .unwrap_or_else(|| local(ClusterCommand::KeySlot(args[2].clone())))
    } else if is(sub, "countkeysinslot") {
        if let Some(arity) = sub_arity("cluster", "countkeysinslot", 3, args.len()) {
            return arity;
        }
        match slot(&args[2]) {
            Some(slot) => local(ClusterCommand::CountKeysInSlot(slot)),
            None => error(INVALID_SLOT),
        }
    } else if is(sub, "getkeysinslot") {
        if let Some(arity) = sub_arity("cluster", "getkeysinslot", 4, args.len()) {
            return arity;
        }
        let count = parse_int(&args[3]).and_then(|n| usize::try_from(n).ok());
        match (slot(&args[2]), count) {
            (None, _) => error(INVALID_SLOT),
            (Some(slot), Some(count)) => local(ClusterCommand::GetKeysInSlot(slot, count)),
            (Some(_), None) => error("ERR Invalid number of keys"),
        }
    } else if CLUSTER_CHANGES.iter().any(|name| is(sub, name)) {
        Parsed::Error(format!(
            "ERR logless does not implement 'cluster|{}': which nodes serve a slot follows \
             the ring's configuration (docs/ring.md), which CLUSTER does not change",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        ))
    } else {
        unknown_subcommand(sub, "CLUSTER")
    }
}

/// The `CLUSTER` subcommands of Redis that change a cluster's membership or slots by hand.
const CLUSTER_CHANGES: [&str; 14] = [
    "addslots",
    "addslotsrange",
    "bumpepoch",
    "delslots",
    "delslotsrange",
    "failover",
    "flushslots",
    "forget",
    "meet",
    "replicate",
    "reset",
    "saveconfig",
    "set-config-epoch",
    "setslot",
];

fn parse_command_command(args: &[Bytes]) -> Parsed {
    let Some(sub) = args.get(1) else {
        return Parsed::Local(Local::Command);
    };
    if is(sub, "count") {
        sub_arity("command", "count", 2, args.len()).unwrap_or(Parsed::Local(Local::CommandCount))
    } else if is(sub, "docs") {
        Parsed::Local(Local::CommandDocs(args[2..].to_vec()))
    } else if is(sub, "info") {
        Parsed::Local(Local::CommandInfo(args[2..].to_vec()))
    } else {
        unknown_subcommand(sub, "COMMAND")
    }
}

fn parse_config(args: &[Bytes]) -> Parsed {
    let sub = &args[1];
    if is(sub, "get") {
        sub_arity("config", "get", -3, args.len())
            .unwrap_or_else(|| Parsed::Local(Local::ConfigGet(args[2..].to_vec())))
    } else if is(sub, "set") {
        if args.len() < 4 || !args.len().is_multiple_of(2) {
            return arity_error("config|set");
        }
        Parsed::Local(Local::ConfigSet(
            args[2..]
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        ))
    } else if is(sub, "resetstat") {
        admin::parse_config_resetstat(args)
    } else if is(sub, "rewrite") {
        error(
            "ERR logless has no configuration file of Redis's to rewrite: a replica's \
             settings come from its TOML file and flags, and CONFIG SET lasts until it stops",
        )
    } else {
        unknown_subcommand(sub, "CONFIG")
    }
}

/// A register reply as a RESP value, shown as `shape` says.
pub fn reply_to_value(reply: &Reply, shape: ReplyShape) -> Value {
    match (reply, shape) {
        (Reply::Ok, ReplyShape::SetNx) => Value::Int(1),
        (Reply::Nil, ReplyShape::SetNx) => Value::Int(0),
        (Reply::Error(e), _) => error_value(*e, shape),
        (_, ReplyShape::Ok) => Value::Simple("OK".to_owned()),
        (Reply::Ok, _) => Value::Simple("OK".to_owned()),
        (Reply::Nil, _) => Value::Nil,
        (Reply::Int(i), _) => Value::Int(*i),
        (Reply::Bulk(b), _) => Value::Bulk(b.clone()),
        (Reply::Status(s), _) => Value::Simple((*s).to_owned()),
        (Reply::Array(items), ReplyShape::Set) => {
            Value::Set(items.iter().cloned().map(Value::Bulk).collect())
        }
        (Reply::Array(items), _) => Value::Array(items.iter().cloned().map(Value::Bulk).collect()),
        (Reply::Double(d), _) => Value::Double(d.get()),
        (Reply::NilArray, _) => Value::NilArray,
        (Reply::Items(items), ReplyShape::Exec(shapes)) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, r)| reply_to_value(r, shapes.get(i)))
                .collect(),
        ),
        (Reply::Items(items), _) => Value::Array(items.iter().map(plain).collect()),
        (Reply::Map(pairs), _) => {
            Value::Map(pairs.iter().map(|(k, v)| (plain(k), plain(v))).collect())
        }
        (Reply::Pairs(pairs), _) => {
            Value::Pairs(pairs.iter().map(|(k, v)| (plain(k), plain(v))).collect())
        }
    }
}

fn plain(reply: &Reply) -> Value {
    reply_to_value(reply, ReplyShape::Plain)
}

fn error_value(error: CommandError, shape: ReplyShape) -> Value {
    match (error, shape) {
        (CommandError::InvalidExpireTime, ReplyShape::ExpireErrorsOf(name)) => {
            Value::Error(CommandError::InvalidExpireTimeIn(name).to_string())
        }
        (e, _) => Value::Error(e.to_string()),
    }
}

/// The combined reply of a [`Parsed::Multi`], from its parts' replies in order.
///
/// [`Combine::Sum`] answers the first error if a part failed, else the sum of the integers;
/// [`Combine::Array`] answers each string as it is and anything else (nil, a key of another
/// type) as nil, like Redis's MGET.
pub fn combine_replies(combine: Combine, replies: &[Reply]) -> Value {
    match combine {
        Combine::Sum => {
            let mut sum: i64 = 0;
            for reply in replies {
                match reply {
                    Reply::Int(i) => sum = sum.saturating_add(*i),
                    Reply::Error(e) => return Value::Error(e.to_string()),
                    _ => return Value::Error(CommandError::WrongType.to_string()),
                }
            }
            Value::Int(sum)
        }
        Combine::Array => Value::Array(
            replies
                .iter()
                .map(|r| match r {
                    Reply::Bulk(b) => Value::Bulk(b.clone()),
                    _ => Value::Nil,
                })
                .collect(),
        ),
    }
}
