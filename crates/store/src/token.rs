//! Change tokens: one global, strictly increasing `u64` per committed batch, qualified on the wire
//! by the store epoch (a random id made when the data dir was created) as `<epoch>.<n>`.
//!
//! A token from another epoch (the store was wiped) or from the future is *stale*: callers answer
//! with the current state and `token_reset: true` instead of silently skipping changes.

use std::fmt;

/// The epoch of a data dir, printed as 16 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A token as printed for clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub epoch: Epoch,
    pub seq: u64,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.epoch, self.seq)
    }
}

/// What a client-supplied token means relative to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenCheck {
    /// Same epoch, not ahead of the store: changes after `seq` are well defined.
    Valid(u64),
    /// Another epoch or ahead of the store: answer at once with `token_reset: true`.
    Stale,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed token {0:?}: expected the opaque string returned by an earlier call")]
pub struct MalformedToken(pub String);

impl Token {
    pub fn parse(s: &str) -> Result<Token, MalformedToken> {
        let bad = || MalformedToken(s.chars().take(64).collect());
        let (e, n) = s.split_once('.').ok_or_else(bad)?;
        if e.len() != 16 {
            return Err(bad());
        }
        let epoch = u64::from_str_radix(e, 16).map_err(|_| bad())?;
        let seq = n.parse::<u64>().map_err(|_| bad())?;
        Ok(Token {
            epoch: Epoch(epoch),
            seq,
        })
    }

    /// Judge a client's token against the store's epoch and current token.
    pub fn check(self, epoch: Epoch, current: u64) -> TokenCheck {
        if self.epoch != epoch || self.seq > current {
            TokenCheck::Stale
        } else {
            TokenCheck::Valid(self.seq)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(e in any::<u64>(), s in any::<u64>()) {
            let t = Token { epoch: Epoch(e), seq: s };
            prop_assert_eq!(Token::parse(&t.to_string()), Ok(t));
        }

        #[test]
        fn garbage_never_panics(s in ".*") {
            let _ = Token::parse(&s);
        }

        #[test]
        fn other_epoch_or_future_is_stale(e in any::<u64>(), s in any::<u64>(), cur in any::<u64>()) {
            let t = Token { epoch: Epoch(e), seq: s };
            let other = Epoch(e.wrapping_add(1));
            prop_assert_eq!(t.check(other, cur), TokenCheck::Stale);
            let same = t.check(Epoch(e), cur);
            if s > cur { prop_assert_eq!(same, TokenCheck::Stale) } else { prop_assert_eq!(same, TokenCheck::Valid(s)) }
        }
    }
}
