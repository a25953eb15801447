//! Tokens every node of a fleet understands (issue 40, design-notes §23). A fleet node prints a
//! token as the place it had reached in each host's stream (`f1.` and the places, base64 of
//! JSON), read from its clock (`store::fleet_clock`), so a client moved to another node of the
//! same fleet (a load balancer, a node gone) goes on from the same changes: another node reads
//! each place back into its own tokens (`Cut`). A host daemon's tokens stay `<epoch>.<n>`.
//!
//! Judged on another node, a token is: `foreign_token` when it is a host daemon's, or names
//! host streams none of which this node holds (another fleet); `not_ready` (retryable) while
//! this node has not yet applied a place the client already saw; a reset when a host's stream
//! was recreated since; otherwise a cut: a local token was seen by the client when it is at or
//! below the cut of the host whose message it applied.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;

use vk_observer_store::StoreReader;
use vk_observer_store::fleet_clock::{HostMark, MarkCut};
use vk_observer_tool_error::{ErrorCode, InvalidReason, ToolError};

/// What a fleet node's tokens start with (a host daemon's are 16 hex digits and a dot).
pub(crate) const PREFIX: &str = "f1.";

/// What a client's token means in this daemon's local tokens.
#[derive(Clone)]
pub struct Cut {
    /// Every local token at or below it was seen by the client.
    floor: u64,
    /// A fleet node's cut per host, for the tokens above the floor.
    hosts: Option<Arc<HostCuts>>,
}

struct HostCuts {
    /// The last local token of each host whose message the client had seen.
    by_host: BTreeMap<String, u64>,
    /// Every local token above it is unseen.
    ceil: u64,
    /// The client's places, merged into the tokens answered after it.
    marks: Vec<HostMark>,
    reader: StoreReader,
}

impl Cut {
    /// A host daemon's token: everything at or below `n` was seen.
    pub fn local(n: u64) -> Self {
        Cut {
            floor: n,
            hosts: None,
        }
    }

    /// Every local token at or below it was seen; above it, ask [`Cut::saw`].
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// True when the client had seen the change local token `t` made. On a fleet node, a
    /// token of no host (the node's own retention pass) above the floor counts as unseen: it
    /// may be told twice, never missed.
    pub fn saw(&self, t: u64) -> bool {
        if t <= self.floor {
            return true;
        }
        let Some(h) = &self.hosts else {
            return false;
        };
        if t > h.ceil {
            return false;
        }
        match h.reader.fleet_host_of(t) {
            Ok(Some(host)) => h.by_host.get(&host).is_some_and(|cut| t <= *cut),
            _ => false,
        }
    }

    /// The cut as one local token for the changes of one host (an attempt's, a process's: all
    /// of one host on a fleet node): at or below it seen, above it not. `host` is the row's
    /// `host` (`None` on a host daemon: the floor).
    pub fn for_host(&self, host: Option<&str>) -> u64 {
        match (&self.hosts, host) {
            (Some(h), Some(host)) => h.by_host.get(host).copied().unwrap_or(0),
            _ => self.floor,
        }
    }

    /// The client's places (a fleet node's cut), to merge into the token answered.
    pub(crate) fn marks(&self) -> &[HostMark] {
        self.hosts.as_ref().map_or(&[], |h| &h.marks)
    }
}

impl PartialEq for Cut {
    fn eq(&self, other: &Self) -> bool {
        self.floor == other.floor && self.marks() == other.marks()
    }
}

impl std::fmt::Debug for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cut")
            .field("floor", &self.floor)
            .field("marks", &self.marks())
            .finish()
    }
}

/// Print places as a fleet token.
pub(crate) fn print(marks: &[HostMark]) -> String {
    let rows: Vec<(&str, &str, u64)> = marks
        .iter()
        .map(|m| (m.host.as_str(), m.created.as_str(), m.seq))
        .collect();
    let json = serde_json::to_vec(&rows).unwrap_or_default();
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
}

