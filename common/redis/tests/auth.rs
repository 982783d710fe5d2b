//! Client authentication without a socket: what a session answers before and after it logs
//! in, per user's keys and commands, with Redis's texts.
use std::sync::Arc;

use bytes::Bytes;
use logless_redis::acl::{
    glob_match, hash_password, Access, Acl, User, AUTH_WITHOUT_PASSWORD, NOAUTH, NOAUTH_HELLO,
    NOPERM_KEY, WRONGPASS,
};
use logless_redis::resp::{Protocol, Value};
use logless_redis::session::{Session, Step};

mod common;
use common::{bulk, error, handle, reply, simple};

fn ok() -> Value {
    simple("OK")
}

/// Whether the request went to the engines (it was allowed).
fn submitted(session: &mut Session, words: &[&str]) -> bool {
    matches!(handle(session, words), Step::One { .. } | Step::Many { .. })
}

fn user(name: &str, password: &str, keys: &[&str], access: Access) -> User {
    User {
        name: name.into(),
        enabled: true,
        nopass: false,
        passwords: vec![hash_password(password.as_bytes())],
        keys: keys.iter().map(|k| Bytes::from(k.to_string())).collect(),
        access,
    }
}

/// `requirepass secret`, a read-only user `reader` on `app:*` and a writer `admin` on all keys.
fn acl() -> Arc<Acl> {
    Arc::new(
        Acl::new(vec![
            user("default", "secret", &["*"], Access::All),
            user("reader", "r-pass", &["app:*"], Access::ReadOnly),
            user("admin", "a-pass", &["*"], Access::All),
        ])
        .unwrap(),
    )
}

fn session() -> Session {
    Session::new(7).with_acl(acl())
}

#[test]
fn redis_glob_rules() {
    for (pattern, text, expected) in [
        ("*", "", true),
        ("*", "anything", true),
        ("app:*", "app:1", true),
        ("app:*", "ap", false),
        ("a?c", "abc", true),
        ("a?c", "ac", false),
        ("h[ae]llo", "hallo", true),
        ("h[ae]llo", "hillo", false),
        ("h[^e]llo", "hallo", true),
        ("h[^e]llo", "hello", false),
        ("h[a-c]llo", "hbllo", true),
        ("h[a-c]llo", "hdllo", false),
        ("a\\*b", "a*b", true),
        ("a\\*b", "axb", false),
        ("*a*b*c", "xxaxxbxxc", true),
        ("*a*b*c", "xxaxxcxxb", false),
        ("App:*", "app:1", false),
        ("a\\", "a", false),
    ] {
        assert_eq!(
            glob_match(pattern.as_bytes(), text.as_bytes()),
            expected,
            "{pattern} on {text}"
        );
    }
    // No exponential backtracking.
    let text = "a".repeat(10_000);
    assert!(!glob_match("*a*a*a*a*a*a*b".as_bytes(), text.as_bytes()));
}

#[test]
fn without_passwords_every_connection_is_the_default_user() {
    let mut session = Session::new(1);
    assert_eq!(session.user(), Some("default"));
    assert!(submitted(&mut session, &["GET", "k"]));
    assert_eq!(
        reply(&mut session, &["AUTH", "anything"]),
        error(AUTH_WITHOUT_PASSWORD)
    );
    assert_eq!(reply(&mut session, &["AUTH", "default", "x"]), ok());
    assert_eq!(
        reply(&mut session, &["AUTH", "alice", "x"]),
        error(WRONGPASS)
    );
    assert_eq!(reply(&mut session, &["ACL", "WHOAMI"]), bulk("default"));
    assert_eq!(
        reply(&mut session, &["ACL", "LIST"]),
        Value::Array(vec![bulk("user default on nopass ~* resetchannels +@all")])
    );
}

#[test]
fn before_logging_in_only_auth_hello_ping_quit_and_reset_answer() {
    let mut session = session();
    assert_eq!(session.user(), None);
    for request in [
        &["GET", "k"][..],
        &["SET", "k", "v"],
        &["MULTI"],
        &["EXEC"],
        &["CLIENT", "ID"],
        &["INFO"],
        &["CONFIG", "GET", "*"],
        &["ACL", "WHOAMI"],
        &["ACL", "LIST"],
        &["COMMAND"],
        &["ECHO", "x"],
        &["NOSUCHCOMMAND"],
        &["select", "0"],
        &["DBSIZE"],
    ] {
        assert_eq!(reply(&mut session, request), error(NOAUTH), "{request:?}");
    }
    assert_eq!(reply(&mut session, &["PING"]), simple("PONG"));
    assert_eq!(reply(&mut session, &["HELLO", "3"]), error(NOAUTH_HELLO));
    assert_eq!(session.protocol(), Protocol::Resp2);
    assert_eq!(reply(&mut session, &["RESET"]), simple("RESET"));
    assert_eq!(reply(&mut session, &["QUIT"]), ok());
    assert!(session.is_closing());
}

