//! Who follows which resource through the stdio bridge: its one stdio client's
//! `resources/subscribe` URIs (protocol 2025-11-25) and its running `subscriptions/listen`
//! requests (2026-07-28). The bridge's daemon leg is one daemon session: it is subscribed to a
//! URI while anyone here follows it (first follower in → subscribe, last out → unsubscribe),
//! and each update the daemon sends reaches exactly the followers of its URI. Pure
//! bookkeeping; the bridge makes the daemon calls.

use std::collections::{HashMap, HashSet};

use rmcp::{Peer, RoleServer};
use tokio::sync::mpsc;

/// One running `subscriptions/listen`.
struct Listen {
    uris: HashSet<String>,
    updates: mpsc::UnboundedSender<String>,
}

#[derive(Default)]
pub(super) struct Followers {
    /// The stdio peer that used `resources/subscribe`, and its URIs.
    peer: Option<Peer<RoleServer>>,
    subscribed: HashSet<String>,
    listens: HashMap<u64, Listen>,
    next_listen: u64,
}

/// Where one update goes.
pub(super) struct Targets {
    pub peer: Option<Peer<RoleServer>>,
    pub listens: Vec<mpsc::UnboundedSender<String>>,
}

impl Followers {
    /// Whether anyone here follows `uri` (the daemon leg is subscribed to it then).
    fn followed(&self, uri: &str) -> bool {
        self.subscribed.contains(uri) || self.listens.values().any(|l| l.uris.contains(uri))
    }

    /// `resources/subscribe` of `uri` by `peer`: None when already subscribed (subscribing
    /// twice is one subscription), else whether the daemon leg must subscribe.
    pub(crate) fn subscribe(&mut self, uri: &str, peer: Peer<RoleServer>) -> Option<bool> {
        self.peer = Some(peer);
        let first = !self.followed(uri);
        self.subscribed.insert(uri.to_string()).then_some(first)
    }

    /// `resources/unsubscribe` of `uri`: whether the daemon leg must unsubscribe.
    pub(crate) fn unsubscribe(&mut self, uri: &str) -> bool {
        self.subscribed.remove(uri) && !self.followed(uri)
    }

    /// A new listen on `uris`: its id, its updates, and the URIs the daemon leg must subscribe.
    pub(crate) fn listen(
        &mut self,
        uris: HashSet<String>,
    ) -> (u64, mpsc::UnboundedReceiver<String>, Vec<String>) {
        let firsts = uris.iter().filter(|u| !self.followed(u)).cloned().collect();
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next_listen;
        self.next_listen += 1;
        self.listens.insert(id, Listen { uris, updates: tx });
        (id, rx, firsts)
    }

    /// Stop following `uri` in listen `id` (its daemon subscription failed): whether the daemon
    /// leg must unsubscribe.
    pub(crate) fn drop_from_listen(&mut self, id: u64, uri: &str) -> bool {
        let removed = self
            .listens
            .get_mut(&id)
            .is_some_and(|l| l.uris.remove(uri));
        removed && !self.followed(uri)
    }

    /// The end of listen `id`: the URIs the daemon leg must unsubscribe.
    pub(crate) fn end_listen(&mut self, id: u64) -> Vec<String> {
        let Some(l) = self.listens.remove(&id) else {
            return Vec::new();
        };
        l.uris.into_iter().filter(|u| !self.followed(u)).collect()
    }

    /// Who gets an update of `uri`.
    pub(crate) fn targets(&self, uri: &str) -> Targets {
        Targets {
            peer: self
                .subscribed
                .contains(uri)
                .then(|| self.peer.clone())
                .flatten(),
            listens: self
                .listens
                .values()
                .filter(|l| l.uris.contains(uri))
                .map(|l| l.updates.clone())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(uris: &[&str]) -> HashSet<String> {
        uris.iter().map(|u| u.to_string()).collect()
    }

    #[test]
    fn the_daemon_leg_is_subscribed_from_the_first_follower_to_the_last() {
        let mut f = Followers::default();
        let (a, mut rx_a, firsts) = f.listen(set(&["x", "y"]));
        assert_eq!(firsts.len(), 2);
        let (b, _rx_b, firsts) = f.listen(set(&["y", "z"]));
        assert_eq!(firsts, vec!["z".to_string()]);
        assert_eq!(f.targets("y").listens.len(), 2);
        assert!(f.targets("x").peer.is_none());
        f.targets("x").listens[0].send("x".into()).unwrap();
        assert_eq!(rx_a.try_recv().unwrap(), "x");
        let mut lasts = f.end_listen(a);
        lasts.sort();
        assert_eq!(lasts, vec!["x".to_string()], "y is still held by b");
        assert!(f.drop_from_listen(b, "z"));
        assert_eq!(f.end_listen(b), vec!["y".to_string()]);
        assert!(!f.followed("x") && !f.followed("y") && !f.followed("z"));
        assert!(f.end_listen(b).is_empty(), "ending twice releases nothing");
    }
}
