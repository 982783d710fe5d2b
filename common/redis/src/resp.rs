//! The RESP wire format: client requests in, replies out.
//!
//! [`parse_request`] takes one complete request off the front of a connection's read buffer,
//! either a multibulk array (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or an inline command
//! (`GET k\r\n`), without copying the arguments: they are slices of the frozen buffer.
//! [`write_value`] appends one reply in RESP2 or RESP3.
//!
//! The parser is stateless: on incomplete input it leaves the buffer untouched and is called
//! again when more bytes arrive. It rescans only the headers, skipping argument bodies by their
//! length, so a large argument arriving in many reads costs little. Every length read from the
//! wire is checked against [`ParseLimits`] before it is used.

use bytes::{BufMut, Bytes, BytesMut};
use logless_commands::float::format_double;
use thiserror::Error;

/// Bounds on what one request may contain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseLimits {
    /// The most arguments of a multibulk request.
    pub args_max: usize,
    /// The longest single bulk argument.
    pub bulk_bytes_max: usize,
    /// The longest inline request line (and the longest header line waited for).
    pub inline_bytes_max: usize,
}

impl Default for ParseLimits {
    /// 1 Mi arguments, 64 MiB per argument, 64 KiB inline lines.
    fn default() -> Self {
        ParseLimits {
            args_max: 1024 * 1024,
            bulk_bytes_max: 64 * 1024 * 1024,
            inline_bytes_max: 64 * 1024,
        }
    }
}

/// A malformed request; the connection should answer the error and close. The display texts
/// are Redis's where Redis has one.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProtocolError {
    /// The `*N` header is not an integer or exceeds [`ParseLimits::args_max`].
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// A `$N` header is not a non-negative integer or exceeds [`ParseLimits::bulk_bytes_max`].
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// An argument of a multibulk request does not start with `$`.
    #[error("Protocol error: expected '$', got '{}'", printable(*.0))]
    ExpectedDollar(u8),
    /// A bulk argument is not followed by CRLF.
    #[error("Protocol error: expected CRLF after bulk argument")]
    ExpectedCrlf,
    /// An inline request line is longer than [`ParseLimits::inline_bytes_max`].
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    /// An inline request has an unterminated quote, or a closing quote followed by a non-space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
}

/// A byte as Redis's `%c` would show it, escaped when it is not printable.
fn printable(b: u8) -> String {
    if b.is_ascii_graphic() || b == b' ' {
        char::from(b).to_string()
    } else {
        format!("\\x{b:02x}")
    }
}

/// The longest length header we read (`-` and 19 digits); anything longer is invalid.
const LEN_DIGITS_MAX: usize = 20;

/// Parses a length with Redis's `string2ll` rules: optional `-`, no leading zeros, no `+`.
fn parse_len(digits: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(digits).ok()?;
    let body = s.strip_prefix('-').unwrap_or(s);
    if body.is_empty()
        || !body.bytes().all(|b| b.is_ascii_digit())
        || (body.len() > 1 && body.starts_with('0'))
        || s == "-0"
    {
        return None;
    }
    s.parse().ok()
}

/// Reads a `<digits>\r\n` length line starting at `start`. `Ok(None)`: incomplete; otherwise
/// the length and the offset after the CRLF.
fn read_len_line(
    buf: &[u8],
    start: usize,
    bad: ProtocolError,
) -> Result<Option<(i64, usize)>, ProtocolError> {
    let rest = &buf[start.min(buf.len())..];
    let window = &rest[..rest.len().min(LEN_DIGITS_MAX + 2)];
    let Some(cr) = window
        .iter()
        .position(|&b| !(b.is_ascii_digit() || b == b'-'))
    else {
        return if window.len() > LEN_DIGITS_MAX {
            Err(bad)
        } else {
            Ok(None)
        };
    };
    if window[cr] != b'\r' {
        return Err(bad);
    }
    match window.get(cr + 1) {
        None => Ok(None),
        Some(b'\n') => {
            let len = parse_len(&window[..cr]).ok_or(bad)?;
            Ok(Some((len, start + cr + 2)))
        }
        Some(_) => Err(bad),
    }
}

/// Takes one complete request off the front of `buf`.
///
/// Returns `Ok(None)` (leaving `buf` untouched) if the request is not complete yet, and the
/// arguments otherwise, as zero-copy slices of the consumed bytes. An empty inline line, `*0`
/// or a negative multibulk count yields an empty vector, which the caller ignores. Errors are
/// reported as soon as they can be seen, even on incomplete input; after one, the connection
/// cannot be resynchronised.
pub fn parse_request(
    buf: &mut BytesMut,
    limits: &ParseLimits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, limits),
        Some(_) => parse_inline(buf, limits),
    }
}