#[test]
fn auth_with_the_password_logs_in_and_a_wrong_one_does_not() {
    let mut session = session();
    assert_eq!(reply(&mut session, &["AUTH", "wrong"]), error(WRONGPASS));
    assert_eq!(
        reply(&mut session, &["AUTH", "default", "wrong"]),
        error(WRONGPASS)
    );
    assert_eq!(
        reply(&mut session, &["AUTH", "nobody", "secret"]),
        error(WRONGPASS)
    );
    assert_eq!(
        reply(&mut session, &["AUTH", "DEFAULT", "secret"]),
        error(WRONGPASS),
        "user names are case-sensitive"
    );
    assert_eq!(session.auth_failures(), 4);
    assert_eq!(reply(&mut session, &["GET", "k"]), error(NOAUTH));
    assert_eq!(reply(&mut session, &["AUTH", "secret"]), ok());
    assert_eq!(session.user(), Some("default"));
    assert!(submitted(&mut session, &["SET", "k", "v"]));
    // A failed AUTH leaves the connection logged in as it was.
    assert_eq!(
        reply(&mut session, &["AUTH", "admin", "x"]),
        error(WRONGPASS)
    );
    assert_eq!(session.user(), Some("default"));
    assert!(submitted(&mut session, &["GET", "k"]));
    // RESET logs out: the default user needs a password.
    reply(&mut session, &["RESET"]);
    assert_eq!(session.user(), None);
    assert_eq!(reply(&mut session, &["GET", "k"]), error(NOAUTH));
}

#[test]
fn hello_auth_logs_in_and_switches_protocol_only_with_the_right_password() {
    let mut session = session();
    assert_eq!(
        reply(&mut session, &["HELLO", "3", "AUTH", "default", "wrong"]),
        error(WRONGPASS)
    );
    assert_eq!(session.protocol(), Protocol::Resp2);
    assert_eq!(session.user(), None);
    let Value::Map(fields) = reply(&mut session, &["HELLO", "3", "AUTH", "admin", "a-pass"]) else {
        panic!("HELLO answers a map");
    };
    assert!(fields.contains(&(bulk("proto"), Value::Int(3))));
    assert_eq!(session.protocol(), Protocol::Resp3);
    assert_eq!(session.user(), Some("admin"));
    assert_eq!(reply(&mut session, &["ACL", "WHOAMI"]), bulk("admin"));
    assert!(matches!(
        reply(&mut session, &["HELLO", "2"]),
        Value::Map(_)
    ));
}

#[test]
fn a_read_only_user_reads_its_keys_only() {
    let mut session = session();
    assert_eq!(reply(&mut session, &["AUTH", "reader", "r-pass"]), ok());
    assert!(submitted(&mut session, &["GET", "app:1"]));
    assert!(submitted(&mut session, &["MGET", "app:1", "app:2"]));
    assert_eq!(reply(&mut session, &["GET", "other"]), error(NOPERM_KEY));
    assert_eq!(
        reply(&mut session, &["MGET", "app:1", "other"]),
        error(NOPERM_KEY)
    );
    let no_command = |name: &str| {
        error(&format!(
            "NOPERM User reader has no permissions to run the '{name}' command"
        ))
    };
    assert_eq!(
        reply(&mut session, &["SET", "app:1", "v"]),
        no_command("set")
    );
    assert_eq!(reply(&mut session, &["DEL", "app:1"]), no_command("del"));
    assert_eq!(
        reply(&mut session, &["CONFIG", "GET", "*"]),
        no_command("config")
    );
    assert_eq!(reply(&mut session, &["ACL", "LIST"]), no_command("acl"));
    assert_eq!(reply(&mut session, &["ACL", "USERS"]), no_command("acl"));
    assert_eq!(reply(&mut session, &["ACL", "WHOAMI"]), bulk("reader"));
    assert_eq!(reply(&mut session, &["PING"]), simple("PONG"));
    assert_eq!(reply(&mut session, &["CLIENT", "ID"]), Value::Int(7));
    assert!(matches!(handle(&mut session, &["INFO"]), Step::Node(_)));
    assert!(matches!(handle(&mut session, &["DBSIZE"]), Step::Node(_)));
    assert!(submitted(&mut session, &["EXISTS", "app:1", "app:2"]));
    // Commands over the whole keyspace need access to every key (FLUSHALL would delete keys
    // outside the user's patterns, SCAN and KEYS show their names).
    for command in [
        &["SCAN", "0"][..],
        &["KEYS", "*"],
        &["RANDOMKEY"],
        &["FLUSHALL"],
    ] {
        assert_eq!(
            reply(&mut session, command),
            error(NOPERM_KEY),
            "{command:?}"
        );
    }
    assert!(matches!(handle(&mut session, &["TIME"]), Step::Node(_)));
    assert!(matches!(
        handle(&mut session, &["CLIENT", "LIST"]),
        Step::Node(_)
    ));
    assert_eq!(
        reply(&mut session, &["CLIENT", "KILL", "ID", "1"]),
        no_command("client")
    );
    // A refused command aborts the transaction it was sent in.
    assert_eq!(reply(&mut session, &["MULTI"]), ok());
    assert_eq!(reply(&mut session, &["GET", "app:1"]), simple("QUEUED"));
    assert_eq!(reply(&mut session, &["GET", "secret:1"]), error(NOPERM_KEY));
    assert_eq!(
        reply(&mut session, &["EXEC"]),
        error("EXECABORT Transaction discarded because of previous errors.")
    );
}

