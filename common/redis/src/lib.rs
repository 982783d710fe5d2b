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
//! * [`acl`] is who a client is and what it may run: users, passwords, key patterns.
//! * [`cluster`] is the Redis Cluster view of a ring of nodes: the replies of `CLUSTER SLOTS`,
//!   `SHARDS`, `NODES`, `KEYSLOT` and `INFO` and the `MOVED`/`ASK` redirections, computed
//!   from a ring configuration and the nodes' addresses, and the routing decision of a node in
//!   cluster mode ([`cluster::ClusterMap`]: `CROSSSLOT`, `MOVED`).
//! * [`session`] is one connection's protocol state without I/O: it turns each request into a
//!   reply, engine commands to submit, or a question for the node, and the engines' answers
//!   into replies. Every error text logless answers is written here or in [`table`].
//!
//! # Supported commands
//!
//! Register commands, each a linearizable operation on one key:
//!
//! * strings and counters: `GET`, `SET key value [NX|XX|IFEQ v|IFNE v|IFDEQ digest|IFDNE
//!   digest] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`, `SETNX`, `SETEX`, `PSETEX`, `GETSET`,
//!   `GETDEL`, `GETEX`, `GETRANGE`, `SETRANGE`, `APPEND`, `STRLEN`, `INCR`, `INCRBY`, `DECR`,
//!   `DECRBY`, `INCRBYFLOAT`, `MGET`;
//! * keys: `DEL`, `UNLINK`, `EXISTS`, `TYPE`, `TTL`, `PTTL`,
//!   `EXPIRE|PEXPIRE|EXPIREAT|PEXPIREAT key time [NX|XX|GT|LT]`, `PERSIST`,
//!   `DELEX key [IFEQ v|IFNE v|IFDEQ digest|IFDNE digest]` and `DIGEST` (Redis 8.4);
//! * sets: `SADD`, `SREM`, `SMEMBERS`, `SISMEMBER`, `SMISMEMBER`, `SCARD`, `SPOP`,
//!   `SRANDMEMBER`, `SSCAN`;
//! * hashes: `HSET`, `HMSET`, `HSETNX`, `HGET`, `HMGET`, `HDEL`, `HEXISTS`, `HLEN`, `HSTRLEN`,
//!   `HKEYS`, `HVALS`, `HGETALL`, `HINCRBY`, `HINCRBYFLOAT`, `HRANDFIELD`, `HSCAN`;
//! * lists: `LPUSH`, `RPUSH`, `LPUSHX`, `RPUSHX`, `LPOP`, `RPOP` (with a count), `LLEN`,
//!   `LRANGE`, `LINDEX`, `LSET`, `LINSERT`, `LREM`, `LTRIM`, `LPOS`, and `LMOVE`/`RPOPLPUSH`
//!   with the source as destination;
//! * sorted sets: `ZADD [NX|XX] [GT|LT] [CH] [INCR]`, `ZREM`, `ZSCORE`, `ZMSCORE`, `ZINCRBY`,
//!   `ZCARD`, `ZCOUNT`, `ZRANK`, `ZREVRANK` (with `WITHSCORE`), `ZRANGE [BYSCORE|BYLEX] [REV]
//!   [LIMIT offset count] [WITHSCORES]` and its older forms `ZREVRANGE`, `ZRANGEBYSCORE`,
//!   `ZREVRANGEBYSCORE`, `ZRANGEBYLEX`, `ZREVRANGEBYLEX`, `ZPOPMIN`, `ZPOPMAX`, `ZSCAN`;
//! * transactions on one key: `MULTI`, `EXEC`, `DISCARD` (and `UNWATCH`), see
//!   [`session`]: the queued commands run as one register command, in one consensus decision;
//! * logless's fencing lock: `LOCK.ACQUIRE key owner lease-ms` (replies the fencing token, or
//!   nil while another owner holds the lease) and `LOCK.RELEASE key owner` (1 if released,
//!   else 0).
//!
//! Connection and server commands the node answers itself: `PING`, `ECHO`, `HELLO`, `AUTH`,
//! `QUIT`, `RESET`, `SELECT`, `CLIENT SETNAME|GETNAME|SETINFO|ID|INFO|LIST|KILL`,
//! `COMMAND [COUNT|DOCS|INFO]`, `CONFIG GET|SET|RESETSTAT`, `INFO`, `TIME`, `DBSIZE` and
//! `ACL WHOAMI|LIST|USERS|CAT`, and over this replica's copy of the keyspace
//! `SCAN cursor [MATCH p] [COUNT n] [TYPE t]`, `KEYS`, `RANDOMKEY`, `FLUSHALL` and `FLUSHDB`
//! (see [`table::admin`]).
//!
//! [`acl`] holds the node's users (`requirepass` is the default user's password): with a
//! password set, a connection may run only `AUTH`, `HELLO`, `PING`, `QUIT` and `RESET` until
//! `AUTH [user] password` or `HELLO 3 AUTH user password` logs it in; each user may be
//! limited to key patterns and to commands that read. Without one, every connection is the
//! default user, as in Redis's default configuration. Unlike Redis, `PING` answers before
//! logging in (for health checks), and users are configured when a replica starts (no
//! `ACL SETUSER`).
//!
//! # Differences from Redis
//!
//! * Every key is its own replicated register, so nothing is atomic across keys. `DEL`,
//!   `UNLINK` and `EXISTS` with several keys and `MGET` run one independent linearizable
//!   operation per key and combine the replies; they are not one atomic snapshot (another client
//!   may observe some of the deletions of a `DEL k1 k2` before the others).
//! * Commands whose meaning depends on atomicity across keys (`MSET`, `RENAME`, `SMOVE`, the
//!   `*STORE` set commands, `WATCH`, scripts and functions, ...) are refused with an error
//!   naming the reason (a session with one order over all keys,
//!   [`session::Session::with_total_order`], serves MSET, MSETNX, RENAME, RENAMENX, SMOVE,
//!   COPY, transactions over several keys and `WATCH` instead); so are `LMOVE` and
//!   `RPOPLPUSH` between two keys. Every Redis command
//!   logless lacks answers `ERR logless does not implement 'name'`, with the reason where
//!   there is one ([`table::redis_names`]); only a name Redis does not know is an
//!   `unknown command`.
//! * `SCAN`, `KEYS`, `RANDOMKEY` and `DBSIZE` read this replica's copy of the keyspace: not a
//!   linearizable snapshot. `FLUSHALL` and `FLUSHDB` are not atomic: they delete each key of
//!   this copy through consensus, one `DEL` each, and answer OK once every one is done.
//! * `CONFIG SET` changes `proto-max-bulk-len` (within the replica's `value_bytes_max`),
//!   `maxclients` and `logless-thrifty-reads`/`-writes` on the replica it is sent to; it accepts and ignores Redis's parameters that mean nothing here
//!   ([`table::admin::IGNORED_CONFIG`]) and refuses unknown ones as Redis does.
//! * A transaction runs only if its commands all name one key: `EXEC` of commands on several
//!   keys runs nothing and answers `EXECABORT` saying that a transaction is not atomic across
//!   keys in the per-key engine. Every queued command is parsed when it is queued, so a syntax
//!   error (which Redis would report inside `EXEC`'s reply) aborts the whole transaction, as
//!   an unknown command does in Redis. Connection and server commands are not queued (they
//!   answer an error and abort the transaction). A transaction holds at most
//!   [`table::TRANSACTION_COMMANDS_MAX`] commands.
//! * Values are bounded: no argument may be longer than `proto-max-bulk-len`, which is the
//!   node's `value_bytes_max` (1 MiB by default, at most 64 MiB), since a register's whole
//!   value travels in every vote; a longer one is answered with `ERR value exceeds the
//!   configured size limit` and the connection goes on. Collections are bounded the same way
//!   (the sum of their elements' bytes) and by a number of elements.
//! * `SETNX` is `SET NX` with its integer reply (1 set, 0 not set); `SETEX`, `PSETEX` and
//!   `GETSET` are `SET` with `EX`, `PX` and `GET`; `UNLINK` is `DEL` (there is no lazy freeing).
//! * `TYPE` of a fencing lock is `lock` (a type of logless's own, like a module type in Redis);
//!   the string commands refuse a lock with `WRONGTYPE`. The generic key commands (`DEL`,
//!   `EXPIRE`, `PERSIST`, `TTL`) work on locks as on any key; deleting a lock, or letting it
//!   expire, restarts its fencing tokens.
//! * `SPOP`, `SRANDMEMBER` and `HRANDFIELD` choose with a seed the session draws for each
//!   request (see [`session`]), so every replica chooses the same.
//! * The `*SCAN` cursors are positions in a hash order of the elements: an element present for
//!   the whole iteration is returned exactly once; the option checks happen even on a missing
//!   key (Redis skips them there).
//! * Expiry is decided from the proposer's clock stamp, so all replicas agree on it.
//! * Integers are stored as integers; they read back as their decimal strings like in Redis.
#![warn(missing_docs)]

/// Redis's glob patterns (`stringmatchlen`): the MATCH of SCAN and its family, KEYS, CONFIG
/// GET, and any other pattern a Redis command takes. They live with the register commands,
/// whose *SCAN matches with them too.
pub use logless_commands::glob;
pub mod acl;
pub mod cluster;
pub mod reply;
pub mod resp;
pub mod session;
pub mod table;
