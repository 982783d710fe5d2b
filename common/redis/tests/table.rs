use bytes::{Bytes, BytesMut};
use logless_commands::command::{
    Command, CommandError, Condition, ExpireArgs, ExpireFlags, ExpireKind, Expiry, Reply, SetArgs,
};
use logless_redis::resp::{write_value, Protocol, Value};
use logless_redis::table::{
    combine_replies, command_info_value, command_names, find_command, parse_command,
    reply_to_value, Combine, Local, Parsed, ReplyShape,
};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn parse(line: &str) -> Parsed {
    let args: Vec<Bytes> = line.split(' ').map(b).collect();
    parse_command(&args)
}

fn single(key: &str, command: Command) -> Parsed {
    Parsed::Single {
        key: b(key),
        command,
        shape: ReplyShape::Plain,
    }
}

fn err(text: &str) -> Parsed {
    Parsed::Error(text.to_owned())
}

fn set(value: &str, condition: Condition, get: bool, expiry: Expiry) -> Parsed {
    single(
        "k",
        Command::Set(SetArgs {
            value: b(value),
            condition,
            get,
            expiry,
        }),
    )
}

const SYNTAX: &str = "ERR syntax error";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const BAD_EXPIRE: &str = "ERR invalid expire time in 'set' command";

#[test]
fn simple_register_commands() {
    assert_eq!(parse("GET k"), single("k", Command::Get));
    assert_eq!(parse("get k"), single("k", Command::Get));
    assert_eq!(parse("gEt k"), single("k", Command::Get));
    assert_eq!(parse("INCR k"), single("k", Command::IncrBy(1)));
    assert_eq!(parse("DECR k"), single("k", Command::IncrBy(-1)));
    assert_eq!(parse("INCRBY k -5"), single("k", Command::IncrBy(-5)));
    assert_eq!(parse("DECRBY k 7"), single("k", Command::IncrBy(-7)));
    assert_eq!(
        parse("DECRBY k -9223372036854775807"),
        single("k", Command::IncrBy(i64::MAX))
    );
    assert_eq!(
        parse("SADD k a b a"),
        single("k", Command::SAdd(vec![b("a"), b("b"), b("a")]))
    );
    assert_eq!(parse("SREM k a"), single("k", Command::SRem(vec![b("a")])));
    assert_eq!(
        parse("SMEMBERS k"),
        Parsed::Single {
            key: b("k"),
            command: Command::SMembers,
            shape: ReplyShape::Set
        }
    );
    assert_eq!(
        parse("SISMEMBER k m"),
        single("k", Command::SIsMember(b("m")))
    );
    assert_eq!(parse("SCARD k"), single("k", Command::SCard));
    assert_eq!(parse("DIGEST k"), single("k", Command::Digest));
    assert_eq!(parse("DEL k"), single("k", Command::Del));
    assert_eq!(parse("EXISTS k"), single("k", Command::Exists));
}

#[test]
fn integer_arguments() {
    for bad in [
        "x",
        "1.5",
        "+1",
        "01",
        "-0",
        " 1",
        "",
        "9223372036854775808",
    ] {
        let args = vec![b("INCRBY"), b("k"), b(bad)];
        assert_eq!(parse_command(&args), err(NOT_INT), "{bad:?}");
        let args = vec![b("DECRBY"), b("k"), b(bad)];
        assert_eq!(parse_command(&args), err(NOT_INT), "{bad:?}");
    }
    assert_eq!(
        parse("DECRBY k -9223372036854775808"),
        err("ERR decrement would overflow")
    );
    assert_eq!(
        parse("INCRBY k -9223372036854775808"),
        single("k", Command::IncrBy(i64::MIN))
    );
}

#[test]
fn multi_key_commands() {
    assert_eq!(
        parse("DEL a b a"),
        Parsed::Multi {
            parts: vec![
                (b("a"), Command::Del),
                (b("b"), Command::Del),
                (b("a"), Command::Del)
            ],
            combine: Combine::Sum
        }
    );
    assert_eq!(
        parse("EXISTS a b"),
        Parsed::Multi {
            parts: vec![(b("a"), Command::Exists), (b("b"), Command::Exists)],
            combine: Combine::Sum
        }
    );
    assert_eq!(
        parse("MGET a"),
        Parsed::Multi {
            parts: vec![(b("a"), Command::Get)],
            combine: Combine::Array
        }
    );
    assert_eq!(
        parse("MGET a b"),
        Parsed::Multi {
            parts: vec![(b("a"), Command::Get), (b("b"), Command::Get)],
            combine: Combine::Array
        }
    );
}

