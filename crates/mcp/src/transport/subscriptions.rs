//! Resource subscriptions: `notifications/resources/updated` straight from the store's notify
//! hub, with no polling.
//!
//! Why an update is never missed: a subscription takes its hub receiver before it answers the
//! subscribe, and a watch receiver remembers the last value it saw, so a commit that lands after
//! the subscribe (even while an earlier notification is being sent) leaves the receiver
//! "changed" until it is looked at. The writer publishes the global token before the per-attempt
//! channels fire (`store::notify`), so a client that reads the resource when notified sees the
//! commit it was told about. Commits that land while a notification is on its way fold into the
//! next one (watch channels keep only the latest token): one update per burst, not per commit.
//!
//! Two ways in, one watcher ([`Watches`]):
//! - `resources/subscribe` / `unsubscribe` (sessions that began with `initialize`): the session's
//!   URIs live in its handler ([`SessionSubscriptions`], one per session since rmcp builds one
//!   handler per session); the first subscribe starts ONE task for the session, which holds every
//!   receiver and sends the updates through the session's peer. The task ends when the session
//!   ends: the handler is dropped (session `DELETE`, idle expiry, transport closed), which
//!   closes the task's command channel; at daemon shutdown; or when a send fails.
//! - `subscriptions/listen` (protocol 2026-07-28): the listen request itself holds its URIs'
//!   receivers for as long as it runs; nothing is spawned.
//!
//! A session may hold at most `[mcp] max_subscriptions_per_session` URIs; a listen accepts at
//! most that many (the acknowledgment says which). Stateless JSON mode has no session and no
//! stream to push on: there subscribe is refused with a hint, listen is not offered, and the
//! capability does not advertise `subscribe`.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use rmcp::model::{ResourceUpdatedNotificationParam, SubscriptionFilter};
use rmcp::service::SubscriptionContext;
use rmcp::{ErrorData, Peer, RoleServer};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;

use super::resources::{Resource, Wake};
use vk_observer_query::Query;
use vk_observer_tool_error::ToolError;

/// What every session's subscriptions share.
#[derive(Clone)]
pub(crate) struct Subscribing {
    pub query: Query,
    /// `[mcp] max_subscriptions_per_session`.
    pub cap: usize,
    /// The daemon's shutdown: every watcher ends with it.
    pub shutdown: CancellationToken,
}

/// The hub receivers of a set of subscribed URIs, counted in
/// `health.resource_subscriptions` while held and released from the hub when dropped.
pub(crate) struct Watches {
    query: Query,
    streams: StreamMap<String, WatchStream<u64>>,
    wakes: HashMap<String, Wake>,
}

impl Watches {
    pub(crate) fn new(query: Query) -> Self {
        Watches {
            query,
            streams: StreamMap::new(),
            wakes: HashMap::new(),
        }
    }

    fn add(&mut self, res: &Resource) {
        if self.wakes.contains_key(&res.uri) {
            return;
        }
        let Some(wake) = res.wake().resolved(&self.query) else {
            return; // a task id no call handed out: nothing to wake on (its read refused it)
        };
        let hub = self.query.store.hub();
        let rx = match wake {
            Wake::Attempt(id) => hub.subscribe_attempt(id),
            Wake::Project(id) => hub.subscribe_project(id),
            Wake::Task(_) => return,
        };
        // Only commits after this point count: the receiver has seen the current value.
        self.streams
            .insert(res.uri.clone(), WatchStream::from_changes(rx));
        self.wakes.insert(res.uri.clone(), wake);
        self.count(1);
    }

    fn remove(&mut self, uri: &str) {
        if let Some(wake) = self.wakes.remove(uri) {
            self.streams.remove(uri);
            release(&self.query, wake);
            self.count(-1);
        }
    }

