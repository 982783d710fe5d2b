//! The error texts of the new commands are Redis's, word for word.
use logless_commands::command::CommandError;

#[test]
fn error_texts_are_redis_texts() {
    let texts = [
        (CommandError::NotAFloat, "ERR value is not a valid float"),
        (
            CommandError::NanOrInfinity,
            "ERR increment would produce NaN or Infinity",
        ),
        (
            CommandError::HashNotInteger,
            "ERR hash value is not an integer",
        ),
        (CommandError::HashNotFloat, "ERR hash value is not a float"),
        (
            CommandError::ScoreNaN,
            "ERR resulting score is not a number (NaN)",
        ),
        (CommandError::NoSuchKey, "ERR no such key"),
        (CommandError::IndexOutOfRange, "ERR index out of range"),
        (CommandError::OutOfRange, "ERR value is out of range"),
        (
            CommandError::ZAddNxXx,
            "ERR XX and NX options at the same time are not compatible",
        ),
        (
            CommandError::ZAddGtLtNx,
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            CommandError::ZAddIncrPairs,
            "ERR INCR option supports a single increment-element pair",
        ),
        (
            CommandError::MinMaxNotFloat,
            "ERR min or max is not a float",
        ),
        (
            CommandError::MinMaxNotLex,
            "ERR min or max not valid string range item",
        ),
        (
            CommandError::OutOfMemory,
            "OOM command not allowed when used memory > 'maxmemory'.",
        ),
        (
            CommandError::InvalidExpireTimeIn("getex"),
            "ERR invalid expire time in 'getex' command",
        ),
    ];
    for (error, text) in texts {
        assert_eq!(error.to_string(), text);
    }
}