#[test]
fn combining_replies() {
    assert_eq!(
        combine_replies(Combine::Sum, &[Reply::Int(1), Reply::Int(0), Reply::Int(1)]),
        Value::Int(2)
    );
    assert_eq!(
        combine_replies(
            Combine::Sum,
            &[Reply::Int(1), Reply::Error(CommandError::ValueTooLarge)]
        ),
        Value::Error("ERR value exceeds the configured size limit".into())
    );
    assert_eq!(
        combine_replies(
            Combine::Array,
            &[
                Reply::Bulk(b("v")),
                Reply::Nil,
                Reply::Error(CommandError::WrongType)
            ]
        ),
        Value::Array(vec![Value::Bulk(b("v")), Value::Nil, Value::Nil])
    );
}

#[test]
fn set_plain_and_conditions() {
    assert_eq!(
        parse("SET k v"),
        set("v", Condition::Always, false, Expiry::Clear)
    );
    assert_eq!(
        parse("set k v nx"),
        set("v", Condition::Nx, false, Expiry::Clear)
    );
    assert_eq!(
        parse("SET k v NX NX"),
        set("v", Condition::Nx, false, Expiry::Clear)
    );
    assert_eq!(
        parse("SET k v XX"),
        set("v", Condition::Xx, false, Expiry::Clear)
    );
    assert_eq!(
        parse("SET k v IFEQ old"),
        set("v", Condition::IfEq(b("old")), false, Expiry::Clear)
    );
    assert_eq!(
        parse("SET k v ifne old"),
        set("v", Condition::IfNe(b("old")), false, Expiry::Clear)
    );
    assert_eq!(
        parse("SET k v IFDEQ 00000000000000fF"),
        set("v", Condition::IfDigestEq(255), false, Expiry::Clear)
    );
    assert_eq!(
        parse("SET k v IFDNE ffffffffffffffff"),
        set("v", Condition::IfDigestNe(u64::MAX), false, Expiry::Clear)
    );
    for bad in ["", "xyz", "00000000000000000", "-1"] {
        let args = vec![b("SET"), b("k"), b("v"), b("IFDEQ"), b(bad)];
        assert!(
            matches!(parse_command(&args), Parsed::Error(e) if e.starts_with("ERR invalid digest")),
            "{bad:?}"
        );
    }
}

#[test]
fn set_get_and_expiry() {
    assert_eq!(
        parse("SET k v GET"),
        set("v", Condition::Always, true, Expiry::Clear)
    );
    assert_eq!(
        parse("SET k v NX GET"),
        set("v", Condition::Nx, true, Expiry::Clear)
    );
    assert_eq!(
        parse("SET k v EX 10"),
        set("v", Condition::Always, false, Expiry::AfterMs(10_000))
    );
    assert_eq!(
        parse("SET k v px 10"),
        set("v", Condition::Always, false, Expiry::AfterMs(10))
    );
    assert_eq!(
        parse("SET k v EXAT 1700000000"),
        set(
            "v",
            Condition::Always,
            false,
            Expiry::AtMs(1_700_000_000_000)
        )
    );
    assert_eq!(
        parse("SET k v PXAT 1700000000123"),
        set(
            "v",
            Condition::Always,
            false,
            Expiry::AtMs(1_700_000_000_123)
        )
    );
    assert_eq!(
        parse("SET k v KEEPTTL"),
        set("v", Condition::Always, false, Expiry::Keep)
    );
    assert_eq!(
        parse("SET k v KEEPTTL XX GET KEEPTTL"),
        set("v", Condition::Xx, true, Expiry::Keep)
    );
    assert_eq!(
        parse("SET k v EX 1 IFEQ x GET"),
        set("v", Condition::IfEq(b("x")), true, Expiry::AfterMs(1000))
    );
    assert_eq!(
        parse("SET k v PX 9223372036854775807"),
        set(
            "v",
            Condition::Always,
            false,
            Expiry::AfterMs(9_223_372_036_854_775_807)
        )
    );
    assert_eq!(
        parse("SET k v EX 9223372036854775"),
        set(
            "v",
            Condition::Always,
            false,
            Expiry::AfterMs(9_223_372_036_854_775_000)
        )
    );
}

