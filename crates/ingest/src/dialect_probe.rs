//! Which dialect VK speaks (`upstream::dialect`), recorded in `/healthz` and the log: the fork's
//! followers run on a VK of the fork's dialect, the workspace-first ones (`workspaces`) on a VK
//! 0.1.x (`follow`). A VK of neither is named in the log and in `/healthz` and left alone:
//! nothing of it reaches the cache.
//!
//! `upstream_dialect = "auto"` asks VK (when and how often: `follow`). A fixed setting is
//! obeyed without asking.

use vk_observer_config::DialectSetting;
use vk_observer_telemetry::health::{DialectFacts, Health};
use vk_observer_upstream::VkClient;
use vk_observer_upstream::dialect::{self, Detection, Dialect};

/// What ingest does next.
pub(crate) enum Verdict {
    /// Start the followers of this dialect.
    Follow(Dialect),
    /// Follow nothing (the facts are in `/healthz` and the log).
    Stay,
    /// VK did not answer: start the fork's followers and keep asking.
    NotYet,
}

/// The first decision: from the setting, or from VK's first answer.
pub(crate) async fn first(client: &VkClient, setting: DialectSetting, health: &Health) -> Verdict {
    match setting {
        DialectSetting::Fork => {
            health.set_dialect(configured(Dialect::Fork));
            Verdict::Follow(Dialect::Fork)
        }
        DialectSetting::Workspaces => {
            health.set_dialect(configured(Dialect::Workspaces));
            Verdict::Follow(Dialect::Workspaces)
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
    let followed = d.dialect.is_some();
    let detail = match d.dialect {
        Some(_) => d.evidence.clone(),
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
        tracing::info!(dialect = %facts.dialect, detail = %facts.detail, "VK's dialect");
    } else if changed {
        tracing::error!(dialect = %facts.dialect, detail = %facts.detail, "VK is not followed");
    }
    health.set_dialect(facts);
    match d.dialect {
        Some(dialect) => Verdict::Follow(dialect),
        None => Verdict::Stay,
    }
}

fn configured(d: Dialect) -> DialectFacts {
    DialectFacts {
        dialect: d.as_str().into(),
        version: None,
        by: "configured".into(),
        followed: true,
        detail: format!("set by upstream_dialect: {}", d.describe()),
    }
}