fn parse_multibulk(
    buf: &mut BytesMut,
    limits: &ParseLimits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some((count, mut pos)) = read_len_line(buf, 1, ProtocolError::InvalidMultibulkLength)?
    else {
        return Ok(None);
    };
    if count <= 0 {
        let _ = buf.split_to(pos);
        return Ok(Some(Vec::new()));
    }
    let count = usize::try_from(count).map_err(|_| ProtocolError::InvalidMultibulkLength)?;
    if count > limits.args_max {
        return Err(ProtocolError::InvalidMultibulkLength);
    }
    // Offsets of the arguments; grows only with arguments actually present in the buffer.
    let mut spans: Vec<(usize, usize)> = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let Some(&first) = buf.get(pos) else {
            return Ok(None);
        };
        if first != b'$' {
            return Err(ProtocolError::ExpectedDollar(first));
        }
        let Some((len, body)) = read_len_line(buf, pos + 1, ProtocolError::InvalidBulkLength)?
        else {
            return Ok(None);
        };
        let len = usize::try_from(len).map_err(|_| ProtocolError::InvalidBulkLength)?;
        if len > limits.bulk_bytes_max {
            return Err(ProtocolError::InvalidBulkLength);
        }
        let end = body + len;
        match buf.get(end..end + 2) {
            Some(b"\r\n") => {}
            Some(_) => return Err(ProtocolError::ExpectedCrlf),
            None => {
                // Incomplete; but a wrong byte right after the body is already an error.
                if buf.get(end).is_some_and(|&b| b != b'\r') {
                    return Err(ProtocolError::ExpectedCrlf);
                }
                return Ok(None);
            }
        }
        spans.push((body, end));
        pos = end + 2;
    }
    let frame = buf.split_to(pos).freeze();
    Ok(Some(
        spans
            .into_iter()
            .map(|(start, end)| frame.slice(start..end))
            .collect(),
    ))
}

fn parse_inline(
    buf: &mut BytesMut,
    limits: &ParseLimits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.inline_bytes_max {
            return Err(ProtocolError::TooBigInline);
        }
        return Ok(None);
    };
    if newline > limits.inline_bytes_max {
        return Err(ProtocolError::TooBigInline);
    }
    let line_end = if newline > 0 && buf[newline - 1] == b'\r' {
        newline - 1
    } else {
        newline
    };
    // Check the quotes before consuming anything, so an error leaves the buffer as it was.
    let words = split_args(&buf[..line_end])?;
    let frame = buf.split_to(newline + 1).freeze();
    Ok(Some(
        words
            .into_iter()
            .map(|w| match w {
                Word::Slice(start, end) => frame.slice(start..end),
                Word::Owned(v) => Bytes::from(v),
            })
            .collect(),
    ))
}

/// One inline argument: a plain slice of the line, or an unquoted/unescaped copy.
enum Word {
    Slice(usize, usize),
    Owned(Vec<u8>),
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Splits an inline line into arguments like Redis's `sdssplitargs`: whitespace separates
/// words; `"..."` supports `\n \r \t \b \a \\ \" \xHH`; `'...'` supports `\'`; a closing quote
/// must be followed by whitespace or the end of the line.
fn split_args(line: &[u8]) -> Result<Vec<Word>, ProtocolError> {
    let mut words = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        if i == line.len() {
            return Ok(words);
        }
        let start = i;
        while i < line.len() && !matches!(line[i], b' ' | b'\n' | b'\r' | b'\t' | b'"' | b'\'') {
            i += 1;
        }
        if i == line.len() || line[i] != b'"' && line[i] != b'\'' {
            words.push(Word::Slice(start, i));
            continue;
        }
        // The word contains quotes: build it.
        let mut word = line[start..i].to_vec();
        i = if line[i] == b'"' {
            double_quoted(line, i + 1, &mut word)?
        } else {
            single_quoted(line, i + 1, &mut word)?
        };
        if line.get(i).is_some_and(|&b| !is_space(b)) {
            return Err(ProtocolError::UnbalancedQuotes);
        }
        words.push(Word::Owned(word));
    }
}

/// Reads a `"..."` section from `i` (after the opening quote) into `word`; returns the offset
/// after the closing quote.
fn double_quoted(line: &[u8], mut i: usize, word: &mut Vec<u8>) -> Result<usize, ProtocolError> {
    loop {
        match line.get(i) {
            None => return Err(ProtocolError::UnbalancedQuotes),
            Some(b'\\') if line.get(i + 1) == Some(&b'x') => {
                let hi = line.get(i + 2).copied().and_then(hex_value);
                let lo = line.get(i + 3).copied().and_then(hex_value);
                if let (Some(hi), Some(lo)) = (hi, lo) {
                    word.push(hi * 16 + lo);
                    i += 4;
                } else {
                    word.push(b'x');
                    i += 2;
                }
            }
            Some(b'\\') if i + 1 < line.len() => {
                word.push(match line[i + 1] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                i += 2;
            }
            Some(b'"') => return Ok(i + 1),
            Some(&b) => {
                word.push(b);
                i += 1;
            }
        }
    }
}

/// Reads a `'...'` section from `i` (after the opening quote) into `word`; returns the offset
/// after the closing quote.
fn single_quoted(line: &[u8], mut i: usize, word: &mut Vec<u8>) -> Result<usize, ProtocolError> {
    loop {
        match line.get(i) {
            None => return Err(ProtocolError::UnbalancedQuotes),
            Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                word.push(b'\'');
                i += 2;
            }
            Some(b'\'') => return Ok(i + 1),
            Some(&b) => {
                word.push(b);
                i += 1;
            }
        }
    }
}