#[test]
fn a_disabled_user_cannot_log_in_and_nopass_takes_any_password() {
    let mut off = user("off", "pw", &["*"], Access::All);
    off.enabled = false;
    let mut guest = user("guest", "unused", &["guest:*"], Access::All);
    guest.nopass = true;
    guest.passwords.clear();
    let acl = Arc::new(
        Acl::new(vec![
            user("default", "secret", &["*"], Access::All),
            off,
            guest,
        ])
        .unwrap(),
    );
    let mut session = Session::new(1).with_acl(acl.clone());
    assert_eq!(
        reply(&mut session, &["AUTH", "off", "pw"]),
        error(WRONGPASS)
    );
    assert_eq!(reply(&mut session, &["AUTH", "guest", "x"]), ok());
    assert!(submitted(&mut session, &["SET", "guest:1", "v"]));
    assert_eq!(reply(&mut session, &["SET", "k", "v"]), error(NOPERM_KEY));
    assert_eq!(
        reply(&mut session, &["ACL", "USERS"]),
        Value::Array(vec![bulk("default"), bulk("guest"), bulk("off")])
    );
    let Value::Array(lines) = reply(&mut session, &["ACL", "LIST"]) else {
        panic!("ACL LIST answers an array");
    };
    let hash: String = hash_password(b"pw")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(lines.contains(&bulk(&format!(
        "user off off #{hash} ~* resetchannels +@all"
    ))));
    assert!(!format!("{lines:?}").contains("secret"));
}

#[test]
fn acl_cat_and_bad_acl_requests() {
    let mut session = Session::new(1);
    assert_eq!(
        reply(&mut session, &["ACL", "CAT"]),
        Value::Array(vec![bulk("read"), bulk("write")])
    );
    let Value::Array(reads) = reply(&mut session, &["ACL", "CAT", "read"]) else {
        panic!("ACL CAT read answers an array");
    };
    assert!(reads.contains(&bulk("get")) && !reads.contains(&bulk("set")));
    assert_eq!(
        reply(&mut session, &["ACL", "CAT", "nope"]),
        error("ERR Unknown category 'nope'")
    );
    assert!(matches!(
        reply(&mut session, &["ACL", "SETUSER", "x", "on"]),
        Value::Error(e) if e.starts_with("ERR unknown subcommand")
    ));
    assert_eq!(
        reply(&mut session, &["ACL", "WHOAMI", "extra"]),
        error("ERR wrong number of arguments for 'acl|whoami' command")
    );
}

#[test]
fn users_are_checked_when_the_acl_is_built() {
    let twice = Acl::new(vec![
        user("a", "x", &["*"], Access::All),
        user("a", "y", &["*"], Access::All),
    ]);
    assert!(twice.unwrap_err().contains("defined twice"));
    assert!(Acl::new(vec![user("a b", "x", &["*"], Access::All)]).is_err());
    assert!(Acl::new(vec![user("", "x", &["*"], Access::All)]).is_err());
    // Users without a default one: the default user stays open, as in Redis.
    let acl = Acl::new(vec![user("a", "x", &["*"], Access::All)]).unwrap();
    assert!(!acl.requires_auth());
    assert!(acl.requires_auth() != acl.default_takes_any_password());
}
