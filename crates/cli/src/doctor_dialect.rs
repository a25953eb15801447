//! `doctor`'s dialect line: which dialect of VK's API the upstream speaks (asked the way the
//! daemon asks, `upstream::dialect`), against `upstream_dialect`, and how the daemon follows
//! it.

use vk_observer_config::DialectSetting;
use vk_observer_upstream::VkClient;
use vk_observer_upstream::dialect::{self, Dialect};

use super::doctor::Report;

const WHAT: &str = "vk dialect";

/// One line: ok on either dialect the daemon follows, fail on neither (nothing would be
/// cached) or on a setting that contradicts VK, warn when VK cannot be asked.
pub(crate) async fn check(
    r: &mut Report,
    upstream: &str,
    token: Option<String>,
    setting: DialectSetting,
) {
    let Ok(vk) = VkClient::new(upstream, token) else {
        return;
    };
    let asked = tokio::time::timeout(super::doctor::CHECK_TIMEOUT, dialect::detect(&vk)).await;
    let found = match asked {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return r.warn(WHAT, format!("VK could not be asked: {e}")),
        Err(_) => return r.warn(WHAT, "VK did not answer the dialect probes in time"),
    };
    let version = found
        .version
        .as_deref()
        .map(|v| format!(" (VK {v})"))
        .unwrap_or_default();
    let named = match found.dialect {
        Some(d) => format!("{}{version}", d.describe()),
        None => "neither dialect this build knows".to_string(),
    };
    let set = match setting {
        DialectSetting::Auto => None,
        DialectSetting::Fork => Some(Dialect::Fork),
        DialectSetting::Workspaces => Some(Dialect::Workspaces),
    };
    let detail = format!("{upstream} speaks {named}: {}", found.evidence);
    match (found.dialect, set) {
        (found, Some(set)) if found != Some(set) => r.fail(
            WHAT,
            format!(
                "{detail}; but upstream_dialect = {:?} says otherwise",
                set.as_str()
            ),
        ),
        (Some(Dialect::Fork), _) => r.ok(WHAT, detail),
        (Some(Dialect::Workspaces), _) => r.ok(
            WHAT,
            format!(
                "{detail}; followed: each workspace is an attempt, tasks kept by the daemon \
                 (docs/agent-guide.md \"Which VK\")"
            ),
        ),
        (None, _) => r.fail(WHAT, format!("{detail}; the daemon would follow nothing")),
    }
}
