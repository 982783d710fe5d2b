//! The admin and inspection commands' parsers and the pieces of them that need no node: SCAN,
//! KEYS, RANDOMKEY, FLUSHALL, TIME, CLIENT LIST/KILL, CONFIG RESETSTAT, and the CONFIG
//! parameters logless ignores.
use bytes::Bytes;
use logless_redis::session::{NodeQuery, Session, Step};
use logless_redis::table::admin::{
    config_name_matches, is_ignored_config, unknown_config, Admin, ClientFilter, ClientView,
    KeyScan, IGNORED_CONFIG,
};
use logless_redis::table::{parse_command, Local, Parsed};

fn parse(line: &str) -> Parsed {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect();
    parse_command(&args)
}

fn admin(query: Admin) -> Parsed {
    Parsed::Local(Local::Admin(query))
}

fn err(text: &str) -> Parsed {
    Parsed::Error(text.to_owned())
}

fn scan(
    cursor: u64,
    pattern: Option<&str>,
    count: usize,
    type_name: Option<&'static str>,
) -> Parsed {
    admin(Admin::Scan(KeyScan {
        cursor,
        pattern: pattern.map(|p| Bytes::copy_from_slice(p.as_bytes())),
        count,
        type_name,
        voted: false,
    }))
}

#[test]
fn scan_takes_match_count_and_type_in_any_order() {
    assert_eq!(parse("SCAN 0"), scan(0, None, 10, None));
    assert_eq!(
        parse("scan 18446744073709551615 MATCH user:* COUNT 100 TYPE hash"),
        scan(u64::MAX, Some("user:*"), 100, Some("hash"))
    );
    assert_eq!(
        parse("SCAN 7 type ZSET match type"),
        scan(7, Some("type"), 10, Some("zset"))
    );
    assert_eq!(parse("SCAN 0 TYPE lock"), scan(0, None, 10, Some("lock")));
    assert_eq!(parse("SCAN -1"), err("ERR invalid cursor"));
    assert_eq!(parse("SCAN x"), err("ERR invalid cursor"));
    assert_eq!(parse("SCAN 0 COUNT 0"), err("ERR syntax error"));
    assert_eq!(
        parse("SCAN 0 COUNT x"),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(parse("SCAN 0 MATCH"), err("ERR syntax error"));
    assert_eq!(parse("SCAN 0 NOVALUES"), err("ERR syntax error"));
    assert_eq!(
        parse("SCAN 0 TYPE widget"),
        err("ERR unknown type name 'widget'")
    );
    assert_eq!(
        parse("SCAN"),
        err("ERR wrong number of arguments for 'scan' command")
    );
}

#[test]
fn keys_randomkey_flush_and_time() {
    assert_eq!(
        parse("KEYS a*"),
        admin(Admin::Keys(Bytes::from_static(b"a*")))
    );
    assert_eq!(
        parse("KEYS"),
        err("ERR wrong number of arguments for 'keys' command")
    );
    assert_eq!(parse("RANDOMKEY"), admin(Admin::RandomKey));
    for line in ["FLUSHALL", "flushdb", "FLUSHALL ASYNC", "FLUSHDB sync"] {
        assert_eq!(parse(line), admin(Admin::Flush), "{line}");
    }
    assert_eq!(parse("FLUSHALL LATER"), err("ERR syntax error"));
    assert_eq!(parse("FLUSHALL SYNC ASYNC"), err("ERR syntax error"));
    assert_eq!(parse("TIME"), admin(Admin::Time));
    assert_eq!(parse("CONFIG RESETSTAT"), admin(Admin::ConfigResetStat));
    assert_eq!(
        parse("CONFIG RESETSTAT x"),
        err("ERR wrong number of arguments for 'config|resetstat' command")
    );
}

#[test]
fn client_list_and_kill_filters() {
    assert_eq!(
        parse("CLIENT LIST"),
        admin(Admin::ClientList(ClientFilter::default()))
    );
    assert_eq!(
        parse("CLIENT LIST TYPE pubsub ID 3 4"),
        admin(Admin::ClientList(ClientFilter {
            ids: vec![3, 4],
            only_normal: Some(false),
            ..ClientFilter::default()
        }))
    );
    assert_eq!(parse("CLIENT LIST ID 0"), err("ERR Invalid client ID"));
    assert_eq!(
        parse("CLIENT LIST TYPE odd"),
        err("ERR Unknown client type 'odd'")
    );
    assert_eq!(
        parse("CLIENT KILL 127.0.0.1:5000"),
        admin(Admin::ClientKill {
            filter: ClientFilter {
                addr: Some(Bytes::from_static(b"127.0.0.1:5000")),
                ..ClientFilter::default()
            },
            old_form: true,
        })
    );
    assert_eq!(
        parse("CLIENT KILL ID 9 SKIPME no USER default MAXAGE 5 LADDR 127.0.0.1:7379"),
        admin(Admin::ClientKill {
            filter: ClientFilter {
                ids: vec![9],
                user: Some(Bytes::from_static(b"default")),
                older_than_s: Some(5),
                laddr: Some(Bytes::from_static(b"127.0.0.1:7379")),
                skip_me: false,
                ..ClientFilter::default()
            },
            old_form: false,
        })
    );
    assert_eq!(
        parse("CLIENT KILL ID x"),
        err("ERR client-id should be greater than 0")
    );
    assert_eq!(parse("CLIENT KILL SKIPME maybe"), err("ERR syntax error"));
    assert_eq!(parse("CLIENT KILL ID 1 ADDR"), err("ERR syntax error"));
    assert_eq!(parse("CLIENT KILL COLOUR red"), err("ERR syntax error"));
    assert_eq!(
        parse("CLIENT KILL"),
        err("ERR wrong number of arguments for 'client|kill' command")
    );
}

fn view(id: u64, addr: &str, age_s: u64) -> ClientView {
    ClientView {
        id,
        addr: addr.to_owned(),
        laddr: "127.0.0.1:7379".to_owned(),
        name: String::new(),
        age_s,
        idle_s: 0,
        cmd: "get".to_owned(),
        resp: 2,
        multi: None,
        user: "default".to_owned(),
    }
}

#[test]
fn a_filter_matches_every_condition_it_names() {
    let a = view(1, "127.0.0.1:5001", 10);
    let b = view(2, "127.0.0.1:5002", 1);
    let all = ClientFilter::default();
    assert!(all.matches(&a, 1) && all.matches(&b, 1));
    let skip_me = ClientFilter {
        skip_me: true,
        ..ClientFilter::default()
    };
    assert!(!skip_me.matches(&a, 1) && skip_me.matches(&b, 1));
    let by_addr = ClientFilter {
        addr: Some(Bytes::from_static(b"127.0.0.1:5002")),
        ..ClientFilter::default()
    };
    assert!(!by_addr.matches(&a, 9) && by_addr.matches(&b, 9));
    let by_age = ClientFilter {
        older_than_s: Some(5),
        ..ClientFilter::default()
    };
    assert!(by_age.matches(&a, 9) && !by_age.matches(&b, 9));
    let other_user = ClientFilter {
        user: Some(Bytes::from_static(b"alice")),
        ..ClientFilter::default()
    };
    assert!(!other_user.matches(&a, 9));
    let alice = ClientView {
        user: "alice".to_owned(),
        ..view(3, "127.0.0.1:5003", 1)
    };
    assert!(other_user.matches(&alice, 9));
    assert!(alice.line().contains(" user=alice "), "{}", alice.line());
    let pubsub = ClientFilter {
        only_normal: Some(false),
        ..ClientFilter::default()
    };
    assert!(!pubsub.matches(&a, 9));
    let by_id = ClientFilter {
        ids: vec![2, 3],
        ..ClientFilter::default()
    };
    assert!(!by_id.matches(&a, 9) && by_id.matches(&b, 9));
}

#[test]
fn a_client_line_has_redis_fields() {
    let mut client = view(7, "127.0.0.1:5001", 3);
    client.name = "worker".into();
    client.multi = Some(2);
    client.resp = 3;
    let line = client.line();
    assert!(line.starts_with("id=7 addr=127.0.0.1:5001 laddr=127.0.0.1:7379 fd=-1 name=worker age=3 idle=0 flags=x db=0 "), "{line}");
    assert!(line.contains(" multi=2 "), "{line}");
    assert!(line.contains(" cmd=get user=default "), "{line}");
    assert!(line.contains(" resp=3 "), "{line}");
    assert!(line.ends_with('\n'));
    // Every field is `name=value`, as clients parse it.
    assert!(
        line.trim_end().split(' ').all(|f| f.contains('=')),
        "{line}"
    );
}

#[test]
fn config_names_match_globs_ignoring_case_and_the_ignored_list_is_clean() {
    assert!(config_name_matches(b"*", "maxclients"));
    assert!(config_name_matches(b"MAX*", "maxclients"));
    assert!(config_name_matches(
        b"hash-max-*-entries",
        "hash-max-listpack-entries"
    ));
    assert!(config_name_matches(b"[hz]set-*", "zset-max-listpack-value"));
    assert!(!config_name_matches(b"max", "maxclients"));
    assert!(is_ignored_config(b"SAVE"));
    assert!(is_ignored_config(b"hash-max-listpack-entries"));
    assert!(!is_ignored_config(b"proto-max-bulk-len"));
    assert!(IGNORED_CONFIG.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
    assert_eq!(
        unknown_config(b"no-such"),
        "ERR Unknown option or number of arguments for CONFIG SET - 'no-such'"
    );
}

/// VOTED, a logless extension a ring's data mover uses, lists dead keys too.
#[test]
fn scan_takes_voted() {
    let voted = |cursor, count| {
        admin(Admin::Scan(KeyScan {
            cursor,
            pattern: None,
            count,
            type_name: None,
            voted: true,
        }))
    };
    assert_eq!(parse("SCAN 5 COUNT 256 VOTED"), voted(5, 256));
    assert_eq!(parse("scan 0 voted count 3"), voted(0, 3));
}

#[test]
fn a_session_leaves_admin_commands_to_the_node() {
    let mut session = Session::new(1);
    let args: Vec<Bytes> = ["SCAN", "0"]
        .iter()
        .map(|s| Bytes::from_static(s.as_bytes()))
        .collect();
    assert_eq!(
        session.handle(&args),
        Step::Node(NodeQuery::Admin(Admin::Scan(KeyScan {
            cursor: 0,
            pattern: None,
            count: 10,
            type_name: None,
            voted: false,
        })))
    );
}

#[test]
fn the_docs_list_every_ignored_config_parameter() {
    let docs = include_str!("../../../docs/config.md");
    for (name, _) in IGNORED_CONFIG {
        assert!(
            docs.contains(&format!("`{name}`")),
            "docs/config.md lists {name}"
        );
    }
}

/// The glob SCAN, KEYS and CONFIG GET match with follows Redis's `stringmatchlen` on its edge
/// cases.
#[test]
fn globs_follow_redis_on_edge_cases() {
    use logless_commands::glob::Glob;
    let m = |pattern: &str, text: &str| Glob::new(pattern.as_bytes()).matches(text.as_bytes());
    assert!(m("a\\", "a\\"), "a trailing backslash is literal");
    assert!(
        m("[a-]", "]"),
        "[a-] ranges up to ']' and the class runs on"
    );
    assert!(
        !m("[]a", "a") && !m("[]a", "]a"),
        "[] is an empty class: it matches nothing"
    );
    assert!(m("[\\-]", "-") && !m("[\\-]", "\\"));
    assert!(
        m("[^]]x", "a]x"),
        "[^] is an empty negated class: any byte, then ']'"
    );
    assert!(m("user:[0-9]*", "user:7abc") && !m("user:[0-9]*", "user:x"));
    assert!(m("\\?", "?") && !m("\\?", "a"));
    assert!(!m("A", "a"), "case matters in KEYS and SCAN");
}
