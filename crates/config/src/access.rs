//! Who may do what on `/mcp`: the four scopes, and the scoped tokens of the tokens file.
//!
//! A scope is a class of effect on VK: `read` (every read, wait, feed and resource), `write`
//! (tasks, attempts, follow-ups, stop), `approve` (`respond_approval`) and `deliver` (rebase,
//! abort, merge, push: the effects on the git branch and remote). Which tool needs which scope
//! is one table, `mcp::tools::FAMILIES`.
//!
//! Tokens live in their own file (`[mcp] tokens_file`, default `<data_dir>/tokens.toml`), not
//! in the store and not in the config file: the store is a cache the daemon holds locked
//! (sled: one process per data dir) and may be rebuilt from VK, so the CLI could neither write
//! it while the daemon runs nor trust it to keep a revocation; the config file is a person's,
//! with comments the CLI would have to rewrite, layered under environment and flags that would
//! hide the CLI's changes. The tokens file is written only by `vk-observer token`, whole and
//! atomically (a temporary file renamed over it, mode 0600), and the daemon re-reads it when it
//! changes, so a revocation holds at the next request and across restarts. It holds only the
//! SHA-256 of each secret: a secret is 32 random bytes, so a fast hash is enough (no dictionary
//! to slow down), and each request costs one hash, not a key-derivation function's tens of
//! milliseconds.

use std::fmt;
use std::io::Write as _;
use std::path::Path;
use std::str::FromStr;

use anyhow::Context as _;
use rand::RngCore as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// A class of effect a caller may have (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Read,
    Write,
    Approve,
    Deliver,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Write, Scope::Approve, Scope::Deliver];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Approve => "approve",
            Scope::Deliver => "deliver",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Scope> {
        Scope::ALL
            .into_iter()
            .find(|k| k.as_str() == s.trim())
            .with_context(|| {
                format!("unknown scope {s:?}: the scopes are read, write, approve, deliver")
            })
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    pub(crate) const NONE: Scopes = Scopes(0);

    pub fn all() -> Scopes {
        Scopes::of(&Scope::ALL)
    }

    pub fn of(scopes: &[Scope]) -> Scopes {
        Scopes(scopes.iter().fold(0, |acc, s| acc | s.bit()))
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn is_all(self) -> bool {
        self == Scopes::all()
    }

    /// `read,write` (in `Scope::ALL`'s order); `-` for none.
    pub fn names(self) -> String {
        let names: Vec<&str> = Scope::ALL
            .into_iter()
            .filter(|s| self.contains(*s))
            .map(Scope::as_str)
            .collect();
        if names.is_empty() {
            "-".into()
        } else {
            names.join(",")
        }
    }

    /// `read,write` → the set; an empty list or an unknown name is an error.
    pub fn parse_list(list: &str) -> anyhow::Result<Scopes> {
        let scopes = list
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(Scope::from_str)
            .collect::<anyhow::Result<Vec<_>>>()?;
        anyhow::ensure!(
            !scopes.is_empty(),
            "name at least one scope (read, write, approve, deliver)"
        );
        Ok(Scopes::of(&scopes))
    }

    pub(crate) fn to_vec(self) -> Vec<Scope> {
        Scope::ALL
            .into_iter()
            .filter(|s| self.contains(*s))
            .collect()
    }
}

/// The name a caller without a token is audited and listed under.
pub const LOOPBACK_CALLER: &str = "loopback";
/// The name of the caller holding `[mcp] token` (every scope).
pub const CONFIG_TOKEN_CALLER: &str = "mcp-token";

/// Every secret starts with this, so a leaked one is recognisable in a scan.
pub(crate) const SECRET_PREFIX: &str = "vko_";

/// One token of the tokens file: its name, what it may do, and the hash of its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRecord {
    pub name: String,
    pub scopes: Vec<Scope>,
    /// The projects it may act on (empty: every project).
    #[serde(default)]
    pub projects: Vec<String>,
    /// Lowercase hex SHA-256 of the secret.
    pub sha256: String,
    /// Seconds since the Unix epoch.
    pub created_unix: u64,
}

impl TokenRecord {
    pub fn scope_set(&self) -> Scopes {
        Scopes::of(&self.scopes)
    }
}

