//! The Redis protocol of logless: clients speak RESP2 or RESP3 to a logless node as if it
//! were a Redis server.
//!
//! * [`resp`] is the wire format: [`resp::parse_request`] takes one request (multibulk or
//!   inline) off a connection's read buffer without copying its arguments, and
//!   [`resp::write_value`] encodes a reply in either protocol version.
//! * [`table`] is the command table: [`table::parse_command`] maps a request onto register
//!   commands of `logless-commands` (or a command the node answers itself, or an error reply in
//!   Redis's words), and [`table::reply_to_value`] maps register replies back to RESP values.
//!   Each entry of the table owns its parser, so a command is described and parsed in one place.
//! * [`session`] is one connection's protocol state without I/O: it turns each request into a
//!   reply, engine commands to submit, or a question for the node, and the engines' answers
//!   into replies. Every error text logless answers is written here or in [`table`].
//!
//! # Supported commands
//!
//! Register commands, each a linearizable operation on one key:
//! `GET`, `SET key value [NX|XX|IFEQ v|IFNE v|IFDEQ digest|IFDNE digest] [GET]
//! [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`, `SETNX`, `SETEX`, `PSETEX`, `GETSET`, `GETDEL`,
//! `APPEND`, `STRLEN`, `DEL`, `UNLINK`, `EXISTS`, `MGET`, `TYPE`, `TTL`, `PTTL`,
//! `EXPIRE|PEXPIRE|EXPIREAT|PEXPIREAT key time [NX|XX|GT|LT]`, `PERSIST`, `INCR`, `INCRBY`,
//! `DECR`, `DECRBY`, `SADD`, `SREM`, `SMEMBERS`, `SISMEMBER`, `SCARD`,
//! `DELEX key [IFEQ v|IFNE v|IFDEQ digest|IFDNE digest]` and `DIGEST` (Redis 8.4), and
//! logless's fencing lock: `LOCK.ACQUIRE key owner lease-ms` (replies the fencing token, or nil while
//! another owner holds the lease) and `LOCK.RELEASE key owner` (1 if released, else 0).
//!
//! Connection and server commands the node answers itself: `PING`, `ECHO`, `HELLO`, `AUTH`,
//! `QUIT`, `RESET`, `SELECT`, `CLIENT SETNAME|GETNAME|SETINFO|ID|INFO`,
//! `COMMAND [COUNT|DOCS|INFO]`, `CONFIG GET|SET`, `INFO` and `DBSIZE`. There are no passwords:
//! `AUTH` behaves like Redis's default configuration (`AUTH default <anything>` passes, other
//! users fail with `WRONGPASS`, `AUTH password` answers Redis's "no password configured" error).
//!
//! # Differences from Redis
//!
//! * Every key is its own replicated register, so nothing is atomic across keys. `DEL`,
//!   `UNLINK` and `EXISTS` with several keys and `MGET` run one independent linearizable
//!   operation per key and combine the replies; they are not one atomic snapshot (another client
//!   may observe some of the deletions of a `DEL k1 k2` before the others).
//! * Commands whose meaning depends on atomicity across keys or on enumerating the keyspace
//!   (`MSET`, `RENAME`, `SMOVE`, the `*STORE` set commands, `MULTI`/`EXEC`/`WATCH`, scripts and
//!   functions, `KEYS`, `SCAN`, `FLUSHALL`, ...) are refused with an error naming the reason.
//! * `SETNX` is `SET NX` with its integer reply (1 set, 0 not set); `SETEX`, `PSETEX` and
//!   `GETSET` are `SET` with `EX`, `PX` and `GET`; `UNLINK` is `DEL` (there is no lazy freeing).
//! * `TYPE` of a fencing lock is `lock` (a type of logless's own, like a module type in Redis);
//!   the string commands refuse a lock with `WRONGTYPE`. The generic key commands (`DEL`,
//!   `EXPIRE`, `PERSIST`, `TTL`) work on locks as on any key; deleting a lock, or letting it
//!   expire, restarts its fencing tokens.
//! * Expiry is decided from the proposer's clock stamp, so all replicas agree on it.
//! * Integers are stored as integers; they read back as their decimal strings like in Redis.
#![warn(missing_docs)]

pub mod resp;
pub mod session;
pub mod table;