/// The places of a fleet token (`None`: not one).
fn parse(raw: &str) -> Option<Vec<HostMark>> {
    let bytes = URL_SAFE_NO_PAD.decode(raw.strip_prefix(PREFIX)?).ok()?;
    let rows: Vec<(String, String, u64)> = serde_json::from_slice(&bytes).ok()?;
    Some(
        rows.into_iter()
            .map(|(host, created, seq)| HostMark { host, created, seq })
            .collect(),
    )
}

/// Per host, the later of two lists' places (the same generation: the higher sequence; another
/// generation: `b`'s, the node's own).
pub(crate) fn merge(a: &[HostMark], b: Vec<HostMark>) -> Vec<HostMark> {
    let mut by_host: BTreeMap<String, HostMark> =
        a.iter().map(|m| (m.host.clone(), m.clone())).collect();
    for m in b {
        match by_host.get(&m.host) {
            Some(old) if old.created == m.created && old.seq > m.seq => {}
            _ => {
                by_host.insert(m.host.clone(), m);
            }
        }
    }
    by_host.into_values().collect()
}

/// What a fleet node makes of a client's token.
pub(crate) enum Judged {
    Cut(Cut),
    /// A host's stream is another generation than the one the token names.
    Reset,
}

/// Judge `raw` on a fleet node whose places per host are `applied` (stream creation time,
/// last sequence applied), reading its clock through `reader`.
pub(crate) fn judge(
    raw: &str,
    field: &str,
    reader: StoreReader,
    applied: &BTreeMap<String, (String, u64)>,
) -> Result<Judged, ToolError> {
    let Some(marks) = parse(raw) else {
        return Err(if raw.starts_with(PREFIX) {
            malformed(field)
        } else {
            foreign(field, "a host daemon's token (or none of this fleet's)")
        });
    };
    let mut by_host = BTreeMap::new();
    let mut behind = Vec::new();
    let mut known = 0;
    let mut reset = false;
    for mark in &marks {
        let here = applied.get(&mark.host);
        if let Some((created, seq)) = here
            && *created == mark.created
            && mark.seq > *seq
        {
            behind.push(json!({"host": mark.host, "seen": mark.seq, "applied": seq}));
        }
        match reader.fleet_cut_of(mark).map_err(ToolError::internal)? {
            MarkCut::At(t) => {
                known += 1;
                by_host.insert(mark.host.clone(), t);
            }
            MarkCut::UnknownGeneration if here.is_some() => reset = true,
            // A host this node has not found (when no host is known: another fleet's token).
            // Not waited for: its stream may be gone for good; its changes, once found, are
            // told as new (twice, never missed).
            MarkCut::UnknownGeneration => {}
        }
    }
    if !marks.is_empty() && known == 0 && !reset {
        return Err(foreign(field, "a token of another fleet"));
    }
    if !behind.is_empty() {
        return Err(ToolError::new(
            ErrorCode::NotReady,
            true,
            "This fleet node has not yet applied every change the token has seen (it came from another node of the fleet). Retry in a moment with the same token.",
        )
        .with_details(json!({"reason": "fleet_behind", "hosts": behind})));
    }
    if reset {
        return Ok(Judged::Reset);
    }
    // A host of this node the token does not name: the client saw none of it.
    let floor = applied
        .keys()
        .map(|h| by_host.get(h).copied().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let ceil = by_host.values().copied().max().unwrap_or(0);
    Ok(Judged::Cut(Cut {
        floor: floor.min(ceil),
        hosts: Some(Arc::new(HostCuts {
            by_host,
            ceil,
            marks,
            reader,
        })),
    }))
}

fn malformed(field: &str) -> ToolError {
    ToolError::invalid_field(
        field,
        format!(
            "Malformed token. Pass the `token` string from a previous response, or omit `{field}`."
        ),
    )
}

/// A token of another kind of daemon or another fleet.
pub(crate) fn foreign(field: &str, what: &str) -> ToolError {
    ToolError::invalid_because(
        InvalidReason::ForeignToken,
        format!(
            "`{field}` is {what}: this daemon cannot tell what it has seen. Omit `{field}` to read the current state, and pass the `token` this daemon answers from then on."
        ),
        json!({"field": field}),
    )
}
