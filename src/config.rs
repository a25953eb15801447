//! Settings: one road for every setting. Flags and their environment variables (clap folds each
//! flag with its variable: `SettingsArgs`), then the TOML config file (`FileConfig`), then
//! built-in defaults merge into one `Settings`; `Settings::validate` checks it once and yields
//! the `ValidSettings` that `serve`, `demo`, `doctor` and the tests all start from. Nothing else
//! reads a setting from the environment.

use std::net::SocketAddr;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::ingest::IngestConfig;
use crate::proxy::idempotency::IdempotencyTtl;
use crate::store::Retention;

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
    #[serde(default)]
    pub idempotency: FileIdempotency,
}

/// `[idempotency]`: how long `request_id` records are kept.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileIdempotency {
    #[serde(default, with = "humantime_serde")]
    pub completed_ttl: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub in_progress_ttl: Option<Duration>,
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
    #[serde(default, with = "humantime_serde")]
    pub progress_every: Option<Duration>,
    pub max_subscriptions_per_session: Option<usize>,
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
    /// How often a parked wait called with a `progressToken` sends `notifications/progress`
    /// (SSE responses only; see `mcp::progress`). At most `MAX_PROGRESS_EVERY`.
    pub progress_every: Duration,
    /// Resources one MCP session may be subscribed to at once (`resources/subscribe`; also the
    /// most URIs one `subscriptions/listen` may name). See `mcp::subscriptions`.
    pub max_subscriptions_per_session: usize,
}

pub const DEFAULT_MAX_SESSIONS: usize = 256;
pub const DEFAULT_MAX_WAITERS: usize = 16_384;
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Below the 30–60 s idle timeouts of proxies and of clients that reset their request timeout
/// on progress.
pub const DEFAULT_PROGRESS_EVERY: Duration = Duration::from_secs(10);
pub const MAX_PROGRESS_EVERY: Duration = Duration::from_secs(15);
/// Enough for a client watching every attempt of a busy project; each costs ~200 bytes.
pub const DEFAULT_MAX_SUBSCRIPTIONS_PER_SESSION: usize = 1024;

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
            progress_every: DEFAULT_PROGRESS_EVERY,
            max_subscriptions_per_session: DEFAULT_MAX_SUBSCRIPTIONS_PER_SESSION,
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
        if self.max_sessions == 0
            || self.max_waiters == 0
            || self.max_subscriptions_per_session == 0
            || self.max_body_bytes < 1024
        {
            anyhow::bail!("[mcp] limits must be positive (max_body_bytes at least 1024)");
        }
        if self.progress_every.is_zero() || self.progress_every > MAX_PROGRESS_EVERY {
            anyhow::bail!(
                "[mcp] progress_every must be above 0 and at most {}",
                humantime_serde::re::humantime::format_duration(MAX_PROGRESS_EVERY)
            );
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
    #[serde(default, with = "humantime_serde")]
    pub activity_horizon: Option<Duration>,
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<FileConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("config file {} is not valid: {e}", path.display()))
    }
}

/// The flag and environment layer, shared by `serve` and `doctor` (flattened into both) and
/// filled in by `demo`: `None` leaves the file's value or the default in force.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SettingsArgs {
    /// VK's base URL, e.g. http://127.0.0.1:3000 (default: VK's port file).
    #[arg(long, env = "VK_OBSERVER_UPSTREAM")]
    pub upstream: Option<String>,
    /// Bearer token when VK runs with token access control.
    #[arg(long, env = "VK_OBSERVER_UPSTREAM_TOKEN", hide_env_values = true)]
    pub upstream_token: Option<String>,
    /// Address to serve /mcp, /healthz, /readyz and /metrics on.
    #[arg(long, env = "VK_OBSERVER_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Where the sled cache lives.
    #[arg(long, env = "VK_OBSERVER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML config file (flags and environment override it).
    #[arg(long, env = "VK_OBSERVER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Bearer token MCP clients must send; required to listen on a non-loopback address.
    #[arg(long, env = "VK_OBSERVER_MCP_TOKEN", hide_env_values = true)]
    pub mcp_token: Option<String>,
    /// Serve /mcp stateless with JSON responses (no sessions, no SSE streams).
    #[arg(long, env = "VK_OBSERVER_MCP_STATELESS")]
    pub mcp_stateless: bool,
    #[command(flatten)]
    pub idempotency: IdempotencyArgs,
}

