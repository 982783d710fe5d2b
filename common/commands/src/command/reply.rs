//! What a command answers: a reply independent of the wire protocol, the errors with Redis's
//! texts, and the outcome of applying a command.
use std::fmt;

use bytes::Bytes;

use crate::float::Float;

/// A command's reply, independent of the wire protocol.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// OK.
    Ok,
    /// Nil.
    Nil,
    /// An integer.
    Int(i64),
    /// A string.
    Bulk(Bytes),
    /// A status other than OK (TYPE's type name; a simple string in RESP).
    Status(&'static str),
    /// A list of strings.
    Array(Vec<Bytes>),
    /// An error.
    Error(CommandError),
    /// A float (a RESP3 double; a bulk string of [`Float::text`] in RESP2).
    Double(Float),
    /// An array of replies of any kind (HMGET's values and nils, a scan's cursor and
    /// elements, a transaction's replies).
    Items(Vec<Reply>),
    /// Keys with values: a RESP3 map, a flat array in RESP2 (HGETALL).
    Map(Vec<(Reply, Reply)>),
    /// Pairs: an array of two-element arrays in RESP3, a flat array in RESP2 (ZRANGE
    /// WITHSCORES, ZPOPMIN with a count, HRANDFIELD WITHVALUES).
    Pairs(Vec<(Reply, Reply)>),
    /// A null array (RESP2 `*-1`, RESP3 null): LPOP with a count on an absent key, ZRANK
    /// WITHSCORE of a missing member.
    NilArray,
}

impl Reply {
    /// A scan step's reply: the next cursor as a string, then the elements.
    pub(crate) fn scan(next: u64, elements: Vec<Bytes>) -> Reply {
        Reply::Items(vec![
            Reply::Bulk(Bytes::from(next.to_string())),
            Reply::Array(elements),
        ])
    }
}

/// Why a command failed; the display texts are Redis's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CommandError {
    /// The key holds another kind of value.
    WrongType,
    /// The value is not a 64-bit integer.
    NotAnInteger,
    /// The increment would overflow.
    Overflow,
    /// The result would exceed a size limit.
    ValueTooLarge,
    /// The expiry is zero, negative or overflows (SET's wording).
    InvalidExpireTime,
    /// The expiry overflows, in the words of the named command (`expire`, `setex`, ...).
    InvalidExpireTimeIn(&'static str),
    /// The value or argument is not a float.
    NotAFloat,
    /// INCRBYFLOAT or HINCRBYFLOAT would produce NaN or an infinity.
    NanOrInfinity,
    /// HINCRBY on a field that is not an integer.
    HashNotInteger,
    /// HINCRBYFLOAT on a field that is not a float.
    HashNotFloat,
    /// ZADD INCR or ZINCRBY would produce NaN (`inf` plus `-inf`).
    ScoreNaN,
    /// LSET on an absent key.
    NoSuchKey,
    /// LSET past the end of the list.
    IndexOutOfRange,
    /// A count out of range: SRANDMEMBER and HRANDFIELD with a count below
    /// -[`REPEATS_MAX`](crate::command::REPEATS_MAX).
    OutOfRange,
    /// ZADD with NX and XX.
    ZAddNxXx,
    /// ZADD with two of GT, LT and NX.
    ZAddGtLtNx,
    /// ZADD INCR with more than one pair.
    ZAddIncrPairs,
    /// A ZCOUNT or ZRANGE BYSCORE bound that is not a float.
    MinMaxNotFloat,
    /// A ZRANGE BYLEX bound that does not start with `[` or `(` and is not `-` or `+`.
    MinMaxNotLex,
    /// The replica is over `maxmemory` and the command may need new space.
    OutOfMemory,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let CommandError::InvalidExpireTimeIn(command) = self {
            return write!(f, "ERR invalid expire time in '{command}' command");
        }
        f.write_str(match self {
            CommandError::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            }
            CommandError::NotAnInteger => "ERR value is not an integer or out of range",
            CommandError::Overflow => "ERR increment or decrement would overflow",
            CommandError::ValueTooLarge => "ERR value exceeds the configured size limit",
            CommandError::InvalidExpireTime | CommandError::InvalidExpireTimeIn(_) => {
                "ERR invalid expire time in 'set' command"
            }
            CommandError::NotAFloat => "ERR value is not a valid float",
            CommandError::NanOrInfinity => "ERR increment would produce NaN or Infinity",
            CommandError::HashNotInteger => "ERR hash value is not an integer",
            CommandError::HashNotFloat => "ERR hash value is not a float",
            CommandError::ScoreNaN => "ERR resulting score is not a number (NaN)",
            CommandError::NoSuchKey => "ERR no such key",
            CommandError::IndexOutOfRange => "ERR index out of range",
            CommandError::OutOfRange => "ERR value is out of range",
            CommandError::ZAddNxXx => "ERR XX and NX options at the same time are not compatible",
            CommandError::ZAddGtLtNx => {
                "ERR GT, LT, and/or NX options at the same time are not compatible"
            }
            CommandError::ZAddIncrPairs => {
                "ERR INCR option supports a single increment-element pair"
            }
            CommandError::MinMaxNotFloat => "ERR min or max is not a float",
            CommandError::MinMaxNotLex => "ERR min or max not valid string range item",
            CommandError::OutOfMemory => "OOM command not allowed when used memory > 'maxmemory'.",
        })
    }
}

impl std::error::Error for CommandError {}

/// What applying a command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The reply to the client.
    pub reply: Reply,
    /// Whether the register changed (if not, it is exactly as before).
    pub changed: bool,
}

impl Outcome {
    pub(crate) fn unchanged(reply: Reply) -> Outcome {
        Outcome {
            reply,
            changed: false,
        }
    }

    pub(crate) fn changed(reply: Reply) -> Outcome {
        Outcome {
            reply,
            changed: true,
        }
    }

    pub(crate) fn error(error: CommandError) -> Outcome {
        Outcome::unchanged(Reply::Error(error))
    }
}