/// The tokens file: `[[tokens]]` tables.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFile {
    #[serde(default)]
    pub tokens: Vec<TokenRecord>,
}

impl TokenFile {
    /// The file at `path`; a missing file holds no tokens.
    pub fn load(path: &Path) -> anyhow::Result<TokenFile> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text)
                .with_context(|| format!("tokens file {} does not parse", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TokenFile::default()),
            Err(e) => Err(e).with_context(|| format!("reading tokens file {}", path.display())),
        }
    }

    /// Writes the whole file: a temporary file (mode 0600) renamed over `path`.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let tmp = path.with_extension("toml.tmp");
        let text = toml::to_string(self)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
        Ok(())
    }

    /// The token whose secret this is. Every record's hash is compared in constant time.
    pub fn find(&self, secret: &str) -> Option<&TokenRecord> {
        let presented = hash_secret(secret);
        let mut found = None;
        for t in &self.tokens {
            if same(t.sha256.as_bytes(), presented.as_bytes()) {
                found = Some(t);
            }
        }
        found
    }

    /// Adds a token named `name` and returns its secret (shown once, never stored).
    pub fn create(
        &mut self,
        name: &str,
        scopes: Scopes,
        projects: Vec<String>,
    ) -> anyhow::Result<String> {
        check_name(name)?;
        anyhow::ensure!(
            !self.tokens.iter().any(|t| t.name == name),
            "a token named {name:?} exists: revoke it first or pick another name"
        );
        anyhow::ensure!(scopes != Scopes::NONE, "a token needs at least one scope");
        let secret = new_secret();
        self.tokens.push(TokenRecord {
            name: name.to_string(),
            scopes: scopes.to_vec(),
            projects,
            sha256: hash_secret(&secret),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default(),
        });
        Ok(secret)
    }

    /// Removes the token named `name`; false when there is none.
    pub fn revoke(&mut self, name: &str) -> bool {
        let before = self.tokens.len();
        self.tokens.retain(|t| t.name != name);
        self.tokens.len() != before
    }
}

/// Names are what logs and the audit trail show: short, printable, and never a caller name the
/// daemon gives itself.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    anyhow::ensure!(
        ok,
        "token name {name:?}: 1 to 64 characters of A-Z a-z 0-9 - _ ."
    );
    anyhow::ensure!(
        name != LOOPBACK_CALLER && name != CONFIG_TOKEN_CALLER,
        "token name {name:?} is reserved"
    );
    Ok(())
}

/// A new secret: the prefix and 32 random bytes in hex.
fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{SECRET_PREFIX}{hex}")
}

/// Lowercase hex SHA-256 of a secret.
pub(crate) fn hash_secret(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Constant-time comparison, so a secret cannot be guessed byte by byte from timings.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_token_is_found_by_its_secret_only_until_revoked() {
        let mut file = TokenFile::default();
        let secret = file
            .create("agent", Scopes::parse_list("read,write").unwrap(), vec![])
            .unwrap();
        assert!(secret.starts_with(SECRET_PREFIX) && secret.len() == 68);
        let text = toml::to_string(&file).unwrap();
        assert!(!text.contains(&secret), "the secret is never stored");
        let back: TokenFile = toml::from_str(&text).unwrap();
        let found = back.find(&secret).expect("found");
        assert_eq!(found.scope_set().names(), "read,write");
        assert!(back.find("vko_00").is_none());
        assert!(
            file.create("agent", Scopes::all(), vec![]).is_err(),
            "names are unique"
        );
        assert!(
            file.create("loopback", Scopes::all(), vec![]).is_err(),
            "reserved"
        );
        assert!(file.revoke("agent"));
        assert!(file.find(&secret).is_none());
    }

    #[test]
    fn scope_lists_parse_strictly() {
        assert!(Scopes::parse_list("read,admin").is_err());
        assert!(Scopes::parse_list("").is_err());
        assert!(
            Scopes::parse_list("deliver, approve")
                .unwrap()
                .contains(Scope::Approve)
        );
        assert_eq!(Scopes::all().names(), "read,write,approve,deliver");
    }
}
