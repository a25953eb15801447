//! Settings: one precedence order — command-line flag, then environment (`VK_OBSERVER_*`), then
//! the TOML config file, then built-in defaults — validated once at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The config file (every field optional; see config/vk-observer.example.toml).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub upstream: Option<String>,
    pub upstream_token: Option<String>,
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub raw_logs: Option<bool>,
    #[serde(default)]
    pub retention: FileRetention,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRetention {
    pub finished_attempt_days: Option<u64>,
    pub max_entries_per_process: Option<u64>,
    pub events_kept: Option<u64>,
    #[serde(default, with = "humantime_serde")]
    pub prune_every: Option<Duration>,
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<FileConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("config file {} is not valid: {e}", path.display()))
    }
}

/// The validated settings the daemon runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub upstream: String,
    pub upstream_token: Option<String>,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub raw_logs: bool,
    pub retention: crate::store::Retention,
}

pub fn default_data_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir)
        .join("vk-observer")
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";

/// Merge flag/env values (already folded by clap) over the file and defaults, and validate.
pub fn resolve(
    upstream: Option<String>,
    upstream_token: Option<String>,
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    file: FileConfig,
) -> anyhow::Result<Settings> {
    let upstream = upstream
        .or(file.upstream)
        .or_else(crate::upstream::discovery::upstream_from_port_file)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no VK upstream: pass --upstream URL, set VK_OBSERVER_UPSTREAM, put `upstream` in the \
                 config file, or start VK so it writes {}",
                crate::upstream::discovery::port_file_path().display()
            )
        })?;
    if !(upstream.starts_with("http://") || upstream.starts_with("https://")) {
        anyhow::bail!("upstream {upstream:?} must be an http:// or https:// URL");
    }
    let mut retention = crate::store::Retention::default();
    let r = file.retention;
    if let Some(v) = r.finished_attempt_days {
        retention.finished_attempt_days = v;
    }
    if let Some(v) = r.max_entries_per_process {
        retention.max_entries_per_process = v;
    }
    if let Some(v) = r.events_kept {
        retention.events_kept = v;
    }
    if let Some(v) = r.prune_every {
        retention.prune_every = v;
    }
    Ok(Settings {
        upstream,
        upstream_token: upstream_token.or(file.upstream_token),
        listen: listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default")),
        data_dir: data_dir.or(file.data_dir).unwrap_or_else(default_data_dir),
        raw_logs: file.raw_logs.unwrap_or(true),
        retention,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_loads_and_resolves() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/vk-observer.example.toml");
        let f = FileConfig::load(&p).unwrap();
        let s = resolve(Some("http://127.0.0.1:3000".into()), None, None, None, f).unwrap();
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(s.retention.prune_every, Duration::from_secs(600));
    }

    #[test]
    fn unknown_keys_and_bad_urls_are_rejected() {
        assert!(toml::from_str::<FileConfig>("nope = 1").is_err());
        assert!(
            resolve(
                Some("127.0.0.1:3000".into()),
                None,
                None,
                None,
                FileConfig::default()
            )
            .is_err()
        );
    }
}
