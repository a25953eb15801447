//! Settings: one serde tree. `Settings` (its sections in `sections`) is the one type a setting
//! is declared in: its default, its TOML key (the field name), its `VK_OBSERVER_*` variable
//! (derived from the key) and, through `Serialize`, how `doctor` writes it back. `layers` reads
//! it in layers (defaults < config file < environment < flags); `Settings::validate` checks it
//! once and yields the `ValidSettings` that `serve`, `demo`, `doctor` and the tests all start
//! from. Every consumer receives its own section by value. Nothing else reads a setting from
//! the environment, and this module imports from no layer above `upstream`.

pub mod access;
mod credentials;
mod fleet;
mod layers;
mod sections;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::ops::Deref;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use credentials::NatsCredentials;
pub use fleet::{DEFAULT_MAX_BACKLOG_BATCHES, FleetSettings, is_subject_token};
pub use layers::{ConfigFile, IdempotencyArgs, SECRET_FLAG_REFUSED, SettingsArgs};
pub use sections::DialectSetting;
pub use sections::{
    DEFAULT_ACTIVITY_HORIZON, DEFAULT_AUDIT_HORIZON, DEFAULT_HTTP2_MAX_STREAMS,
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SUBSCRIPTIONS_PER_SESSION,
    DEFAULT_MAX_WAITERS, DEFAULT_PROGRESS_EVERY, DEFAULT_STORE_COMPRESSION,
    DEFAULT_STORE_PAGE_COMPRESSION, IdempotencySettings, IngestConfig, MAX_PROGRESS_EVERY,
    McpSettings, Retention, StoreSettings,
};

/// Everything a daemon runs with. `Default` gives the built-in defaults with no upstream; tests
/// and the demo start from it and set what they need, then `validate`. Top-level keys first,
/// then the sections (TOML writes tables last).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// VK's base URL (empty: none found, which `validate` refuses).
    pub upstream: String,
    pub upstream_token: Option<String>,
    /// Which dialect of VK's API to speak: told from VK's answers (`auto`), or fixed.
    pub upstream_dialect: DialectSetting,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Stream tuning; only `raw_logs` is a setting (the top-level key), tests shorten the rest.
    #[serde(rename = "raw_logs", with = "sections::raw_logs_key")]
    pub ingest: IngestConfig,
    pub retention: Retention,
    /// How a new data dir's files are written (an existing one keeps its own).
    pub store: StoreSettings,
    pub mcp: McpSettings,
    /// Retention of `request_id` records (completed / in progress; zero disables) and how
    /// often expired ones are pruned.
    pub idempotency: IdempotencySettings,
    /// NATS JetStream replication: a publishing host, or a fleet node (design-notes §23).
    pub fleet: FleetSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            upstream: String::new(),
            upstream_token: None,
            upstream_dialect: DialectSetting::Auto,
            listen: DEFAULT_LISTEN.parse().expect("valid default"),
            data_dir: default_data_dir(),
            ingest: IngestConfig::default(),
            retention: Retention::default(),
            store: StoreSettings::default(),
            mcp: McpSettings::default(),
            idempotency: IdempotencySettings::default(),
            fleet: FleetSettings::default(),
        }
    }
}

impl Settings {
    /// The one check of a whole `Settings`: an upstream URL, and an exposure the `/mcp` limits
    /// and token allow.
    pub fn validate(mut self) -> anyhow::Result<ValidSettings> {
        self.mcp.tokens_file = Some(self.tokens_path());
        self.fleet.check()?;
        if self.fleet.node {
            // A fleet node has no VK of its own.
            self.mcp.check_exposure(self.listen)?;
            return Ok(ValidSettings(self));
        }
        if self.upstream.is_empty() {
            anyhow::bail!(
                "no VK upstream: pass --upstream URL, set VK_OBSERVER_UPSTREAM, put `upstream` in the \
                 config file, or start VK so it writes {}",
                vk_observer_upstream::discovery::port_file_path().display()
            );
        }
        let upstream = &self.upstream;
        if !(upstream.starts_with("http://") || upstream.starts_with("https://")) {
            anyhow::bail!("upstream {upstream:?} must be an http:// or https:// URL");
        }
        self.mcp.check_exposure(self.listen)?;
        if self.idempotency.prune_every.is_zero() {
            anyhow::bail!("[idempotency] prune_every must be above 0");
        }
        Ok(ValidSettings(self))
    }

    /// Where the scoped tokens are kept: `[mcp] tokens_file`, else `<data_dir>/tokens.toml`.
    pub fn tokens_path(&self) -> PathBuf {
        self.mcp
            .tokens_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("tokens.toml"))
    }

    /// The settings as a config file, tokens shown or replaced by `<redacted>`.
    pub fn to_toml(&self, redact: bool) -> String {
        let mut shown = self.clone();
        if redact {
            for token in [
                &mut shown.upstream_token,
                &mut shown.mcp.token,
                &mut shown.fleet.token,
                &mut shown.fleet.password,
            ]
            .into_iter()
            .flatten()
            {
                *token = "<redacted>".into();
            }
        }
        toml::to_string(&shown).unwrap_or_default()
    }

    /// What every layering ends with: a blank `[mcp] token` is no token.
    fn normalized(mut self) -> Settings {
        self.mcp.token = self.mcp.token.filter(|t| !t.trim().is_empty());
        self.fleet.token = self.fleet.token.filter(|t| !t.trim().is_empty());
        self.fleet.password = self.fleet.password.filter(|t| !t.trim().is_empty());
        self
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

pub(crate) fn default_data_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir)
        .join("vk-observer")
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";
