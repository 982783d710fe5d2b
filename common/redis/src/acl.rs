//! Who a client is and what it may do: the users of a node, without I/O.
//!
//! An [`Acl`] holds the node's users, always including `default`. Each [`User`] is on or off,
//! has SHA-256 hashes of its passwords (or takes any password: `nopass`), glob patterns of the
//! keys it may name (Redis's rules: `*`, `?`, `[...]`, `\` escapes) and may run every command
//! or only those that read ([`Access`]). Redis's `requirepass` is the default user's password.
//!
//! A connection starts logged in as `default` if that user is on and takes any password (the
//! configuration of a node without passwords, like Redis's); otherwise it starts
//! unauthenticated and, failing closed, may run only AUTH, HELLO, PING, QUIT and RESET
//! ([`allowed_before_auth`]) until AUTH or `HELLO ... AUTH` logs it in. The session
//! (`crate::session`) keeps who is logged in and asks [`Acl::check`] before each command.
//!
//! Passwords are compared without leaking timing: the candidate is hashed and its hash
//! compared in constant time with every stored hash, and an unknown or disabled user's
//! candidate is hashed and compared as well, so that the time of a failed AUTH says neither
//! how much of the password matched nor whether the user exists. The error texts are Redis 7's.
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::resp::Value;
use crate::table::CommandSpec;

/// A SHA-256 hash of a password.
pub type PasswordHash = [u8; 32];

/// The error to any command but [`allowed_before_auth`] ones before the client logs in.
pub const NOAUTH: &str = "NOAUTH Authentication required.";

/// The error to HELLO without AUTH before the client logs in (Redis's words).
pub const NOAUTH_HELLO: &str = "NOAUTH HELLO must be called with the client already \
     authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to \
     authenticate the client and select the RESP protocol version at the same time";

/// The error to a failed AUTH (wrong password, unknown or disabled user).
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// The error to `AUTH password` while the default user takes any password.
pub const AUTH_WITHOUT_PASSWORD: &str = "ERR AUTH <password> called without any password \
     configured for the default user. Are you sure your configuration is correct?";

/// The error to a command naming a key the user's patterns do not match.
pub const NOPERM_KEY: &str = "NOPERM No permissions to access a key";

/// The name of the user a connection starts as, and that `requirepass` protects.
pub const DEFAULT_USER: &str = "default";

/// The ACL categories `ACL CAT` lists: the two a user can be given.
const CATEGORIES: [&str; 2] = ["read", "write"];

/// The SHA-256 hash of `password`.
pub fn hash_password(password: &[u8]) -> PasswordHash {
    Sha256::digest(password).into()
}

/// Whether a command may run before the client logs in: AUTH, HELLO, PING, QUIT and RESET.
/// `name` is the command name as sent (any case).
pub fn allowed_before_auth(name: &[u8]) -> bool {
    ["auth", "hello", "ping", "quit", "reset"]
        .iter()
        .any(|allowed| name.eq_ignore_ascii_case(allowed.as_bytes()))
}

/// Which commands a user may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Every command (`+@all`).
    All,
    /// Commands that only read (`+@read`) and the connection commands that change nothing but
    /// the connection's own state; not CONFIG, nor the ACL subcommands that show users, nor any
    /// command not known to be harmless (the session decides, failing closed).
    ReadOnly,
}

/// One user.
#[derive(Clone, PartialEq, Eq)]
pub struct User {
    /// The name it logs in with.
    pub name: String,
    /// Whether it may log in at all (`on`/`off`).
    pub enabled: bool,
    /// Whether it takes any password (`nopass`); its hashes are then ignored.
    pub nopass: bool,
    /// SHA-256 hashes of its passwords; any one of them logs it in.
    pub passwords: Vec<PasswordHash>,
    /// Glob patterns of the keys it may name (`*` for all).
    pub keys: Vec<Bytes>,
    /// The commands it may run.
    pub access: Access,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the password hashes, not even in a debug line: they can be brute-forced.
        f.debug_struct("User")
            .field("name", &self.name)
            .field("enabled", &self.enabled)
            .field("nopass", &self.nopass)
            .field("passwords", &self.passwords.len())
            .field("keys", &self.keys)
            .field("access", &self.access)
            .finish()
    }
}