#[test]
fn set_errors() {
    for line in [
        "SET k v NX XX",
        "SET k v XX NX",
        "SET k v NX IFEQ x",
        "SET k v IFEQ x NX",
        "SET k v IFEQ x XX",
        "SET k v IFEQ x IFNE y",
        "SET k v IFDEQ 1 IFDNE 2",
        "SET k v IFEQ x IFEQ x",
        "SET k v IFEQ",
        "SET k v EX",
        "SET k v EX 1 PX 1",
        "SET k v EXAT 1 PXAT 1",
        "SET k v EX 1 KEEPTTL",
        "SET k v KEEPTTL EX 1",
        "SET k v FOO",
        "SET k v NX FOO",
        "SET k v EX 0 NX XX",
        "SET k v GET 1",
    ] {
        assert_eq!(parse(line), err(SYNTAX), "{line}");
    }
    for line in [
        "SET k v EX 0",
        "SET k v EX -1",
        "SET k v PX 0",
        "SET k v PX -5",
        "SET k v EXAT 0",
        "SET k v PXAT -1",
        "SET k v EX 9223372036854776",
        "SET k v EXAT 9223372036854776",
    ] {
        assert_eq!(parse(line), err(BAD_EXPIRE), "{line}");
    }
    for line in [
        "SET k v EX x",
        "SET k v PX 1.5",
        "SET k v EX 99999999999999999999",
    ] {
        assert_eq!(parse(line), err(NOT_INT), "{line}");
    }
}

