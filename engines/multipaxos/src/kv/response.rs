//! What the [`RegisterMachine`](super::RegisterMachine) answers, as bytes the engine carries
//! back to the session (the client table keeps them too).
//!
//! [`Response`] has the shape of the commands crate's `Reply`, with statuses and errors as
//! their text: the session writes them to the client as text anyway, and multi-key operations
//! have errors `Reply` does not know (COPY's "source and destination objects are the same").
//!
//! ```text
//! version u8 (RESPONSE_VERSION), then a response: tag u8, then
//!   0 Ok | 1 Nil | 2 Int i64 | 3 Bulk bytes | 4 Status text | 5 Array u32 count, bytes*
//!   6 Error text | 7 Double f64 bits | 8 Items u32 count, response*
//!   9 Map u32 count, (response, response)* | 10 Pairs (as Map) | 11 NilArray
//! ```
use bytes::Bytes;
use logless_commands::command::Reply;
use logless_commands::float::Float;

use super::codec::{put_bytes, put_count, put_float, put_i64, put_list, DecodeError, Reader};

/// The version of the response encoding.
pub const RESPONSE_VERSION: u8 = 1;

/// How deeply responses nest: a transaction's items, holding a command's items, holding pairs.
const RESPONSE_DEPTH_MAX: usize = 4;

/// A reply of the replicated map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Response {
    /// OK.
    Ok,
    /// Nil.
    Nil,
    /// An integer.
    Int(i64),
    /// A string.
    Bulk(Bytes),
    /// A status other than OK.
    Status(String),
    /// A list of strings.
    Array(Vec<Bytes>),
    /// An error, with Redis's text (`ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// A float.
    Double(Float),
    /// Replies of any kind (a transaction's, MGET's).
    Items(Vec<Response>),
    /// Keys with values.
    Map(Vec<(Response, Response)>),
    /// Pairs.
    Pairs(Vec<(Response, Response)>),
    /// A null array.
    NilArray,
}

impl From<Reply> for Response {
    fn from(reply: Reply) -> Response {
        let pairs = |v: Vec<(Reply, Reply)>| {
            v.into_iter()
                .map(|(a, b)| (Response::from(a), Response::from(b)))
                .collect()
        };
        match reply {
            Reply::Ok => Response::Ok,
            Reply::Nil => Response::Nil,
            Reply::Int(v) => Response::Int(v),
            Reply::Bulk(b) => Response::Bulk(b),
            Reply::Status(s) => Response::Status(s.to_owned()),
            Reply::Array(a) => Response::Array(a),
            Reply::Error(e) => Response::Error(e.to_string()),
            Reply::Double(f) => Response::Double(f),
            Reply::Items(items) => Response::Items(items.into_iter().map(Response::from).collect()),
            Reply::Map(m) => Response::Map(pairs(m)),
            Reply::Pairs(p) => Response::Pairs(pairs(p)),
            Reply::NilArray => Response::NilArray,
        }
    }
}

impl Response {
    /// An error response with `text`.
    pub fn error(text: impl Into<String>) -> Response {
        Response::Error(text.into())
    }

    /// The response, encoded.
    pub fn encode(&self) -> Bytes {
        let mut out = vec![RESPONSE_VERSION];
        put_response(&mut out, self);
        Bytes::from(out)
    }

    /// Decodes what [`Response::encode`] wrote. Never panics, whatever the input.
    pub fn decode(bytes: &[u8]) -> Result<Response, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != RESPONSE_VERSION {
            return Err(DecodeError::UnknownVersion(version));
        }
        let response = read_response(&mut r, 0)?;
        r.finish()?;
        Ok(response)
    }
}

fn put_pairs(out: &mut Vec<u8>, pairs: &[(Response, Response)]) {
    put_count(out, pairs.len());
    for (a, b) in pairs {
        put_response(out, a);
        put_response(out, b);
    }
}

fn put_response(out: &mut Vec<u8>, response: &Response) {
    match response {
        Response::Ok => out.push(0),
        Response::Nil => out.push(1),
        Response::Int(v) => {
            out.push(2);
            put_i64(out, *v);
        }
        Response::Bulk(b) => {
            out.push(3);
            put_bytes(out, b);
        }
        Response::Status(s) => {
            out.push(4);
            put_bytes(out, s.as_bytes());
        }
        Response::Array(a) => {
            out.push(5);
            put_list(out, a);
        }
        Response::Error(e) => {
            out.push(6);
            put_bytes(out, e.as_bytes());
        }
        Response::Double(f) => {
            out.push(7);
            put_float(out, *f);
        }
        Response::Items(items) => {
            out.push(8);
            put_count(out, items.len());
            for item in items {
                put_response(out, item);
            }
        }
        Response::Map(m) => {
            out.push(9);
            put_pairs(out, m);
        }
        Response::Pairs(p) => {
            out.push(10);
            put_pairs(out, p);
        }
        Response::NilArray => out.push(11),
    }
}

fn read_text(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    String::from_utf8(r.bytes()?.to_vec()).map_err(|_| DecodeError::Invalid)
}

fn read_pairs(r: &mut Reader<'_>, depth: usize) -> Result<Vec<(Response, Response)>, DecodeError> {
    let count = r.count(2)?;
    (0..count)
        .map(|_| Ok((read_response(r, depth)?, read_response(r, depth)?)))
        .collect()
}

fn read_response(r: &mut Reader<'_>, depth: usize) -> Result<Response, DecodeError> {
    let tag = r.u8()?;
    if matches!(tag, 8..=10) && depth >= RESPONSE_DEPTH_MAX {
        return Err(DecodeError::Nested);
    }
    Ok(match tag {
        0 => Response::Ok,
        1 => Response::Nil,
        2 => Response::Int(r.i64()?),
        3 => Response::Bulk(r.bytes()?),
        4 => Response::Status(read_text(r)?),
        5 => Response::Array(r.list()?),
        6 => Response::Error(read_text(r)?),
        7 => Response::Double(r.float()?),
        8 => {
            let count = r.count(1)?;
            let items = (0..count)
                .map(|_| read_response(r, depth + 1))
                .collect::<Result<_, _>>()?;
            Response::Items(items)
        }
        9 => Response::Map(read_pairs(r, depth + 1)?),
        10 => Response::Pairs(read_pairs(r, depth + 1)?),
        11 => Response::NilArray,
        other => return Err(DecodeError::UnknownTag(other)),
    })
}
