//! Which dialect VK speaks (`upstream::dialect`), settled before the fork's followers start:
//! they start only on a VK of the fork's dialect. A VK of the workspace-first dialect (VK 0.1.x)
//! or of neither is named in the log and in `/healthz` and left alone, so nothing of it reaches
//! the cache until a follower of its dialect exists (issue 38).
//!
//! `upstream_dialect = "auto"` asks VK. While VK does not answer, the fork's followers start as
//! they always did (their own reconnects report VK down) and the asking goes on beside them: an
//! answer naming another dialect stops them. A fixed setting is obeyed without asking.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use vk_observer_config::DialectSetting;
use vk_observer_telemetry::health::{DialectFacts, Health};
use vk_observer_upstream::VkClient;
use vk_observer_upstream::dialect::{self, Detection, Dialect};

use super::backoff::Reconnect;

/// How often a VK that speaks no followed dialect is asked again (it may be replaced).
const ASK_AGAIN: Duration = Duration::from_secs(60);

/// What ingest does next.
pub(crate) enum Verdict {
    /// Start the fork's followers.
    FollowFork,
    /// Follow nothing (the facts are in `/healthz` and the log).
    Stay,
    /// VK did not answer: start the fork's followers and keep asking.
    NotYet,
}

/// The first decision: from the setting, or from VK's first answer.
pub(crate) async fn first(client: &VkClient, setting: DialectSetting, health: &Health) -> Verdict {
    match setting {
        DialectSetting::Fork => {
            health.set_dialect(configured(Dialect::Fork, true));
            Verdict::FollowFork
        }
        DialectSetting::Workspaces => {
            let facts = configured(Dialect::Workspaces, false);
            tracing::error!(detail = %facts.detail, "VK's dialect is set to workspaces");
            health.set_dialect(facts);
            Verdict::Stay
        }
        DialectSetting::Auto => match dialect::detect(client).await {
            Ok(d) => record(health, &d),
            Err(e) => {
                tracing::debug!(error = %e, "VK's dialect: not answered yet");
                Verdict::NotYet
            }
        },
    }
}

/// Asks VK until it answers, beside the fork's followers if they run (`followers`): cancels
/// them when VK speaks another dialect. Then, while nothing is followed, asks again every
/// minute. True when the fork's followers are to start now (VK turned out, or became, a fork).
pub(crate) async fn keep_asking(
    client: VkClient,
    health: Arc<Health>,
    mut followers: Option<CancellationToken>,
    cancel: CancellationToken,
) -> bool {
    let mut delays = Reconnect::new(Duration::from_millis(500), Duration::from_secs(30));
    // The first asking just happened (`first`): unanswered, or answered with a dialect not followed.
    let mut wait = if followers.is_some() {
        delays.next_delay()
    } else {
        ASK_AGAIN
    };
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = match dialect::detect(&client).await {
            Err(_) => delays.next_delay(),
            Ok(d) => match record(&health, &d) {
                Verdict::FollowFork => return followers.is_none(),
                _ => {
                    if let Some(f) = followers.take() {
                        f.cancel();
                    }
                    ASK_AGAIN
                }
            },
        };
    }
}

/// Writes what VK said into `health`, says it in the log, and what follows from it.
fn record(health: &Health, d: &Detection) -> Verdict {
    let followed = d.dialect == Some(Dialect::Fork);
    let detail = match d.dialect {
        Some(Dialect::Fork) => d.evidence.clone(),
        Some(Dialect::Workspaces) => format!(
            "{}; this build recognises VK 0.1.x but does not follow its streams yet: nothing \
             is cached (issue 38)",
            d.evidence
        ),
        None => format!(
            "{}; not a VK dialect this build knows: nothing is followed",
            d.evidence
        ),
    };
    let facts = DialectFacts {
        dialect: d.dialect.map_or("neither", Dialect::as_str).into(),
        version: d.version.clone(),
        by: "detected".into(),
        followed,
        detail,
    };
    if followed {
        tracing::info!(detail = %facts.detail, "VK speaks the fork's dialect");
    } else {
        tracing::error!(dialect = %facts.dialect, detail = %facts.detail, "VK is not followed");
    }
    health.set_dialect(facts);
    if followed {
        Verdict::FollowFork
    } else {
        Verdict::Stay
    }
}

fn configured(d: Dialect, followed: bool) -> DialectFacts {
    let detail = if followed {
        format!("set by upstream_dialect: {}", d.describe())
    } else {
        format!(
            "set by upstream_dialect: {}, which this build recognises but does not follow yet: \
             nothing is cached (issue 38)",
            d.describe()
        )
    };
    DialectFacts {
        dialect: d.as_str().into(),
        version: None,
        by: "configured".into(),
        followed,
        detail,
    }
}