/// `request_id` record lifetimes in whole seconds, under VK's own environment names.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct IdempotencyArgs {
    /// Seconds completed request_id records are kept (0 = forever; default 7 days).
    #[arg(
        long = "idempotency-completed-ttl-secs",
        env = "VK_IDEMPOTENCY_COMPLETED_TTL_SECS",
        value_parser = parse_secs
    )]
    pub completed_ttl_secs: Option<u64>,
    /// Seconds after which an in-progress request_id record is stale (0 = never; default 1 h).
    #[arg(
        long = "idempotency-in-progress-ttl-secs",
        env = "VK_IDEMPOTENCY_IN_PROGRESS_TTL_SECS",
        value_parser = parse_secs
    )]
    pub in_progress_ttl_secs: Option<u64>,
}

/// Whole seconds; surrounding blanks are allowed, as VK allows them in these variables.
fn parse_secs(v: &str) -> Result<u64, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a whole number of seconds"))
}

impl SettingsArgs {
    /// The config file named by `--config` (none named: an empty one).
    pub fn load_file(&self) -> anyhow::Result<FileConfig> {
        match &self.config {
            Some(p) => FileConfig::load(p),
            None => Ok(FileConfig::default()),
        }
    }

    /// Flags over the config file over defaults, validated.
    pub fn resolve(self) -> anyhow::Result<ValidSettings> {
        let file = self.load_file()?;
        resolve(&self, file)
    }
}

/// Everything a daemon runs with. `Default` gives the built-in defaults with no upstream; tests
/// and the demo start from it and set what they need, then `validate`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// VK's base URL (empty: none found, which `validate` refuses).
    pub upstream: String,
    pub upstream_token: Option<String>,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub retention: Retention,
    pub mcp: McpSettings,
    /// Retention of `request_id` records (completed / in progress; zero disables).
    pub idempotency: IdempotencyTtl,
    /// Stream tuning; only `raw_logs` comes from the file, tests shorten the rest.
    pub ingest: IngestConfig,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            upstream: String::new(),
            upstream_token: None,
            listen: DEFAULT_LISTEN.parse().expect("valid default"),
            data_dir: default_data_dir(),
            retention: Retention::default(),
            mcp: McpSettings::default(),
            idempotency: IdempotencyTtl::default(),
            ingest: IngestConfig::default(),
        }
    }
}

impl Settings {
    /// The one check of a whole `Settings`: an upstream URL, and an exposure the `/mcp` limits
    /// and token allow.
    pub fn validate(self) -> anyhow::Result<ValidSettings> {
        if self.upstream.is_empty() {
            anyhow::bail!(
                "no VK upstream: pass --upstream URL, set VK_OBSERVER_UPSTREAM, put `upstream` in the \
                 config file, or start VK so it writes {}",
                crate::upstream::discovery::port_file_path().display()
            );
        }
        let upstream = &self.upstream;
        if !(upstream.starts_with("http://") || upstream.starts_with("https://")) {
            anyhow::bail!("upstream {upstream:?} must be an http:// or https:// URL");
        }
        self.mcp.check_exposure(self.listen)?;
        Ok(ValidSettings(self))
    }
}

/// Settings that passed `Settings::validate`: the only kind a daemon starts with, so the check
/// is made once, wherever the settings came from.
#[derive(Debug, Clone)]
pub struct ValidSettings(Settings);

impl ValidSettings {
    pub fn into_inner(self) -> Settings {
        self.0
    }
}

impl Deref for ValidSettings {
    type Target = Settings;
    fn deref(&self) -> &Settings {
        &self.0
    }
}

pub fn default_data_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir)
        .join("vk-observer")
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";

/// Merge flag/env values over the file and the defaults, and validate.
pub fn resolve(flags: &SettingsArgs, file: FileConfig) -> anyhow::Result<ValidSettings> {
    merge(flags, file).validate()
}