impl User {
    /// The default user of a node without passwords: on, any password, every key and command.
    pub fn open_default() -> User {
        User {
            name: DEFAULT_USER.to_owned(),
            enabled: true,
            nopass: true,
            passwords: Vec::new(),
            keys: vec![Bytes::from_static(b"*")],
            access: Access::All,
        }
    }

    /// Whether the user may name `key`.
    pub fn may_access(&self, key: &[u8]) -> bool {
        self.keys.iter().any(|pattern| glob_match(pattern, key))
    }

    /// Whether the user may name every key (a pattern `*`): what the commands over the whole
    /// keyspace (SCAN, KEYS, RANDOMKEY, FLUSHALL) require.
    pub fn may_access_every_key(&self) -> bool {
        self.keys.iter().any(|pattern| &pattern[..] == b"*")
    }

    /// The user as `ACL LIST` shows it, in Redis's rule syntax.
    pub fn rules(&self) -> String {
        let mut line = format!(
            "user {} {}",
            self.name,
            if self.enabled { "on" } else { "off" }
        );
        if self.nopass {
            line.push_str(" nopass");
        }
        for hash in &self.passwords {
            line.push_str(" #");
            line.extend(hash.iter().map(|b| format!("{b:02x}")));
        }
        for pattern in &self.keys {
            line.push_str(" ~");
            line.push_str(&String::from_utf8_lossy(pattern));
        }
        line.push_str(" resetchannels");
        line.push_str(match self.access {
            Access::All => " +@all",
            Access::ReadOnly => " -@all +@read +@connection",
        });
        line
    }
}

/// Which user of an [`Acl`] a connection is logged in as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserId(usize);

/// The users of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    /// Sorted by name; `default` is among them.
    users: Vec<User>,
}

impl Default for Acl {
    fn default() -> Acl {
        Acl::open()
    }
}

/// The ACL subcommands logless answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AclCommand {
    /// `ACL WHOAMI`.
    WhoAmI,
    /// `ACL LIST`.
    List,
    /// `ACL USERS`.
    Users,
    /// `ACL CAT [category]`.
    Cat(Option<Bytes>),
}

impl AclCommand {
    /// Whether it shows the node's users (LIST, USERS), which a read-only user may not see.
    pub fn shows_users(&self) -> bool {
        matches!(self, AclCommand::List | AclCommand::Users)
    }
}

impl Acl {
    /// A node without passwords: only the open default user.
    pub fn open() -> Acl {
        Acl {
            users: vec![User::open_default()],
        }
    }

