use bytes::{BufMut, Bytes, BytesMut};
use logless_redis::resp::{
    parse_request, write_request, write_value, ParseLimits, Protocol, ProtocolError, Value,
};
use proptest::prelude::*;

fn parse(input: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    parse_request(&mut BytesMut::from(input), &ParseLimits::default())
}

fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

fn encode(args: &[Bytes]) -> BytesMut {
    let mut out = BytesMut::new();
    write_request(&mut out, args);
    out
}

#[test]
fn a_request_is_written_as_a_multibulk_array_of_bulk_strings() {
    let mut out = BytesMut::new();
    write_request(&mut out, &["SET", "k", ""]);
    assert_eq!(&out[..], b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
}

#[test]
fn multibulk_round_trip_leaves_the_rest() {
    let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n"[..]);
    let limits = ParseLimits::default();
    assert_eq!(
        parse_request(&mut buf, &limits).unwrap(),
        Some(args(&["GET", "k"]))
    );
    assert_eq!(
        parse_request(&mut buf, &limits).unwrap(),
        Some(args(&["PING"]))
    );
    assert!(buf.is_empty());
    assert_eq!(parse_request(&mut buf, &limits).unwrap(), None);
}

#[test]
fn multibulk_binary_and_empty_args() {
    assert_eq!(
        parse(b"*3\r\n$0\r\n\r\n$4\r\na\r\nb\r\n$1\r\n\x00\r\n").unwrap(),
        Some(vec![
            Bytes::new(),
            Bytes::from_static(b"a\r\nb"),
            Bytes::from_static(b"\x00")
        ])
    );
}

#[test]
fn empty_multibulk_is_an_empty_request() {
    for input in [&b"*0\r\n"[..], b"*-1\r\n"] {
        let mut buf = BytesMut::from(input);
        assert_eq!(
            parse_request(&mut buf, &ParseLimits::default()).unwrap(),
            Some(vec![])
        );
        assert!(buf.is_empty());
    }
}

#[test]
fn inline_requests() {
    assert_eq!(
        parse(b"SET k  v\r\n").unwrap(),
        Some(args(&["SET", "k", "v"]))
    );
    assert_eq!(parse(b"PING\n").unwrap(), Some(args(&["PING"])));
    assert_eq!(parse(b"\t GET\tk \n").unwrap(), Some(args(&["GET", "k"])));
    assert_eq!(parse(b"\r\n").unwrap(), Some(vec![]));
    assert_eq!(parse(b"   \n").unwrap(), Some(vec![]));
    assert_eq!(parse(b"PING").unwrap(), None);
}

#[test]
fn inline_quoting() {
    assert_eq!(
        parse(b"SET \"a b\" 'c d'\r\n").unwrap(),
        Some(args(&["SET", "a b", "c d"]))
    );
    assert_eq!(
        parse(b"SET k \"\\x41\\n\\t\\\"\\\\\\xZZ\"\n").unwrap(),
        Some(vec![
            Bytes::from_static(b"SET"),
            Bytes::from_static(b"k"),
            Bytes::from_static(b"A\n\t\"\\xZZ"),
        ])
    );
    assert_eq!(
        parse(b"x 'it\\'s' foo\"bar\" \"\"\n").unwrap(),
        Some(args(&["x", "it's", "foobar", ""]))
    );
}

#[test]
fn inline_unbalanced_quotes() {
    for input in [
        &b"SET \"a b\n"[..],
        b"SET 'a\n",
        b"SET \"a\"b\n",
        b"SET 'a'b\n",
        b"SET \"a\\\n",
    ] {
        let mut buf = BytesMut::from(input);
        assert_eq!(
            parse_request(&mut buf, &ParseLimits::default()),
            Err(ProtocolError::UnbalancedQuotes),
            "{input:?}"
        );
        assert_eq!(&buf[..], input, "an error leaves the buffer as it was");
    }
}

#[test]
fn partial_input_completes_byte_by_byte() {
    let inputs: [&[u8]; 3] = [
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n",
        b"SET k 0123456789\r\n",
        b"SET k \"0123 456789\"\r\n",
    ];
    let expected = [
        args(&["SET", "k", "0123456789"]),
        args(&["SET", "k", "0123456789"]),
        args(&["SET", "k", "0123 456789"]),
    ];
    for (input, expected) in inputs.iter().zip(expected) {
        let limits = ParseLimits::default();
        let mut buf = BytesMut::new();
        for (i, &b) in input.iter().enumerate() {
            buf.put_u8(b);
            let before = buf.clone();
            let got = parse_request(&mut buf, &limits).unwrap();
            if i + 1 < input.len() {
                assert_eq!(got, None, "prefix of {} bytes", i + 1);
                assert_eq!(buf, before, "incomplete input is left untouched");
            } else {
                assert_eq!(got, Some(expected.clone()));
                assert!(buf.is_empty());
            }
        }
    }
}

#[test]
fn arguments_share_the_buffer() {
    let mut buf = encode(&args(&["SET", "key", "value"]));
    let start = buf.as_ptr() as usize;
    let end = start + buf.len();
    let parsed = parse_request(&mut buf, &ParseLimits::default())
        .unwrap()
        .unwrap();
    for a in parsed {
        let p = a.as_ptr() as usize;
        assert!(p >= start && p + a.len() <= end, "argument was copied");
    }
}

#[test]
fn invalid_multibulk_length() {
    for input in [
        &b"*x\r\n"[..],
        b"*1x\r\n",
        b"*01\r\n",
        b"*-0\r\n",
        b"*\r\n",
        b"*+1\r\n",
        b"*1\rx",
        b"*1\n",
        b"*99999999999999999999\r\n",
        b"*123456789012345678901234567890",
        b"*1048577\r\n",
    ] {
        assert_eq!(
            parse(input),
            Err(ProtocolError::InvalidMultibulkLength),
            "{input:?}"
        );
    }
    assert_eq!(parse(b"*1048576\r\n").unwrap(), None);
    let limits = ParseLimits {
        args_max: 2,
        ..ParseLimits::default()
    };
    assert_eq!(
        parse_request(&mut BytesMut::from(&b"*3\r\n"[..]), &limits),
        Err(ProtocolError::InvalidMultibulkLength)
    );
}

#[test]
fn invalid_bulk_length() {
    for input in [
        &b"*1\r\n$-1\r\n"[..],
        b"*1\r\n$x\r\n",
        b"*1\r\n$\r\n",
        b"*1\r\n$01\r\n",
        b"*1\r\n$1\rx",
        b"*1\r\n$99999999999999999999\r\n",
        b"*1\r\n$67108865\r\n",
    ] {
        assert_eq!(
            parse(input),
            Err(ProtocolError::InvalidBulkLength),
            "{input:?}"
        );
    }
    // Exactly at the limit: waits for the body rather than allocating anything.
    assert_eq!(parse(b"*1\r\n$67108864\r\n").unwrap(), None);
    let limits = ParseLimits {
        bulk_bytes_max: 3,
        ..ParseLimits::default()
    };
    assert_eq!(
        parse_request(&mut BytesMut::from(&b"*1\r\n$4\r\n"[..]), &limits),
        Err(ProtocolError::InvalidBulkLength)
    );
}

#[test]
fn expected_dollar() {
    assert_eq!(parse(b"*1\r\nx"), Err(ProtocolError::ExpectedDollar(b'x')));
    assert_eq!(
        parse(b"*2\r\n$1\r\na\r\n:1\r\n"),
        Err(ProtocolError::ExpectedDollar(b':'))
    );
    assert_eq!(
        ProtocolError::ExpectedDollar(b'x').to_string(),
        "Protocol error: expected '$', got 'x'"
    );
    assert_eq!(
        ProtocolError::ExpectedDollar(b'\r').to_string(),
        "Protocol error: expected '$', got '\\x0d'"
    );
}

#[test]
fn expected_crlf_after_bulk() {
    assert_eq!(parse(b"*1\r\n$1\r\nab"), Err(ProtocolError::ExpectedCrlf));
    assert_eq!(
        parse(b"*1\r\n$1\r\nab\r\n"),
        Err(ProtocolError::ExpectedCrlf)
    );
    assert_eq!(parse(b"*1\r\n$1\r\na\rx"), Err(ProtocolError::ExpectedCrlf));
    assert_eq!(parse(b"*1\r\n$1\r\na\r").unwrap(), None);
}

#[test]
fn too_big_inline() {
    let limits = ParseLimits {
        inline_bytes_max: 8,
        ..ParseLimits::default()
    };
    let run = |input: &[u8]| parse_request(&mut BytesMut::from(input), &limits);
    assert_eq!(run(b"123456789"), Err(ProtocolError::TooBigInline));
    assert_eq!(run(b"123456789\n"), Err(ProtocolError::TooBigInline));
    assert_eq!(run(b"12345678"), Ok(None));
    assert_eq!(run(b"1234567\r\n"), Ok(Some(args(&["1234567"]))));
}

#[test]
fn error_texts() {
    let cases = [
        (
            ProtocolError::InvalidMultibulkLength,
            "Protocol error: invalid multibulk length",
        ),
        (
            ProtocolError::InvalidBulkLength,
            "Protocol error: invalid bulk length",
        ),
        (
            ProtocolError::TooBigInline,
            "Protocol error: too big inline request",
        ),
        (
            ProtocolError::UnbalancedQuotes,
            "Protocol error: unbalanced quotes in request",
        ),
        (
            ProtocolError::ExpectedCrlf,
            "Protocol error: expected CRLF after bulk argument",
        ),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text);
    }
}

