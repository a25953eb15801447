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
    #[serde(default)]
    pub mcp: FileMcp,
}

/// `[mcp]`: who may call `/mcp` and how much they may hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileMcp {
    pub token: Option<String>,
    pub allowed_origins: Option<Vec<String>>,
    pub allowed_hosts: Option<Vec<String>>,
    pub max_sessions: Option<usize>,
    pub max_waiters: Option<usize>,
    pub max_body_bytes: Option<usize>,
    pub stateless: Option<bool>,
}

/// Validated `/mcp` exposure settings.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// Required as `Authorization: Bearer <token>` on `/mcp` when set; mandatory for a
    /// non-loopback listen address.
    pub token: Option<String>,
    /// Browser origins allowed besides loopback ones (`http://localhost:*` etc.).
    pub allowed_origins: Vec<String>,
    /// `Host` values allowed besides loopback ones (needed when listening on another address).
    pub allowed_hosts: Vec<String>,
    pub max_sessions: usize,
    pub max_waiters: usize,
    pub max_body_bytes: usize,
    pub stateless: bool,
}

pub const DEFAULT_MAX_SESSIONS: usize = 256;
pub const DEFAULT_MAX_WAITERS: usize = 16_384;
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            token: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_waiters: DEFAULT_MAX_WAITERS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            stateless: false,
        }
    }
}

impl McpSettings {
    /// A non-loopback listen address serves anyone who can reach it: refuse it without a token.
    pub fn check_exposure(&self, listen: SocketAddr) -> anyhow::Result<()> {
        if !listen.ip().is_loopback() && self.token.as_deref().is_none_or(|t| t.trim().is_empty()) {
            anyhow::bail!(
                "refusing to listen on {listen} (not a loopback address) without a bearer token: \
                 set VK_OBSERVER_MCP_TOKEN (or `[mcp] token` in the config file), or listen on 127.0.0.1"
            );
        }
        if self.max_sessions == 0 || self.max_waiters == 0 || self.max_body_bytes < 1024 {
            anyhow::bail!("[mcp] limits must be positive (max_body_bytes at least 1024)");
        }
        Ok(())
    }
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
    pub mcp: McpSettings,
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
    resolve_with(
        upstream,
        upstream_token,
        listen,
        data_dir,
        McpOverrides::default(),
        file,
    )
}

/// `/mcp` values given by flag or environment (they beat the file).
#[derive(Debug, Default, Clone)]
pub struct McpOverrides {
    pub token: Option<String>,
    pub stateless: bool,
}

pub fn resolve_with(
    upstream: Option<String>,
    upstream_token: Option<String>,
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    mcp_overrides: McpOverrides,
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
    let m = file.mcp;
    let d = McpSettings::default();
    let mcp = McpSettings {
        token: mcp_overrides
            .token
            .or(m.token)
            .filter(|t| !t.trim().is_empty()),
        allowed_origins: m.allowed_origins.unwrap_or_default(),
        allowed_hosts: m.allowed_hosts.unwrap_or_default(),
        max_sessions: m.max_sessions.unwrap_or(d.max_sessions),
        max_waiters: m.max_waiters.unwrap_or(d.max_waiters),
        max_body_bytes: m.max_body_bytes.unwrap_or(d.max_body_bytes),
        stateless: mcp_overrides.stateless || m.stateless.unwrap_or(false),
    };
    let listen = listen
        .or(file.listen)
        .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default"));
    mcp.check_exposure(listen)?;
    Ok(Settings {
        upstream,
        upstream_token: upstream_token.or(file.upstream_token),
        listen,
        mcp,
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
    fn a_public_listen_address_needs_a_token() {
        let up = || Some("http://127.0.0.1:3000".to_string());
        let public: SocketAddr = "0.0.0.0:8765".parse().unwrap();
        let err = resolve(up(), None, Some(public), None, FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("VK_OBSERVER_MCP_TOKEN"), "{err}");
        let with_token = McpOverrides {
            token: Some("s3cret".into()),
            stateless: false,
        };
        let s = resolve_with(
            up(),
            None,
            Some(public),
            None,
            with_token,
            FileConfig::default(),
        )
        .unwrap();
        assert_eq!(s.mcp.token.as_deref(), Some("s3cret"));
        let local = resolve(up(), None, None, None, FileConfig::default()).unwrap();
        assert!(local.mcp.token.is_none());
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