    /// The node's users; the open default user is added if none is called `default`. Names
    /// must be distinct, non-empty and without spaces; a user that is not `nopass` and has no
    /// password can never log in, which is allowed (as in Redis).
    pub fn new(mut users: Vec<User>) -> Result<Acl, String> {
        if let Some(bad) = users
            .iter()
            .find(|u| u.name.is_empty() || !u.name.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(format!(
                "user name {:?} must be non-empty printable ASCII without spaces",
                bad.name
            ));
        }
        if !users.iter().any(|u| u.name == DEFAULT_USER) {
            users.push(User::open_default());
        }
        users.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(twice) = users.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(format!("user {:?} is defined twice", twice[0].name));
        }
        Ok(Acl { users })
    }

    /// The users, by name.
    pub fn users(&self) -> &[User] {
        &self.users
    }

    /// The user logged in as `id`.
    pub fn user(&self, id: UserId) -> &User {
        &self.users[id.0]
    }

    fn find(&self, name: &[u8]) -> Option<usize> {
        self.users
            .binary_search_by(|u| u.name.as_bytes().cmp(name))
            .ok()
    }

    /// Who a new connection is: the default user if it is on and takes any password, else
    /// nobody (the connection must log in).
    pub fn initial_user(&self) -> Option<UserId> {
        let default = self.find(DEFAULT_USER.as_bytes())?;
        let user = &self.users[default];
        (user.enabled && user.nopass).then_some(UserId(default))
    }

    /// Whether new connections must log in before they may run commands.
    pub fn requires_auth(&self) -> bool {
        self.initial_user().is_none()
    }

    /// Whether `AUTH password` (no user name) is Redis's error rather than a login: the
    /// default user takes any password, so there is nothing to check.
    pub fn default_takes_any_password(&self) -> bool {
        self.initial_user().is_some()
    }

    /// Logs in as `name` with `password`, if the user exists, is on and takes the password.
    /// Takes the same time whatever the outcome, up to the number of hashes compared.
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<UserId> {
        let candidate = hash_password(password);
        let found = self.find(name);
        let Some(index) = found else {
            // Compare with a hash no password has, so that an unknown user costs what a
            // known one does.
            let _ = constant_time_eq(&candidate, &[0; 32]);
            return None;
        };
        let user = &self.users[index];
        let mut matched = user.nopass;
        for hash in &user.passwords {
            matched |= constant_time_eq(&candidate, hash);
        }
        (matched && user.enabled).then_some(UserId(index))
    }

    /// Whether `user` may run the command `spec` describes on `keys`, given whether this
    /// request of it only reads (see [`Access::ReadOnly`]); the NOPERM error if not.
    pub fn check<'k>(
        &self,
        user: UserId,
        spec: &CommandSpec,
        reads_only: bool,
        mut keys: impl Iterator<Item = &'k [u8]>,
    ) -> Result<(), String> {
        let user = self.user(user);
        if user.access == Access::ReadOnly && !reads_only {
            return Err(format!(
                "NOPERM User {} has no permissions to run the '{}' command",
                user.name, spec.name
            ));
        }
        if keys.any(|key| !user.may_access(key)) {
            return Err(NOPERM_KEY.to_owned());
        }
        Ok(())
    }

    /// The reply to an ACL subcommand from a connection logged in as `user`.
    pub fn answer(&self, user: UserId, command: &AclCommand) -> Value {
        let bulk = |s: &str| Value::Bulk(Bytes::copy_from_slice(s.as_bytes()));
        match command {
            AclCommand::WhoAmI => bulk(&self.user(user).name),
            AclCommand::Users => Value::Array(self.users.iter().map(|u| bulk(&u.name)).collect()),
            AclCommand::List => Value::Array(self.users.iter().map(|u| bulk(&u.rules())).collect()),
            AclCommand::Cat(None) => Value::Array(CATEGORIES.iter().map(|c| bulk(c)).collect()),
            AclCommand::Cat(Some(category)) => {
                let Some(category) = CATEGORIES
                    .iter()
                    .find(|c| category.eq_ignore_ascii_case(c.as_bytes()))
                else {
                    return Value::Error(format!(
                        "ERR Unknown category '{}'",
                        String::from_utf8_lossy(&category[..category.len().min(128)])
                    ));
                };
                let flag = if *category == "read" {
                    "readonly"
                } else {
                    "write"
                };
                Value::Array(
                    crate::table::command_names()
                        .filter(|spec| spec.flags.contains(&flag))
                        .map(|spec| bulk(spec.name))
                        .collect(),
                )
            }
        }
    }
}

/// Parses `ACL subcommand ...` (`args[0]` is `ACL`, at least two arguments).
pub fn parse_acl(args: &[Bytes]) -> Result<AclCommand, String> {
    let sub = &args[1];
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    let arity = |name: &str, ok: bool, command: AclCommand| {
        if ok {
            Ok(command)
        } else {
            Err(format!(
                "ERR wrong number of arguments for 'acl|{name}' command"
            ))
        }
    };
    if is("whoami") {
        arity("whoami", args.len() == 2, AclCommand::WhoAmI)
    } else if is("list") {
        arity("list", args.len() == 2, AclCommand::List)
    } else if is("users") {
        arity("users", args.len() == 2, AclCommand::Users)
    } else if is("cat") {
        arity(
            "cat",
            args.len() <= 3,
            AclCommand::Cat(args.get(2).cloned()),
        )
    } else {
        Err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. logless answers \
             ACL WHOAMI, LIST, USERS and CAT; users are configured when a replica starts",
            String::from_utf8_lossy(&sub[..sub.len().min(128)])
        ))
    }
}

/// Compares two hashes in time that does not depend on where they differ.
fn constant_time_eq(a: &PasswordHash, b: &PasswordHash) -> bool {
    let difference = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// Whether `text` matches the glob `pattern` by Redis's rules (see [`logless_commands::glob`]).
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    logless_commands::glob::Glob::new(pattern).matches(text)
}
