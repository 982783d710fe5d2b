//! Reading a server's replies: the inverse of [`crate::resp::write_value`], for a node that
//! forwards a client's command to another node and hands the answer back (a ring,
//! docs/ring.md §3).
//!
//! Both protocols are read: RESP2's null bulk string and null array, RESP3's null, double, map
//! and set. What [`write_value`](crate::resp::write_value) writes in a protocol reads back as
//! a [`Value`] that it writes again as the same bytes in that protocol, so a forwarded reply
//! reaches the client exactly as the node holding the key wrote it. Types logless never
//! writes (RESP3 booleans, big numbers, verbatim strings, attributes, pushes) are refused.
use bytes::Bytes;

use crate::resp::Value;

/// The deepest nesting of aggregates read (logless's deepest reply, a transaction's replies
/// of pairs, is three).
pub const DEPTH_MAX: usize = 16;

/// Reads the reply at the start of `buf`: `Ok(None)` if it is not complete yet, else the
/// value and the bytes it took. Bulk strings longer than `bulk_bytes_max` are refused.
pub fn parse_reply(buf: &[u8], bulk_bytes_max: usize) -> Result<Option<(Value, usize)>, String> {
    let mut reader = Reader {
        buf,
        at: 0,
        bulk_bytes_max,
    };
    match reader.value(0)? {
        Some(value) => Ok(Some((value, reader.at))),
        None => Ok(None),
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
    bulk_bytes_max: usize,
}

impl<'a> Reader<'a> {
    /// The next line (without its CRLF), or `None` if it is not complete.
    fn line(&mut self) -> Option<&'a [u8]> {
        let buf: &'a [u8] = self.buf;
        let rest = &buf[self.at..];
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        self.at += end + 2;
        Some(&rest[..end])
    }

    fn number(line: &[u8]) -> Result<i64, String> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| format!("{:?} is not a number", String::from_utf8_lossy(line)))
    }

    fn value(&mut self, depth: usize) -> Result<Option<Value>, String> {
        if depth > DEPTH_MAX {
            return Err("replies nested too deep".into());
        }
        let Some(&tag) = self.buf.get(self.at) else {
            return Ok(None);
        };
        self.at += 1;
        let Some(line) = self.line() else {
            return Ok(None);
        };
        let text = || String::from_utf8_lossy(line).into_owned();
        let value = match tag {
            b'+' => Value::Simple(text()),
            b'-' => Value::Error(text()),
            b':' => Value::Int(Self::number(line)?),
            b'_' => Value::Nil,
            b',' => Value::Double(
                text()
                    .parse()
                    .map_err(|_| format!("{:?} is not a double", text()))?,
            ),
            b'$' => match Self::number(line)? {
                -1 => Value::Nil,
                n => {
                    let n = usize::try_from(n)
                        .ok()
                        .filter(|&n| n <= self.bulk_bytes_max)
                        .ok_or_else(|| format!("a bulk string of {n} bytes"))?;
                    let start = self.at;
                    if self.buf.len() < start + n + 2 {
                        return Ok(None);
                    }
                    if &self.buf[start + n..start + n + 2] != b"\r\n" {
                        return Err("a bulk string without its CRLF".into());
                    }
                    self.at = start + n + 2;
                    Value::Bulk(Bytes::copy_from_slice(&self.buf[start..start + n]))
                }
            },
            b'*' | b'~' | b'%' => {
                let n = Self::number(line)?;
                if n == -1 && tag == b'*' {
                    return Ok(Some(Value::NilArray));
                }
                let n = usize::try_from(n).map_err(|_| format!("an aggregate of {n} items"))?;
                let items = if tag == b'%' { 2 * n } else { n };
                let mut values = Vec::with_capacity(items.min(1024));
                for _ in 0..items {
                    match self.value(depth + 1)? {
                        Some(value) => values.push(value),
                        None => return Ok(None),
                    }
                }
                match tag {
                    b'*' => Value::Array(values),
                    b'~' => Value::Set(values),
                    _ => {
                        let mut pairs = Vec::with_capacity(n);
                        let mut values = values.into_iter();
                        while let (Some(k), Some(v)) = (values.next(), values.next()) {
                            pairs.push((k, v));
                        }
                        Value::Map(pairs)
                    }
                }
            }
            other => {
                return Err(format!(
                    "a reply of type {:?}, which logless does not write",
                    char::from(other)
                ))
            }
        };
        Ok(Some(value))
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::resp::{write_value, Protocol};

    fn every_kind() -> Vec<Value> {
        let bulk = |s: &str| Value::Bulk(Bytes::copy_from_slice(s.as_bytes()));
        vec![
            Value::Simple("OK".into()),
            Value::Error("ERR wrong".into()),
            Value::Int(-42),
            bulk("va\r\nlue"),
            bulk(""),
            Value::Nil,
            Value::NilArray,
            Value::Array(vec![bulk("a"), Value::Nil, Value::Int(1)]),
            Value::Set(vec![bulk("m")]),
            Value::Map(vec![(bulk("f"), bulk("v")), (bulk("g"), Value::Int(2))]),
            Value::Double(1.5),
            Value::Double(f64::INFINITY),
            Value::Pairs(vec![(bulk("m"), Value::Double(2.0))]),
            Value::Array(vec![Value::Array(vec![]), Value::Map(vec![])]),
        ]
    }

    #[test]
    fn what_is_written_reads_back_as_the_same_bytes() {
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            for value in every_kind() {
                let mut written = BytesMut::new();
                write_value(&mut written, &value, protocol);
                let (read, used) = parse_reply(&written, 1 << 20).unwrap().unwrap();
                assert_eq!(used, written.len(), "{value:?}");
                let mut again = BytesMut::new();
                write_value(&mut again, &read, protocol);
                assert_eq!(again, written, "{value:?} in {protocol:?}");
                for cut in 0..written.len() {
                    assert_eq!(parse_reply(&written[..cut], 1 << 20), Ok(None), "{value:?}");
                }
            }
        }
    }

    #[test]
    fn malformed_replies_are_refused() {
        assert!(parse_reply(b":x\r\n", 100).is_err());
        assert!(parse_reply(b"$3\r\nabcd\r\n", 100).is_err());
        assert!(parse_reply(b"$300\r\n", 100).is_err());
        assert!(parse_reply(b"#t\r\n", 100).is_err());
        assert!(parse_reply(&b"*1\r\n".repeat(DEPTH_MAX + 2), 100).is_err());
    }
}
