//! The two logs VK keeps per execution process. Shared by upstream (which route to call), store
//! (which table holds it, in `store::keys`) and query (which one a tool reads).

/// Which log of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    /// VK's normalized entries (assistant messages, tool calls, …).
    Normalized,
    /// The process's stdout/stderr chunks.
    Raw,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Normalized => "normalized",
            Channel::Raw => "raw",
        }
    }
}
