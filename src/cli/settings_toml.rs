//! The effective settings written back as a config file (for `doctor`): tokens shown or
//! redacted, and the round-trip check that this text loads back to the same settings.

use crate::config::{self, FileConfig, Settings, SettingsArgs};

/// The settings as a config file (tokens shown or redacted).
pub fn to_toml(s: &Settings, redact: bool) -> String {
    use toml::{Table, Value as T};
    let secret = |t: &str| {
        T::String(if redact {
            "<redacted>".into()
        } else {
            t.to_string()
        })
    };
    let int = |n: u64| T::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let duration = |d| T::String(humantime_serde::re::humantime::format_duration(d).to_string());
    let mut root = Table::new();
    root.insert("upstream".into(), T::String(s.upstream.clone()));
    if let Some(t) = &s.upstream_token {
        root.insert("upstream_token".into(), secret(t));
    }
    root.insert("listen".into(), T::String(s.listen.to_string()));
    root.insert(
        "data_dir".into(),
        T::String(s.data_dir.to_string_lossy().into_owned()),
    );
    root.insert("raw_logs".into(), T::Boolean(s.ingest.raw_logs));
    let mut ret = Table::new();
    let rt = &s.retention;
    ret.insert(
        "finished_attempt_days".into(),
        int(rt.finished_attempt_days),
    );
    ret.insert(
        "max_entries_per_process".into(),
        int(rt.max_entries_per_process),
    );
    ret.insert("events_kept".into(), int(rt.events_kept));
    ret.insert("prune_every".into(), duration(rt.prune_every));
    ret.insert("activity_horizon".into(), duration(rt.activity_horizon));
    root.insert("retention".into(), T::Table(ret));
    let m = &s.mcp;
    let mut mcp = Table::new();
    if let Some(t) = &m.token {
        mcp.insert("token".into(), secret(t));
    }
    let list = |v: &[String]| T::Array(v.iter().cloned().map(T::String).collect());
    mcp.insert("allowed_origins".into(), list(&m.allowed_origins));
    mcp.insert("allowed_hosts".into(), list(&m.allowed_hosts));
    mcp.insert("max_sessions".into(), int(m.max_sessions as u64));
    mcp.insert("max_waiters".into(), int(m.max_waiters as u64));
    mcp.insert("max_body_bytes".into(), int(m.max_body_bytes as u64));
    mcp.insert("stateless".into(), T::Boolean(m.stateless));
    mcp.insert("progress_every".into(), duration(m.progress_every));
    mcp.insert(
        "max_subscriptions_per_session".into(),
        int(m.max_subscriptions_per_session as u64),
    );
    root.insert("mcp".into(), T::Table(mcp));
    let mut idem = Table::new();
    idem.insert("completed_ttl".into(), duration(s.idempotency.completed));
    idem.insert(
        "in_progress_ttl".into(),
        duration(s.idempotency.in_progress),
    );
    root.insert("idempotency".into(), T::Table(idem));
    toml::to_string(&root).unwrap_or_default()
}

/// The effective settings, written as a config file and loaded back alone, give the same
/// settings.
pub fn round_trip(s: &Settings) -> anyhow::Result<()> {
    let text = to_toml(s, false);
    let file: FileConfig = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!("the effective settings do not load back as a config file: {e}")
    })?;
    let again = config::resolve(&SettingsArgs::default(), file)?;
    let (a, b) = (format!("{s:?}"), format!("{:?}", *again));
    if a != b {
        anyhow::bail!("the effective settings change when loaded back from TOML");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn example_config_round_trips() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/vk-observer.example.toml");
        let f = FileConfig::load(&p).unwrap();
        let flags = SettingsArgs {
            upstream: Some("http://127.0.0.1:3000".into()),
            upstream_token: Some("vk-secret".into()),
            mcp_token: Some("mcp-secret".into()),
            ..SettingsArgs::default()
        };
        let s = config::resolve(&flags, f).unwrap();
        round_trip(&s).unwrap();
        let shown = to_toml(&s, true);
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("prune_every = \"10m\""), "{shown}");
    }
}
