//! Which dialect VK speaks (`upstream::dialect`), recorded in `/healthz` and the log: the fork's
//! followers run only on a VK of the fork's dialect (`follow`). A VK of the workspace-first dialect (VK 0.1.x)
//! or of neither is named in the log and in `/healthz` and left alone, so nothing of it reaches
//! the cache until a follower of its dialect exists (issue 38).
//!
//! `upstream_dialect = "auto"` asks VK (when and how often: `follow`). A fixed setting is
//! obeyed without asking.

use vk_observer_config::DialectSetting;
use vk_observer_telemetry::health::{DialectFacts, Health};
use vk_observer_upstream::VkClient;
use vk_observer_upstream::dialect::{self, Detection, Dialect};

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

/// Writes what VK said into `health`, says it in the log when it changed, and what follows.
pub(crate) fn record(health: &Health, d: &Detection) -> Verdict {
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
    let changed = health.dialect().dialect != facts.dialect;
    if changed && followed {
        tracing::info!(detail = %facts.detail, "VK speaks the fork's dialect");
    } else if changed {
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
