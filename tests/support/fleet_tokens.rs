//! A fleet node's tokens read in tests (`query::fleet_token`: `f1.` and base64 of JSON rows
//! `[host, stream creation time, sequence]`): a token's places per host, and whether one token
//! is ever behind another (a token may never go back on any host).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A token's places: host → (stream generation, sequence). `None`: not a fleet token.
pub fn places(token: &str) -> Option<BTreeMap<String, (String, u64)>> {
    let bytes = URL_SAFE_NO_PAD.decode(token.strip_prefix("f1.")?).ok()?;
    let rows: Vec<(String, String, u64)> = serde_json::from_slice(&bytes).ok()?;
    Some(rows.into_iter().map(|(h, c, s)| (h, (c, s))).collect())
}

/// How far a token has come: a host daemon's sequence, or the sum of a fleet token's
/// sequences (it grows whenever any host's place does).
pub fn progress(token: &str) -> u64 {
    match places(token) {
        Some(p) => p.values().map(|(_, s)| s).sum(),
        None => {
            vk_observer_store::token::Token::parse(token)
                .expect("a token")
                .seq
        }
    }
}

/// True when `new` is behind `old` on some host of the same stream generation (or, for host
/// daemon tokens, a lower sequence).
pub fn went_back(old: &str, new: &str) -> bool {
    match (places(old), places(new)) {
        (Some(o), Some(n)) => o
            .iter()
            .any(|(host, (created, seq))| n.get(host).is_none_or(|(c, s)| c == created && s < seq)),
        _ => progress(new) < progress(old),
    }
}