    fn count(&self, delta: i64) {
        let n = &self.query.health.resource_subscriptions;
        if delta >= 0 {
            n.fetch_add(delta as u64, Ordering::Relaxed);
        } else {
            n.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// The next URI whose resource may have changed; pending forever while nothing is held.
    async fn changed(&mut self) -> String {
        match self.streams.next().await {
            Some((uri, _token)) => uri,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        let wakes: Vec<Wake> = self.wakes.drain().map(|(_, w)| w).collect();
        self.streams.clear();
        for wake in &wakes {
            release(&self.query, *wake);
        }
        self.count(-(wakes.len() as i64));
    }
}

/// Drop the hub channel if this was its last listener (idle daemons hold no per-id state).
fn release(query: &Query, wake: Wake) {
    match wake {
        Wake::Attempt(id) => query.store.hub().release(&[id], &[]),
        Wake::Project(id) => query.store.hub().release(&[], &[id]),
        Wake::Task(_) => {} // never held: resolved to its attempt when added
    }
}

enum Command {
    Watch(Resource),
    Unwatch(String),
}

/// One session's `resources/subscribe` set. Dropped with the session's handler, which ends the
/// session's watcher task (its command channel closes).
pub(crate) struct SessionSubscriptions {
    shared: Subscribing,
    state: Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    uris: HashSet<String>,
    /// Commands to the session's watcher task, once the first subscribe started it.
    task: Option<mpsc::UnboundedSender<Command>>,
}

impl SessionSubscriptions {
    /// Cheap: rmcp builds a handler for every session and some lookups; the task starts with
    /// the first subscribe.
    pub(crate) fn new(shared: Subscribing) -> Self {
        SessionSubscriptions {
            shared,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SessionState> {
        // Single inserts and removes: a panic elsewhere cannot leave the set half-changed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribe the session to `uri`: the resource must exist (it is read once), and the
    /// session must be under its cap. Subscribing twice is one subscription.
    pub(crate) fn subscribe(&self, uri: &str, peer: &Peer<RoleServer>) -> Result<(), ErrorData> {
        let res = Resource::parse(uri)?;
        res.read(&self.shared.query)?;
        let mut state = self.lock();
        if state.uris.contains(&res.uri) {
            return Ok(());
        }
        if state.uris.len() >= self.shared.cap {
            return Err(too_many(self.shared.cap));
        }
        let task = state
            .task
            .get_or_insert_with(|| spawn_watcher(&self.shared, peer.clone()));
        if task.send(Command::Watch(res.clone())).is_err() {
            // The watcher ended (daemon shutdown, or the session's stream is gone), and with it
            // every subscription it held.
            state.task = None;
            state.uris.clear();
            return Err(ErrorData::internal_error(
                "this session can no longer receive notifications; open a new session",
                None,
            ));
        }
        state.uris.insert(res.uri);
        Ok(())
    }

    /// End the session's subscription to `uri` (none held is not an error).
    pub(crate) fn unsubscribe(&self, uri: &str) -> Result<(), ErrorData> {
        let res = Resource::parse(uri)?;
        let mut state = self.lock();
        if state.uris.remove(&res.uri)
            && let Some(task) = &state.task
        {
            let _ = task.send(Command::Unwatch(res.uri));
        }
        Ok(())
    }
}

fn too_many(cap: usize) -> ErrorData {
    let e = ToolError::new(
        vk_observer_tool_error::ErrorCode::TooManySubscriptions,
        false,
        format!(
            "This session already holds {cap} resource subscriptions, its cap: resources/unsubscribe some first, or raise [mcp] max_subscriptions_per_session."
        ),
    )
    .with_details(serde_json::json!({ "max_subscriptions_per_session": cap }));
    ErrorData::invalid_request(e.hint.clone(), serde_json::to_value(&e).ok())
}

/// The session's one watcher task; returns its command channel.
fn spawn_watcher(shared: &Subscribing, peer: Peer<RoleServer>) -> mpsc::UnboundedSender<Command> {
    let (tx, rx) = mpsc::unbounded_channel();
    let watches = Watches::new(shared.query.clone());
    tokio::spawn(watch_session(peer, rx, watches, shared.shutdown.clone()));
    tx
}

async fn watch_session(
    peer: Peer<RoleServer>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut watches: Watches,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            command = commands.recv() => match command {
                Some(Command::Watch(res)) => watches.add(&res),
                Some(Command::Unwatch(uri)) => watches.remove(&uri),
                // The session's handler is gone: the session ended.
                None => return,
            },
            uri = watches.changed() => {
                let sent = peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await;
                if sent.is_err() {
                    return;
                }
                metrics::counter!(vk_observer_telemetry::RESOURCE_UPDATES).increment(1);
            }
        }
    }
}

impl SessionSubscriptions {
    /// The URIs of `requested` a `subscriptions/listen` gets: those naming a cached resource,
    /// at most the cap (the acknowledgment tells the client which).
    pub(crate) fn listen_filter(&self, requested: &SubscriptionFilter) -> SubscriptionFilter {
        listen_filter(&self.shared.query, self.shared.cap, requested)
    }

    /// Run one `subscriptions/listen` until the client cancels it or the daemon stops.
    pub(crate) async fn listen(&self, ctx: SubscriptionContext) -> Result<(), ErrorData> {
        listen(ctx, &self.shared).await
    }
}

fn listen_filter(query: &Query, cap: usize, requested: &SubscriptionFilter) -> SubscriptionFilter {
    let uris: Vec<String> = requested
        .resource_subscriptions
        .iter()
        .flatten()
        .filter(|uri| {
            Resource::parse(uri)
                .and_then(|r| r.read(query).map(|_| ()))
                .is_ok()
        })
        .take(cap)
        .cloned()
        .collect();
    SubscriptionFilter::builder()
        .resource_subscriptions(uris)
        .build()
}

async fn listen(ctx: SubscriptionContext, shared: &Subscribing) -> Result<(), ErrorData> {
    let mut watches = Watches::new(shared.query.clone());
    for uri in ctx.accepted().resource_subscriptions.iter().flatten() {
        match Resource::parse(uri) {
            Ok(res) => watches.add(&res),
            Err(e) => return Err(e),
        }
    }
    loop {
        tokio::select! {
            biased;
            _ = ctx.cancelled() => return Ok(()),
            _ = shared.shutdown.cancelled() => return Ok(()),
            uri = watches.changed() => {
                if ctx.sink().notify_resource_updated(uri).await.is_err() {
                    return Ok(());
                }
                metrics::counter!(vk_observer_telemetry::RESOURCE_UPDATES).increment(1);
            }
        }
    }
}

/// The refusal of `resources/subscribe` where no session can carry a notification.
pub(crate) fn stateless_refusal() -> ErrorData {
    let e = ToolError::new(
        vk_observer_tool_error::ErrorCode::SubscriptionsUnavailable,
        false,
        "This daemon serves MCP statelessly (--mcp-stateless): no session, no stream to notify on. Poll with wait_for_attempt_change, or use a daemon in session mode.",
    );
    ErrorData::invalid_request(e.hint.clone(), serde_json::to_value(&e).ok())
}