/// The protocol version a connection speaks (chosen with HELLO).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2, the default.
    Resp2,
    /// RESP3.
    Resp3,
}

/// A reply, encoded by [`write_value`] according to the connection's [`Protocol`].
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A simple string (`+OK`).
    Simple(String),
    /// An error; the full text including its prefix, e.g. `"ERR syntax error"`.
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Bytes),
    /// Nil (RESP2 null bulk string, RESP3 null).
    Nil,
    /// An array.
    Array(Vec<Value>),
    /// A set (RESP3 `~`, an array in RESP2).
    Set(Vec<Value>),
    /// A map (RESP3 `%`, a flat key/value array in RESP2).
    Map(Vec<(Value, Value)>),
    /// A double (RESP3 `,`, a bulk string in RESP2), written as Redis's `d2string` does
    /// ([`logless_commands::float::format_double`]).
    Double(f64),
    /// Pairs (RESP3: an array of two-element arrays; RESP2: one flat array), as ZRANGE
    /// WITHSCORES and HRANDFIELD WITHVALUES answer.
    Pairs(Vec<(Value, Value)>),
    /// A null array (RESP2 `*-1`, RESP3 null), as LPOP with a count on a missing key answers.
    NilArray,
}

/// Appends a request — `args` as a multibulk array of bulk strings, the form
/// [`parse_request`] reads — to `out` (a `BytesMut`, or a `Vec<u8>` for a blocking client).
pub fn write_request<A: AsRef<[u8]>>(out: &mut impl BufMut, args: &[A]) {
    write_header(out, b'*', len_i64(args.len()));
    for arg in args {
        write_bulk(out, arg.as_ref());
    }
}

/// Appends `value` to `out` in `protocol`.
pub fn write_value(out: &mut BytesMut, value: &Value, protocol: Protocol) {
    match value {
        Value::Simple(s) => write_line(out, b'+', s),
        Value::Error(e) => write_line(out, b'-', e),
        Value::Int(i) => write_header(out, b':', *i),
        Value::Bulk(b) => write_bulk(out, b),
        Value::Nil => match protocol {
            Protocol::Resp2 => out.put_slice(b"$-1\r\n"),
            Protocol::Resp3 => out.put_slice(b"_\r\n"),
        },
        Value::Array(items) => write_items(out, b'*', items, protocol),
        Value::Set(items) => {
            let tag = match protocol {
                Protocol::Resp2 => b'*',
                Protocol::Resp3 => b'~',
            };
            write_items(out, tag, items, protocol);
        }
        Value::Map(pairs) => {
            match protocol {
                Protocol::Resp2 => write_header(out, b'*', len_i64(pairs.len()).saturating_mul(2)),
                Protocol::Resp3 => write_header(out, b'%', len_i64(pairs.len())),
            }
            for (k, v) in pairs {
                write_value(out, k, protocol);
                write_value(out, v, protocol);
            }
        }
        Value::Pairs(pairs) => match protocol {
            Protocol::Resp2 => {
                write_header(out, b'*', len_i64(pairs.len()).saturating_mul(2));
                for (a, b) in pairs {
                    write_value(out, a, protocol);
                    write_value(out, b, protocol);
                }
            }
            Protocol::Resp3 => {
                write_header(out, b'*', len_i64(pairs.len()));
                for (a, b) in pairs {
                    out.put_slice(b"*2\r\n");
                    write_value(out, a, protocol);
                    write_value(out, b, protocol);
                }
            }
        },
        Value::NilArray => match protocol {
            Protocol::Resp2 => out.put_slice(b"*-1\r\n"),
            Protocol::Resp3 => out.put_slice(b"_\r\n"),
        },
        Value::Double(d) => {
            let text = format_double(*d);
            match protocol {
                Protocol::Resp2 => write_bulk(out, text.as_bytes()),
                Protocol::Resp3 => write_line(out, b',', &text),
            }
        }
    }
}

fn len_i64(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

fn write_header(out: &mut impl BufMut, tag: u8, n: i64) {
    // Formatted on the stack: one header per reply and per nested item, no allocation.
    let mut digits = itoa::Buffer::new();
    out.put_u8(tag);
    out.put_slice(digits.format(n).as_bytes());
    out.put_slice(b"\r\n");
}

/// A one-line reply (`+`, `-`, `,`); CR and LF in the text become spaces.
fn write_line(out: &mut BytesMut, tag: u8, text: &str) {
    out.reserve(text.len() + 3);
    out.put_u8(tag);
    for b in text.bytes() {
        out.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
    }
    out.put_slice(b"\r\n");
}

fn write_bulk(out: &mut impl BufMut, bytes: &[u8]) {
    write_header(out, b'$', len_i64(bytes.len()));
    out.put_slice(bytes);
    out.put_slice(b"\r\n");
}

fn write_items(out: &mut BytesMut, tag: u8, items: &[Value], protocol: Protocol) {
    write_header(out, tag, len_i64(items.len()));
    for item in items {
        write_value(out, item, protocol);
    }
}