#[test]
fn setnx_and_its_shape() {
    assert_eq!(
        parse("SETNX k v"),
        Parsed::Single {
            key: b("k"),
            command: Command::Set(SetArgs {
                value: b("v"),
                condition: Condition::Nx,
                get: false,
                expiry: Expiry::Clear
            }),
            shape: ReplyShape::SetNx
        }
    );
    assert_eq!(reply_to_value(&Reply::Ok, ReplyShape::SetNx), Value::Int(1));
    assert_eq!(
        reply_to_value(&Reply::Nil, ReplyShape::SetNx),
        Value::Int(0)
    );
    assert_eq!(
        reply_to_value(&Reply::Error(CommandError::WrongType), ReplyShape::SetNx),
        Value::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
}

#[test]
fn reply_values() {
    assert_eq!(
        reply_to_value(&Reply::Ok, ReplyShape::Plain),
        Value::Simple("OK".into())
    );
    assert_eq!(reply_to_value(&Reply::Nil, ReplyShape::Plain), Value::Nil);
    assert_eq!(
        reply_to_value(&Reply::Int(7), ReplyShape::Plain),
        Value::Int(7)
    );
    assert_eq!(
        reply_to_value(&Reply::Bulk(b("x")), ReplyShape::Plain),
        Value::Bulk(b("x"))
    );
    assert_eq!(
        reply_to_value(&Reply::Array(vec![b("a")]), ReplyShape::Plain),
        Value::Array(vec![Value::Bulk(b("a"))])
    );
    assert_eq!(
        reply_to_value(&Reply::Error(CommandError::Overflow), ReplyShape::Plain),
        Value::Error("ERR increment or decrement would overflow".into())
    );
}

#[test]
fn smembers_is_a_set_under_resp3() {
    let Parsed::Single { shape, .. } = parse("SMEMBERS k") else {
        panic!("SMEMBERS is a single-key command");
    };
    let value = reply_to_value(&Reply::Array(vec![b("a"), b("b")]), shape);
    assert_eq!(
        value,
        Value::Set(vec![Value::Bulk(b("a")), Value::Bulk(b("b"))])
    );
    let mut out = BytesMut::new();
    write_value(&mut out, &value, Protocol::Resp3);
    assert_eq!(&out[..], b"~2\r\n$1\r\na\r\n$1\r\nb\r\n");
    let mut out = BytesMut::new();
    write_value(&mut out, &value, Protocol::Resp2);
    assert_eq!(&out[..], b"*2\r\n$1\r\na\r\n$1\r\nb\r\n");
}

#[test]
fn delex() {
    assert_eq!(
        parse("DELEX k"),
        single("k", Command::DelEx(Condition::Always))
    );
    assert_eq!(
        parse("DELEX k IFEQ v"),
        single("k", Command::DelEx(Condition::IfEq(b("v"))))
    );
    assert_eq!(
        parse("delex k ifne v"),
        single("k", Command::DelEx(Condition::IfNe(b("v"))))
    );
    assert_eq!(
        parse("DELEX k IFDEQ a"),
        single("k", Command::DelEx(Condition::IfDigestEq(10)))
    );
    assert_eq!(
        parse("DELEX k IFDNE A"),
        single("k", Command::DelEx(Condition::IfDigestNe(10)))
    );
    for line in [
        "DELEX k IFEQ",
        "DELEX k NX v",
        "DELEX k IFEQ v IFNE w",
        "DELEX k IFEQ v x",
    ] {
        assert_eq!(parse(line), err(SYNTAX), "{line}");
    }
    assert_eq!(
        parse("DELEX"),
        err("ERR wrong number of arguments for 'delex' command")
    );
}

#[test]
fn fencing_lock() {
    assert_eq!(
        parse("LOCK.ACQUIRE k me 5000"),
        single(
            "k",
            Command::LockAcquire {
                owner: b("me"),
                lease_ms: 5000
            }
        )
    );
    assert_eq!(
        parse("LOCK.RELEASE k me"),
        single("k", Command::LockRelease { owner: b("me") })
    );
    assert_eq!(parse("LOCK.ACQUIRE k me x"), err(NOT_INT));
    assert_eq!(
        parse("LOCK.ACQUIRE k me 0"),
        err("ERR invalid lease time in 'lock.acquire' command")
    );
    assert_eq!(
        parse("LOCK.ACQUIRE k me -1"),
        err("ERR invalid lease time in 'lock.acquire' command")
    );
}

#[test]
fn arity_errors() {
    for (line, name) in [
        ("GET", "get"),
        ("GET a b", "get"),
        ("Get", "get"),
        ("SET k", "set"),
        ("SETNX k", "setnx"),
        ("DEL", "del"),
        ("EXISTS", "exists"),
        ("MGET", "mget"),
        ("INCR", "incr"),
        ("INCRBY k", "incrby"),
        ("DECR k 1", "decr"),
        ("DECRBY k", "decrby"),
        ("SADD k", "sadd"),
        ("SREM k", "srem"),
        ("SMEMBERS", "smembers"),
        ("SISMEMBER k", "sismember"),
        ("SCARD", "scard"),
        ("DIGEST", "digest"),
        ("LOCK.ACQUIRE k me", "lock.acquire"),
        ("LOCK.RELEASE k", "lock.release"),
        ("TTL", "ttl"),
        ("TTL a b", "ttl"),
        ("PTTL", "pttl"),
        ("TYPE", "type"),
        ("STRLEN a b", "strlen"),
        ("EXPIRE k", "expire"),
        ("PEXPIRE k", "pexpire"),
        ("EXPIREAT k", "expireat"),
        ("PEXPIREAT k", "pexpireat"),
        ("PERSIST", "persist"),
        ("APPEND k", "append"),
        ("APPEND k a b", "append"),
        ("GETDEL", "getdel"),
        ("SETEX k 1", "setex"),
        ("SETEX k 1 v x", "setex"),
        ("PSETEX k 1", "psetex"),
        ("GETSET k", "getset"),
        ("UNLINK", "unlink"),
        ("AUTH", "auth"),
        ("ECHO", "echo"),
        ("PING a b", "ping"),
        ("SELECT", "select"),
        ("DBSIZE x", "dbsize"),
        ("CLIENT", "client"),
        ("CLIENT SETNAME", "client|setname"),
        ("CLIENT GETNAME x", "client|getname"),
        ("CLIENT SETINFO lib-name", "client|setinfo"),
        ("COMMAND COUNT x", "command|count"),
        ("CONFIG GET", "config|get"),
        ("CONFIG SET a", "config|set"),
        ("CONFIG SET a b c", "config|set"),
    ] {
        assert_eq!(
            parse(line),
            err(&format!(
                "ERR wrong number of arguments for '{name}' command"
            )),
            "{line}"
        );
    }
}

#[test]
fn unknown_commands() {
    assert_eq!(
        parse("FOO a b"),
        err("ERR unknown command 'FOO', with args beginning with: 'a' 'b' ")
    );
    assert_eq!(
        parse("foo"),
        err("ERR unknown command 'foo', with args beginning with: ")
    );
    let long = "x".repeat(200);
    let args = vec![b(&long), b(&long), b("more")];
    let Parsed::Error(text) = parse_command(&args) else {
        panic!("unknown command");
    };
    assert_eq!(
        text,
        format!(
            "ERR unknown command '{}', with args beginning with: '{}' ",
            "x".repeat(128),
            "x".repeat(128)
        )
    );
    assert_eq!(
        parse("CLIENT PAUSE 10"),
        err("ERR unknown subcommand 'PAUSE'. Try CLIENT HELP.")
    );
    assert_eq!(
        parse("COMMAND foo"),
        err("ERR unknown subcommand 'foo'. Try COMMAND HELP.")
    );
    assert!(
        matches!(parse("CONFIG REWRITE"), Parsed::Error(e) if e.contains("no configuration file"))
    );
    assert!(matches!(parse_command(&[]), Parsed::Error(_)));
}

#[test]
fn refused_multi_key_commands() {
    for name in [
        "MSET",
        "MSETNX",
        "RENAME",
        "RENAMENX",
        "WATCH",
        "EVAL",
        "EVALSHA",
        "FCALL",
        "SMOVE",
        "SUNIONSTORE",
        "SINTERSTORE",
        "SDIFFSTORE",
        "COPY",
        "ZUNIONSTORE",
        "BITOP",
    ] {
        let Parsed::Error(text) = parse(&format!("{name} a b")) else {
            panic!("{name} must be refused");
        };
        let lower = name.to_ascii_lowercase();
        assert!(
            text.starts_with(&format!("ERR logless does not implement '{lower}': ")),
            "{text}"
        );
        assert!(
            text.contains("every key is its own replicated register"),
            "{text}"
        );
    }
    assert_eq!(
        parse("mset a 1 b 2"),
        err("ERR logless does not implement 'mset': every key is its own replicated register, so a command spanning several keys cannot be atomic")
    );
}

#[test]
fn redis_commands_logless_lacks_are_refused_as_such_and_only_unknown_names_are_unknown() {
    let refused = |line: &str| match parse(line) {
        Parsed::Error(text) => text,
        other => panic!("{line} must be refused, not {other:?}"),
    };
    assert_eq!(
        refused("XADD s * f v"),
        "ERR logless does not implement 'xadd'"
    );
    assert_eq!(
        refused("object encoding k"),
        "ERR logless does not implement 'object'"
    );
    assert_eq!(
        refused("JSON.SET k $ 1"),
        "ERR logless does not implement 'json.set'"
    );
    for (line, reason) in [
        ("SUBSCRIBE ch", "there is no publish/subscribe"),
        ("PUBLISH ch m", "there is no publish/subscribe"),
        ("BLPOP k 0", "nothing waits on a key's changes"),
        ("SCRIPT LOAD x", "a script touching several keys"),
        ("MIGRATE h 1 k 0 1", "not moved between nodes by hand"),
        ("BGSAVE", "no snapshot"),
    ] {
        let text = refused(line);
        let name = line.split(' ').next().unwrap().to_ascii_lowercase();
        assert!(
            text.starts_with(&format!("ERR logless does not implement '{name}': ")),
            "{text}"
        );
        assert!(text.contains(reason), "{text}");
    }
    assert!(refused("HSETT k f v").starts_with("ERR unknown command 'HSETT'"));
    assert!(refused("json").starts_with("ERR unknown command 'json'"));
}

#[test]
fn the_redis_command_list_is_sorted_and_covers_every_command_logless_answers() {
    use logless_redis::table::redis_names::{is_redis_command, REDIS_COMMANDS};
    assert!(
        REDIS_COMMANDS.windows(2).all(|w| w[0] < w[1]),
        "sorted, no repeats"
    );
    for spec in command_names() {
        assert!(
            is_redis_command(spec.name) || spec.name.starts_with("lock."),
            "{} is a Redis command",
            spec.name
        );
    }
}

#[test]
fn local_commands() {
    assert_eq!(parse("PING"), Parsed::Local(Local::Ping(None)));
    assert_eq!(parse("ping hi"), Parsed::Local(Local::Ping(Some(b("hi")))));
    assert_eq!(parse("ECHO hi"), Parsed::Local(Local::Echo(b("hi"))));
    assert_eq!(parse("QUIT"), Parsed::Local(Local::Quit));
    assert_eq!(parse("RESET"), Parsed::Local(Local::Reset));
    assert_eq!(parse("SELECT 0"), Parsed::Local(Local::Select(0)));
    assert_eq!(parse("SELECT x"), err(NOT_INT));
    assert_eq!(parse("DBSIZE"), Parsed::Local(Local::DbSize));
    assert_eq!(parse("INFO"), Parsed::Local(Local::Info(vec![])));
    assert_eq!(
        parse("INFO server clients"),
        Parsed::Local(Local::Info(vec![b("server"), b("clients")]))
    );
    assert_eq!(parse("COMMAND"), Parsed::Local(Local::Command));
    assert_eq!(parse("command count"), Parsed::Local(Local::CommandCount));
    assert_eq!(
        parse("COMMAND DOCS get"),
        Parsed::Local(Local::CommandDocs(vec![b("get")]))
    );
    assert_eq!(
        parse("COMMAND INFO get set"),
        Parsed::Local(Local::CommandInfo(vec![b("get"), b("set")]))
    );
    assert_eq!(
        parse("CONFIG GET maxmemory save"),
        Parsed::Local(Local::ConfigGet(vec![b("maxmemory"), b("save")]))
    );
    assert_eq!(
        parse("CONFIG SET a 1 b 2"),
        Parsed::Local(Local::ConfigSet(vec![(b("a"), b("1")), (b("b"), b("2"))]))
    );
}

#[test]
fn client_commands() {
    assert_eq!(
        parse("CLIENT SETNAME app"),
        Parsed::Local(Local::ClientSetName(b("app")))
    );
    assert_eq!(
        parse_command(&[b("CLIENT"), b("SETNAME"), b("a b")]),
        err("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert_eq!(
        parse_command(&[b("CLIENT"), b("SETNAME"), b("")]),
        Parsed::Local(Local::ClientSetName(b("")))
    );
    assert_eq!(parse("client getname"), Parsed::Local(Local::ClientGetName));
    assert_eq!(
        parse("CLIENT SETINFO LIB-NAME redis-py"),
        Parsed::Local(Local::ClientSetInfo)
    );
    assert_eq!(
        parse("CLIENT SETINFO lib-ver 5.0"),
        Parsed::Local(Local::ClientSetInfo)
    );
    assert_eq!(
        parse("CLIENT SETINFO foo x"),
        err("ERR Unrecognized option 'foo'")
    );
    assert_eq!(parse("CLIENT ID"), Parsed::Local(Local::ClientId));
    assert_eq!(
        parse("CLIENT INFO"),
        Parsed::Local(Local::Admin(logless_redis::table::admin::Admin::ClientInfo))
    );
}

#[test]
fn hello() {
    let hello = |protocol, auth, setname| {
        Parsed::Local(Local::Hello {
            protocol,
            auth,
            setname,
        })
    };
    assert_eq!(parse("HELLO"), hello(None, None, None));
    assert_eq!(parse("HELLO 2"), hello(Some(Protocol::Resp2), None, None));
    assert_eq!(parse("hello 3"), hello(Some(Protocol::Resp3), None, None));
    assert_eq!(
        parse("HELLO 3 AUTH default pw SETNAME app"),
        hello(
            Some(Protocol::Resp3),
            Some((b("default"), b("pw"))),
            Some(b("app"))
        )
    );
    assert_eq!(
        parse("HELLO 4"),
        err("NOPROTO unsupported protocol version")
    );
    assert_eq!(
        parse("HELLO 1"),
        err("NOPROTO unsupported protocol version")
    );
    assert_eq!(
        parse("HELLO x"),
        err("ERR Protocol version is not an integer or out of range")
    );
    assert_eq!(
        parse("HELLO 3 AUTH default"),
        err("ERR Syntax error in HELLO option 'AUTH'")
    );
    assert_eq!(
        parse("HELLO 3 SETNAME"),
        err("ERR Syntax error in HELLO option 'SETNAME'")
    );
    assert_eq!(
        parse("HELLO 3 FOO"),
        err("ERR Syntax error in HELLO option 'FOO'")
    );
}

#[test]
fn command_table() {
    let names: Vec<&str> = command_names().map(|s| s.name).collect();
    for name in [
        "get",
        "set",
        "setnx",
        "del",
        "exists",
        "mget",
        "incr",
        "incrby",
        "decr",
        "decrby",
        "sadd",
        "srem",
        "smembers",
        "sismember",
        "scard",
        "delex",
        "digest",
        "lock.acquire",
        "lock.release",
        "ttl",
        "pttl",
        "type",
        "strlen",
        "expire",
        "pexpire",
        "expireat",
        "pexpireat",
        "persist",
        "append",
        "getdel",
        "setex",
        "psetex",
        "getset",
        "unlink",
        "auth",
        "ping",
        "echo",
        "hello",
        "quit",
        "select",
        "client",
        "command",
        "config",
        "info",
        "dbsize",
    ] {
        assert!(names.contains(&name), "{name} missing");
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "duplicate command names");
    // Every listed command parses into something other than "unknown command".
    for spec in command_names() {
        let argc = usize::try_from(spec.arity.unsigned_abs()).unwrap();
        let mut args = vec![b(spec.name)];
        args.extend((1..argc).map(|_| b("1")));
        if let Parsed::Error(e) = parse_command(&args) {
            assert!(!e.starts_with("ERR unknown command"), "{}: {e}", spec.name);
        }
    }
    let get = find_command(b"GET").unwrap();
    assert_eq!(
        command_info_value(get),
        Value::Array(vec![
            Value::Bulk(b("get")),
            Value::Int(2),
            Value::Set(vec![
                Value::Simple("readonly".into()),
                Value::Simple("fast".into())
            ]),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            Value::Set(vec![]),
            Value::Set(vec![]),
            Value::Array(vec![]),
            Value::Array(vec![]),
        ])
    );
    let del = find_command(b"del").unwrap();
    assert_eq!(
        (del.arity, del.first_key, del.last_key, del.step),
        (-2, 1, -1, 1)
    );
    assert!(find_command(b"mset").is_none());
}

#[test]
fn set_repeated_expiry_options() {
    // Redis 7.4 accepts a repeated EX (or PX, EXAT, PXAT); the last time counts.
    assert_eq!(
        parse("SET k v EX 10 EX 20"),
        set("v", Condition::Always, false, Expiry::AfterMs(20_000))
    );
    assert_eq!(
        parse("SET k v PX 10 NX px 20"),
        set("v", Condition::Nx, false, Expiry::AfterMs(20))
    );
    assert_eq!(
        parse("SET k v PXAT 5 PXAT 6"),
        set("v", Condition::Always, false, Expiry::AtMs(6))
    );
    assert_eq!(
        parse("SET k v EX x EX 1"),
        set("v", Condition::Always, false, Expiry::AfterMs(1000)),
        "only the last time is checked"
    );
    assert_eq!(parse("SET k v EX 1 EX x"), err(NOT_INT));
    assert_eq!(parse("SET k v EX 1 EX 0"), err(BAD_EXPIRE));
    for line in [
        "SET k v EX 1 PX 1",
        "SET k v PX 1 EX 1",
        "SET k v EX 1 EXAT 1",
        "SET k v PXAT 1 PX 1",
        "SET k v EX 1 EX",
        "SET k v KEEPTTL PX 1 PX 2",
    ] {
        assert_eq!(parse(line), err(SYNTAX), "{line}");
    }
}

#[test]
fn ttl_type_strlen_persist_getdel_append() {
    assert_eq!(parse("TTL k"), single("k", Command::Ttl));
    assert_eq!(parse("pttl k"), single("k", Command::PTtl));
    assert_eq!(parse("TYPE k"), single("k", Command::Type));
    assert_eq!(parse("STRLEN k"), single("k", Command::StrLen));
    assert_eq!(parse("PERSIST k"), single("k", Command::Persist));
    assert_eq!(parse("GETDEL k"), single("k", Command::GetDel));
    assert_eq!(parse("APPEND k xy"), single("k", Command::Append(b("xy"))));
    assert_eq!(
        reply_to_value(&Reply::Status("string"), ReplyShape::Plain),
        Value::Simple("string".into())
    );
    let mut out = BytesMut::new();
    write_value(
        &mut out,
        &reply_to_value(&Reply::Status("none"), ReplyShape::Plain),
        Protocol::Resp2,
    );
    assert_eq!(&out[..], b"+none\r\n");
}

fn expire(kind: ExpireKind, time: i64, nx: bool, xx: bool, gt: bool, lt: bool) -> Parsed {
    single(
        "k",
        Command::Expire(ExpireArgs {
            kind,
            time,
            flags: ExpireFlags { nx, xx, gt, lt },
        }),
    )
}

#[test]
fn expire_family() {
    use ExpireKind::*;
    assert_eq!(
        parse("EXPIRE k 10"),
        expire(Expire, 10, false, false, false, false)
    );
    assert_eq!(
        parse("pexpire k -5"),
        expire(PExpire, -5, false, false, false, false)
    );
    assert_eq!(
        parse("EXPIREAT k 0"),
        expire(ExpireAt, 0, false, false, false, false)
    );
    assert_eq!(
        parse("PEXPIREAT k 1700000000000 nx"),
        expire(PExpireAt, 1_700_000_000_000, true, false, false, false)
    );
    assert_eq!(
        parse("EXPIRE k 1 XX GT"),
        expire(Expire, 1, false, true, true, false)
    );
    assert_eq!(
        parse("EXPIRE k 1 lt xx LT"),
        expire(Expire, 1, false, true, false, true)
    );
    assert_eq!(
        parse("EXPIRE k 1 NX NX"),
        expire(Expire, 1, true, false, false, false)
    );
    // Times too large for milliseconds are the register's to refuse (with the stamp).
    assert_eq!(
        parse("EXPIRE k 9223372036854775807"),
        expire(Expire, i64::MAX, false, false, false, false)
    );
    let nx_err = "ERR NX and XX, GT or LT options at the same time are not compatible";
    let gtlt_err = "ERR GT and LT options at the same time are not compatible";
    for (line, text) in [
        ("EXPIRE k 1 NX XX", nx_err),
        ("EXPIRE k 1 GT NX", nx_err),
        ("PEXPIRE k 1 NX LT", nx_err),
        ("EXPIRE k 1 GT LT", gtlt_err),
        ("EXPIREAT k 1 lt gt xx", gtlt_err),
        ("EXPIRE k 1 FOO", "ERR Unsupported option FOO"),
        ("EXPIRE k 1 NX foo", "ERR Unsupported option foo"),
        // The options are checked before the time.
        ("EXPIRE k x FOO", "ERR Unsupported option FOO"),
        ("EXPIRE k x NX GT", nx_err),
        ("EXPIRE k x", NOT_INT),
        ("PEXPIRE k 1.5", NOT_INT),
        ("EXPIRE k 99999999999999999999", NOT_INT),
    ] {
        assert_eq!(parse(line), err(text), "{line}");
    }
    assert_eq!(
        reply_to_value(
            &Reply::Error(CommandError::InvalidExpireTimeIn("expire")),
            ReplyShape::Plain
        ),
        Value::Error("ERR invalid expire time in 'expire' command".into())
    );
}

#[test]
fn setex_psetex_getset_unlink_aliases() {
    let setex = |expiry, name| Parsed::Single {
        key: b("k"),
        command: Command::Set(SetArgs {
            value: b("v"),
            condition: Condition::Always,
            get: false,
            expiry,
        }),
        shape: ReplyShape::ExpireErrorsOf(name),
    };
    assert_eq!(
        parse("SETEX k 10 v"),
        setex(Expiry::AfterMs(10_000), "setex")
    );
    assert_eq!(parse("psetex k 10 v"), setex(Expiry::AfterMs(10), "psetex"));
    assert_eq!(
        parse("SETEX k 9223372036854775 v"),
        setex(Expiry::AfterMs(9_223_372_036_854_775_000), "setex")
    );
    for line in ["SETEX k 0 v", "SETEX k -1 v", "SETEX k 9223372036854776 v"] {
        assert_eq!(
            parse(line),
            err("ERR invalid expire time in 'setex' command"),
            "{line}"
        );
    }
    for line in ["PSETEX k 0 v", "PSETEX k -10 v"] {
        assert_eq!(
            parse(line),
            err("ERR invalid expire time in 'psetex' command"),
            "{line}"
        );
    }
    assert_eq!(parse("SETEX k x v"), err(NOT_INT));
    assert_eq!(parse("PSETEX k 1.0 v"), err(NOT_INT));
    // An expiry that overflows at the stamp is reported in the alias's words.
    assert_eq!(
        reply_to_value(
            &Reply::Error(CommandError::InvalidExpireTime),
            ReplyShape::ExpireErrorsOf("psetex")
        ),
        Value::Error("ERR invalid expire time in 'psetex' command".into())
    );
    assert_eq!(
        reply_to_value(&Reply::Ok, ReplyShape::ExpireErrorsOf("setex")),
        Value::Simple("OK".into())
    );
    assert_eq!(
        reply_to_value(
            &Reply::Error(CommandError::WrongType),
            ReplyShape::ExpireErrorsOf("setex")
        ),
        Value::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
    assert_eq!(
        parse("GETSET k v"),
        set("v", Condition::Always, true, Expiry::Clear)
    );
    assert_eq!(parse("UNLINK k"), single("k", Command::Del));
    assert_eq!(
        parse("unlink a b"),
        Parsed::Multi {
            parts: vec![(b("a"), Command::Del), (b("b"), Command::Del)],
            combine: Combine::Sum
        }
    );
    let unlink = find_command(b"UNLINK").unwrap();
    assert_eq!(
        (unlink.arity, unlink.first_key, unlink.last_key, unlink.step),
        (-2, 1, -1, 1)
    );
    for (name, arity) in [("setex", 4), ("psetex", 4), ("getset", 3)] {
        let spec = find_command(name.as_bytes()).unwrap();
        assert_eq!(
            (spec.arity, spec.first_key, spec.last_key, spec.step),
            (arity, 1, 1, 1),
            "{name}"
        );
        assert!(spec.flags.contains(&"write"), "{name}");
    }
}

#[test]
fn command_flags_of_the_new_commands() {
    for name in ["ttl", "pttl", "type", "strlen"] {
        assert_eq!(
            find_command(name.as_bytes()).unwrap().flags,
            &["readonly", "fast"],
            "{name}"
        );
    }
    for name in [
        "expire",
        "pexpire",
        "expireat",
        "pexpireat",
        "persist",
        "getdel",
        "append",
    ] {
        let spec = find_command(name.as_bytes()).unwrap();
        assert!(spec.flags.contains(&"write"), "{name}");
        assert!(!spec.flags.contains(&"readonly"), "{name}");
    }
}

#[test]
fn auth() {
    let auth = |user: Option<&str>, password: &str| {
        Parsed::Local(Local::Auth {
            user: user.map(|u| Bytes::copy_from_slice(u.as_bytes())),
            password: Bytes::copy_from_slice(password.as_bytes()),
        })
    };
    assert_eq!(parse("AUTH secret"), auth(None, "secret"));
    assert_eq!(
        parse("AUTH default anything"),
        auth(Some("default"), "anything")
    );
    assert_eq!(parse("AUTH alice pw"), auth(Some("alice"), "pw"));
    assert_eq!(parse("AUTH default pw extra"), err(SYNTAX));
    let spec = find_command(b"auth").unwrap();
    assert_eq!(
        (spec.arity, spec.first_key, spec.last_key, spec.step),
        (-2, 0, 0, 0)
    );
    assert!(spec.flags.contains(&"no_auth"));
}
