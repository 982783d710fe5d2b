//! Redis's glob patterns (the MATCH of the SCAN family and of KEYS), byte for byte.
//!
//! `*` matches any run of bytes, `?` one byte, `[abc]`, `[^abc]` and `[a-z]` one byte of a
//! class (a reversed range counts as its reverse, an unterminated class runs to the pattern's
//! end), and `\` makes the next byte literal. Every token but `*` matches exactly one byte, so
//! the classic backtracking over the last `*` is exact and takes at most pattern × text steps.

/// A compiled glob pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Star,
    Any,
    Byte(u8),
    Class {
        negated: bool,
        items: Vec<ClassItem>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClassItem {
    Byte(u8),
    Range(u8, u8),
}

impl Glob {
    /// Compiles `pattern`; every byte string is a pattern.
    pub fn new(pattern: &[u8]) -> Glob {
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < pattern.len() {
            let token = match pattern[i] {
                b'*' => Token::Star,
                b'?' => Token::Any,
                b'[' => {
                    let (token, end) = class(pattern, i + 1);
                    i = end;
                    token
                }
                b'\\' if i + 1 < pattern.len() => {
                    i += 1;
                    Token::Byte(pattern[i])
                }
                b => Token::Byte(b),
            };
            // Consecutive stars match what one star matches.
            if !(token == Token::Star && tokens.last() == Some(&Token::Star)) {
                tokens.push(token);
            }
            i += 1;
        }
        Glob { tokens }
    }

    /// Whether `text` matches the whole pattern.
    pub fn matches(&self, text: &[u8]) -> bool {
        let (mut t, mut p) = (0, 0);
        // Where to resume after the latest star: the token after it and the text it reached.
        let mut resume: Option<(usize, usize)> = None;
        while t < text.len() {
            match self.tokens.get(p) {
                Some(Token::Star) => {
                    resume = Some((p + 1, t));
                    p += 1;
                }
                Some(token) if token.matches(text[t]) => {
                    p += 1;
                    t += 1;
                }
                _ => match resume {
                    Some((after_star, reached)) => {
                        // Let the star swallow one more byte.
                        resume = Some((after_star, reached + 1));
                        p = after_star;
                        t = reached + 1;
                    }
                    None => return false,
                },
            }
        }
        self.tokens[p..].iter().all(|token| *token == Token::Star)
    }
}

impl Token {
    fn matches(&self, byte: u8) -> bool {
        match self {
            Token::Star | Token::Any => true,
            Token::Byte(b) => *b == byte,
            Token::Class { negated, items } => {
                let inside = items.iter().any(|item| match *item {
                    ClassItem::Byte(b) => b == byte,
                    ClassItem::Range(lo, hi) => (lo..=hi).contains(&byte),
                });
                inside != *negated
            }
        }
    }
}

/// The class starting after its `[` at `start`; returns it and the index of its last byte.
fn class(pattern: &[u8], start: usize) -> (Token, usize) {
    let mut i = start;
    let negated = pattern.get(i) == Some(&b'^');
    if negated {
        i += 1;
    }
    let mut items = Vec::new();
    loop {
        match pattern.get(i..).unwrap_or_default() {
            [] => return (Token::Class { negated, items }, pattern.len() - 1),
            [b']', ..] => return (Token::Class { negated, items }, i),
            [b'\\', b, ..] => {
                items.push(ClassItem::Byte(*b));
                i += 2;
            }
            [lo, b'-', hi, ..] => {
                items.push(ClassItem::Range(*lo.min(hi), *lo.max(hi)));
                i += 3;
            }
            [b, ..] => {
                items.push(ClassItem::Byte(*b));
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, text: &str) -> bool {
        Glob::new(pattern.as_bytes()).matches(text.as_bytes())
    }

    #[test]
    fn globs_match_as_in_redis() {
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("h?llo", "hello"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("h[b-a]llo", "hallo"), "a reversed range is its reverse");
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("[\\]]", "]"));
        assert!(m("*a*b*", "xxaxxbxx"));
        assert!(!m("*a*b", "xxaxxbxx"));
        assert!(m("a**b", "ab"));
        assert!(m("[abc", "b"), "an unterminated class runs to the end");
        assert!(!m("abc", "abcd"));
        assert!(!m("abcd", "abc"));
        assert!(m("f*", "f"));
    }
}