fn written(value: &Value, protocol: Protocol) -> Vec<u8> {
    let mut out = BytesMut::new();
    write_value(&mut out, value, protocol);
    out.to_vec()
}

fn both(value: Value, resp2: &[u8], resp3: &[u8]) {
    assert_eq!(
        written(&value, Protocol::Resp2),
        resp2,
        "RESP2 of {value:?}: {:?}",
        String::from_utf8_lossy(&written(&value, Protocol::Resp2))
    );
    assert_eq!(
        written(&value, Protocol::Resp3),
        resp3,
        "RESP3 of {value:?}: {:?}",
        String::from_utf8_lossy(&written(&value, Protocol::Resp3))
    );
}

fn bulk(s: &str) -> Value {
    Value::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

#[test]
fn write_scalars() {
    both(Value::Simple("OK".into()), b"+OK\r\n", b"+OK\r\n");
    both(
        Value::Error("ERR bad\r\nthing".into()),
        b"-ERR bad  thing\r\n",
        b"-ERR bad  thing\r\n",
    );
    both(Value::Simple("a\nb".into()), b"+a b\r\n", b"+a b\r\n");
    both(Value::Int(-42), b":-42\r\n", b":-42\r\n");
    both(
        Value::Int(i64::MIN),
        b":-9223372036854775808\r\n",
        b":-9223372036854775808\r\n",
    );
    both(bulk("hi"), b"$2\r\nhi\r\n", b"$2\r\nhi\r\n");
    both(bulk(""), b"$0\r\n\r\n", b"$0\r\n\r\n");
    both(
        Value::Bulk(Bytes::from_static(b"a\r\n")),
        b"$3\r\na\r\n\r\n",
        b"$3\r\na\r\n\r\n",
    );
    both(Value::Nil, b"$-1\r\n", b"_\r\n");
}

#[test]
fn write_pairs_flat_in_resp2_and_nested_in_resp3() {
    let pairs = Value::Pairs(vec![
        (Value::Bulk(Bytes::from_static(b"a")), Value::Double(1.0)),
        (Value::Bulk(Bytes::from_static(b"b")), Value::Double(2.5)),
    ]);
    both(
        pairs,
        b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\n2.5\r\n",
        b"*2\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n",
    );
    both(Value::Pairs(Vec::new()), b"*0\r\n", b"*0\r\n");
}

#[test]
fn write_null_arrays() {
    both(Value::NilArray, b"*-1\r\n", b"_\r\n");
}

#[test]
fn write_doubles() {
    both(Value::Double(1.5), b"$3\r\n1.5\r\n", b",1.5\r\n");
    both(Value::Double(3.0), b"$1\r\n3\r\n", b",3\r\n");
    both(Value::Double(-0.25), b"$5\r\n-0.25\r\n", b",-0.25\r\n");
    // Redis's d2string: plain up to 1e20 (1e17 is not in exponent form), then `1e+300`.
    both(
        Value::Double(1e17),
        b"$18\r\n100000000000000000\r\n",
        b",100000000000000000\r\n",
    );
    both(Value::Double(1e300), b"$6\r\n1e+300\r\n", b",1e+300\r\n");
    both(Value::Double(1.5e-7), b"$6\r\n1.5e-7\r\n", b",1.5e-7\r\n");
    both(Value::Double(f64::INFINITY), b"$3\r\ninf\r\n", b",inf\r\n");
    both(
        Value::Double(f64::NEG_INFINITY),
        b"$4\r\n-inf\r\n",
        b",-inf\r\n",
    );
    both(Value::Double(f64::NAN), b"$3\r\nnan\r\n", b",nan\r\n");
}

#[test]
fn write_aggregates() {
    both(Value::Array(vec![]), b"*0\r\n", b"*0\r\n");
    both(
        Value::Array(vec![bulk("a"), Value::Nil, Value::Int(1)]),
        b"*3\r\n$1\r\na\r\n$-1\r\n:1\r\n",
        b"*3\r\n$1\r\na\r\n_\r\n:1\r\n",
    );
    both(
        Value::Set(vec![bulk("a"), bulk("b")]),
        b"*2\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"~2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    both(
        Value::Map(vec![
            (bulk("k"), Value::Int(1)),
            (Value::Simple("s".into()), Value::Nil),
        ]),
        b"*4\r\n$1\r\nk\r\n:1\r\n+s\r\n$-1\r\n",
        b"%2\r\n$1\r\nk\r\n:1\r\n+s\r\n_\r\n",
    );
    both(
        Value::Array(vec![Value::Set(vec![]), Value::Map(vec![])]),
        b"*2\r\n*0\r\n*0\r\n",
        b"*2\r\n~0\r\n%0\r\n",
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..256)) {
        let limits = ParseLimits { args_max: 16, bulk_bytes_max: 64, inline_bytes_max: 64 };
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(_)) = parse_request(&mut buf, &limits) {}
    }

    #[test]
    fn resp_shaped_bytes_never_panic(
        parts in proptest::collection::vec(
            prop_oneof![
                Just(b"*".to_vec()), Just(b"$".to_vec()), Just(b"\r\n".to_vec()),
                Just(b"-".to_vec()), Just(b"\"".to_vec()), Just(b"'".to_vec()),
                Just(b"\\x".to_vec()), Just(b" ".to_vec()),
                "[0-9]{1,3}".prop_map(|s| s.into_bytes()),
                proptest::collection::vec(any::<u8>(), 0..4),
            ],
            0..40,
        )
    ) {
        let input: Vec<u8> = parts.concat();
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(_)) = parse_request(&mut buf, &ParseLimits::default()) {}
    }

    #[test]
    fn multibulk_round_trips(
        requests in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8),
            1..4,
        ),
        chunk in 1usize..64,
    ) {
        let requests: Vec<Vec<Bytes>> = requests
            .into_iter()
            .map(|r| r.into_iter().map(Bytes::from).collect())
            .collect();
        let wire: Vec<u8> = requests.iter().flat_map(|r| encode(r).to_vec()).collect();
        // Feed the bytes in chunks; every request comes out whole and in order.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in wire.chunks(chunk) {
            buf.put_slice(piece);
            while let Some(req) = parse_request(&mut buf, &ParseLimits::default()).unwrap() {
                got.push(req);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, requests);
    }

    #[test]
    fn inline_round_trips(words in proptest::collection::vec("[a-zA-Z0-9_:.-]{1,12}", 0..8)) {
        let line = format!("{}\r\n", words.join(" "));
        let parsed = parse(line.as_bytes()).unwrap().unwrap();
        let expected: Vec<Bytes> = words.iter().map(|w| Bytes::from(w.clone())).collect();
        prop_assert_eq!(parsed, expected);
    }
}
