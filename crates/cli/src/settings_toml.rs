//! The effective settings written back as a config file (for `doctor`), by `Settings`'
//! `Serialize`: tokens shown or redacted, and the round-trip check that this text loads back,
//! strictly, to the same settings.

use vk_observer_config::Settings;

/// The settings as a config file (tokens shown or redacted).
pub(crate) fn to_toml(s: &Settings, redact: bool) -> String {
    s.to_toml(redact)
}

/// The effective settings, written as a config file and loaded back alone, give the same
/// settings.
pub(crate) fn round_trip(s: &Settings) -> anyhow::Result<()> {
    let text = to_toml(s, false);
    let again: Settings = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!("the effective settings do not load back as a config file: {e}")
    })?;
    let again = again.validate()?;
    if *s != *again {
        anyhow::bail!("the effective settings change when loaded back from TOML");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use vk_observer_config::{ConfigFile, SettingsArgs};

    #[test]
    fn example_config_round_trips() {
        let p = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("config/vk-observer.example.toml");
        let f = ConfigFile::load(&p).unwrap();
        let flags = SettingsArgs {
            upstream: Some("http://127.0.0.1:3000".into()),
            upstream_token: Some("vk-secret".into()),
            mcp_token: Some("mcp-secret".into()),
            ..SettingsArgs::default()
        };
        let s = flags.layered(Some(&f)).unwrap().validate().unwrap();
        round_trip(&s).unwrap();
        let shown = to_toml(&s, true);
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("prune_every = \"10m\""), "{shown}");
    }
}