/// Merge flag/env values over the file and the defaults, unchecked (`doctor` still wants the
/// values to probe when they do not validate). VK's port file is the last resort for the
/// upstream.
pub fn merge(flags: &SettingsArgs, file: FileConfig) -> Settings {
    let d = Settings::default();
    let upstream = flags
        .upstream
        .clone()
        .or(file.upstream)
        .or_else(crate::upstream::discovery::upstream_from_port_file)
        .unwrap_or_default();
    Settings {
        upstream,
        upstream_token: flags.upstream_token.clone().or(file.upstream_token),
        listen: flags.listen.or(file.listen).unwrap_or(d.listen),
        data_dir: flags
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or(d.data_dir),
        retention: merge_retention(file.retention),
        mcp: merge_mcp(flags, file.mcp),
        idempotency: merge_idempotency(flags.idempotency, file.idempotency),
        ingest: IngestConfig {
            raw_logs: file.raw_logs.unwrap_or(d.ingest.raw_logs),
            ..d.ingest
        },
    }
}

fn merge_retention(r: FileRetention) -> Retention {
    let d = Retention::default();
    Retention {
        finished_attempt_days: r.finished_attempt_days.unwrap_or(d.finished_attempt_days),
        max_entries_per_process: r
            .max_entries_per_process
            .unwrap_or(d.max_entries_per_process),
        events_kept: r.events_kept.unwrap_or(d.events_kept),
        prune_every: r.prune_every.unwrap_or(d.prune_every),
        activity_horizon: r.activity_horizon.unwrap_or(d.activity_horizon),
    }
}

fn merge_mcp(flags: &SettingsArgs, m: FileMcp) -> McpSettings {
    let d = McpSettings::default();
    McpSettings {
        token: flags
            .mcp_token
            .clone()
            .or(m.token)
            .filter(|t| !t.trim().is_empty()),
        allowed_origins: m.allowed_origins.unwrap_or_default(),
        allowed_hosts: m.allowed_hosts.unwrap_or_default(),
        max_sessions: m.max_sessions.unwrap_or(d.max_sessions),
        max_waiters: m.max_waiters.unwrap_or(d.max_waiters),
        max_body_bytes: m.max_body_bytes.unwrap_or(d.max_body_bytes),
        // A flag can switch stateless mode on, not off: `--mcp-stateless` has no value.
        stateless: flags.mcp_stateless || m.stateless.unwrap_or(d.stateless),
        progress_every: m.progress_every.unwrap_or(d.progress_every),
        max_subscriptions_per_session: m
            .max_subscriptions_per_session
            .unwrap_or(d.max_subscriptions_per_session),
    }
}

fn merge_idempotency(flags: IdempotencyArgs, f: FileIdempotency) -> IdempotencyTtl {
    let d = IdempotencyTtl::default();
    let secs = |v: Option<u64>| v.map(Duration::from_secs);
    IdempotencyTtl {
        completed: secs(flags.completed_ttl_secs)
            .or(f.completed_ttl)
            .unwrap_or(d.completed),
        in_progress: secs(flags.in_progress_ttl_secs)
            .or(f.in_progress_ttl)
            .unwrap_or(d.in_progress),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_loads_and_resolves() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/vk-observer.example.toml");
        let f = FileConfig::load(&p).unwrap();
        let flags = SettingsArgs {
            upstream: Some("http://127.0.0.1:3000".into()),
            ..SettingsArgs::default()
        };
        let s = resolve(&flags, f).unwrap();
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(s.retention.prune_every, Duration::from_secs(600));
    }

    #[test]
    fn a_public_listen_address_needs_a_token() {
        let local_flags = SettingsArgs {
            upstream: Some("http://127.0.0.1:3000".to_string()),
            ..SettingsArgs::default()
        };
        let public = SettingsArgs {
            listen: Some("0.0.0.0:8765".parse().unwrap()),
            ..local_flags.clone()
        };
        let err = resolve(&public, FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("VK_OBSERVER_MCP_TOKEN"), "{err}");
        let with_token = SettingsArgs {
            mcp_token: Some("s3cret".into()),
            ..public
        };
        let s = resolve(&with_token, FileConfig::default()).unwrap();
        assert_eq!(s.mcp.token.as_deref(), Some("s3cret"));
        let local = resolve(&local_flags, FileConfig::default()).unwrap();
        assert!(local.mcp.token.is_none());
    }

    #[test]
    fn unknown_keys_and_bad_urls_are_rejected() {
        assert!(toml::from_str::<FileConfig>("nope = 1").is_err());
        let no_scheme = SettingsArgs {
            upstream: Some("127.0.0.1:3000".into()),
            ..SettingsArgs::default()
        };
        assert!(resolve(&no_scheme, FileConfig::default()).is_err());
    }
}
