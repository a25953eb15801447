//! Reading `Settings` in layers with the `config` crate (why that crate: docs/design-notes.md
//! §21): the serialized defaults < the TOML file (`--config`) < `VK_OBSERVER_*` variables,
//! deserialized once into `Settings`, then the flags over them, typed. VK's port file gives the
//! upstream's default.
//!
//! Environment names: `VK_OBSERVER_<KEY>` for a top-level key, `VK_OBSERVER_<SECTION>__<KEY>`
//! for a key of a section (`VK_OBSERVER_MCP__MAX_SESSIONS=64`; lists comma-separated), derived
//! from the type, so a new setting needs no code here. Older names that do not fit the pattern
//! stay, read by clap for their flags: `VK_OBSERVER_MCP_TOKEN` (`--mcp-token`),
//! `VK_OBSERVER_MCP_STATELESS` (`--mcp-stateless`), and VK's own
//! `VK_IDEMPOTENCY_COMPLETED_TTL_SECS` / `VK_IDEMPOTENCY_IN_PROGRESS_TTL_SECS` (whole seconds).
//! Variables of the commands that are not settings (`VK_OBSERVER_CONFIG`, `_DAEMON`,
//! `_LOG_JSON`) name no top-level key and are left alone.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::builder::DefaultState;
use config::{ConfigBuilder, Environment, FileFormat, Source, ValueKind};

use super::{DialectSetting, Settings, ValidSettings};

/// The prefix of every setting's environment variable.
pub(crate) const ENV_PREFIX: &str = "VK_OBSERVER_";

/// A config file whose text parsed into `Settings` strictly (unknown keys are rejected).
#[derive(Debug, Clone)]
pub struct ConfigFile {
    #[allow(dead_code, reason = "named by Debug output")]
    path: PathBuf,
    text: String,
}

impl ConfigFile {
    pub fn load(path: &Path) -> anyhow::Result<ConfigFile> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str::<Settings>(&text)
            .map_err(|e| anyhow::anyhow!("config file {} is not valid: {e}", path.display()))?;
        Ok(ConfigFile {
            path: path.to_path_buf(),
            text,
        })
    }
}

/// The flag layer, shared by `serve`, `doctor` and `token` (flattened into each) and filled in by
/// `demo`: `None` leaves the lower layers' value in force. Global, so a command with
/// subcommands takes them after its subcommand too (`token create --data-dir D`). Each flag also reads the variable
/// it always read (clap's `env`), at the flag's precedence.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SettingsArgs {
    /// VK's base URL, e.g. http://127.0.0.1:3000 (default: VK's port file).
    #[arg(long, global = true, env = "VK_OBSERVER_UPSTREAM")]
    pub upstream: Option<String>,
    /// Bearer token when VK runs with token access control.
    #[arg(
        long,
        global = true,
        env = "VK_OBSERVER_UPSTREAM_TOKEN",
        hide_env_values = true
    )]
    pub upstream_token: Option<String>,
    /// Which dialect of VK's API to speak: auto (ask VK), fork or workspaces.
    #[arg(long, global = true, env = "VK_OBSERVER_UPSTREAM_DIALECT", value_enum)]
    pub upstream_dialect: Option<DialectSetting>,
    /// Address to serve /mcp, /healthz, /readyz and /metrics on.
    #[arg(long, global = true, env = "VK_OBSERVER_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Where the sled cache lives.
    #[arg(long, global = true, env = "VK_OBSERVER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML config file (flags and environment override it).
    #[arg(long, global = true, env = "VK_OBSERVER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Bearer token MCP clients must send; required to listen on a non-loopback address.
    #[arg(
        long,
        global = true,
        env = "VK_OBSERVER_MCP_TOKEN",
        hide_env_values = true
    )]
    pub mcp_token: Option<String>,
    /// Serve /mcp stateless with JSON responses (no sessions, no SSE streams).
    #[arg(long, global = true, env = "VK_OBSERVER_MCP_STATELESS")]
    pub mcp_stateless: bool,
    /// Serve as a fleet node: every host's stream from NATS ([fleet] urls), no VK of its own.
    #[arg(long, global = true)]
    pub fleet: bool,
    #[command(flatten)]
    pub idempotency: IdempotencyArgs,
    /// Refused: NATS credentials never come from the command line, where every local user sees
    /// them (`ps`). Hidden; named so the refusal can say where they go instead.
    #[arg(
        global = true,
        long = "fleet-token",
        aliases = ["fleet-password", "fleet-credentials", "nats-token", "nats-password", "nats-creds", "nats-user"],
        hide = true,
        num_args = 0..=1,
        default_missing_value = ""
    )]
    pub secret_on_command_line: Option<String>,
}

/// Why a NATS credential flag is refused (the value is never echoed).
pub const SECRET_FLAG_REFUSED: &str = "NATS credentials are not taken on the command line (any \
     local user can read it): put them in a file named by [fleet] credentials_file (.creds, \
     NKey seed, or user:password) or in the environment (VK_OBSERVER_FLEET__TOKEN, or \
     VK_OBSERVER_FLEET__USER with VK_OBSERVER_FLEET__PASSWORD)";

/// `request_id` record lifetimes in whole seconds, under VK's own environment names.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct IdempotencyArgs {
    /// Seconds completed request_id records are kept (0 = forever; default 7 days).
    #[arg(
        global = true,
        long = "idempotency-completed-ttl-secs",
        env = "VK_IDEMPOTENCY_COMPLETED_TTL_SECS",
        value_parser = parse_secs
    )]
    pub completed_ttl_secs: Option<u64>,
    /// Seconds after which an in-progress request_id record is stale (0 = never; default 1 h).
    #[arg(
        global = true,
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
    /// The config file named by `--config`, if any.
    pub fn load_file(&self) -> anyhow::Result<Option<ConfigFile>> {
        self.config.as_deref().map(ConfigFile::load).transpose()
    }

    /// Defaults < the `--config` file < environment < flags, validated (`serve`).
    pub fn resolve(self) -> anyhow::Result<ValidSettings> {
        let file = self.load_file()?;
        self.layered(file.as_ref())?.validate()
    }

    /// Defaults < `file` < environment < flags, unchecked (`doctor` still wants the values to
    /// probe when they do not validate).
    pub fn layered(&self, file: Option<&ConfigFile>) -> anyhow::Result<Settings> {
        // `vars_os`: a variable that is not Unicode (not a setting's) must not panic.
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        self.read(file, Some(vars))
    }

    /// Defaults < flags, unchecked: no file and no environment besides the flags' own (`demo`;
    /// `doctor` when the environment does not read).
    pub fn over_defaults(&self) -> anyhow::Result<Settings> {
        self.read(None, None)
    }

    /// Defaults < `file` < flags, without the environment (`doctor`: which values came from it).
    pub fn without_environment(&self, file: Option<&ConfigFile>) -> anyhow::Result<Settings> {
        self.read(file, None)
    }

    /// Defaults < `file` < `vars` (a snapshot of the environment), read by `config`, then the
    /// flags over them.
    pub(super) fn read(
        &self,
        file: Option<&ConfigFile>,
        vars: Option<HashMap<String, String>>,
    ) -> anyhow::Result<Settings> {
        if self.secret_on_command_line.is_some() {
            anyhow::bail!(SECRET_FLAG_REFUSED);
        }
        // VK's port file is the upstream's default: any layer above names another.
        let defaults = Settings {
            upstream: vk_observer_upstream::discovery::upstream_from_port_file()
                .unwrap_or_default(),
            ..Settings::default()
        };
        let defaults = config::Config::try_from(&defaults)?;
        let keys = setting_keys(&defaults)?;
        let mut layers = config::Config::builder().add_source(defaults);
        if let Some(f) = file {
            layers = layers.add_source(config::File::from_str(&f.text, FileFormat::Toml));
        }
        if let Some(vars) = vars {
            layers = add_environment(layers, vars, &keys);
        }
        let mut s: Settings = layers
            .build()?
            .try_deserialize()
            .map_err(|e| anyhow::anyhow!("settings are not valid: {e}"))?;
        self.apply_flags(&mut s);
        Ok(s.normalized())
    }

    /// The flags as the top layer, typed (a path or a number of seconds is taken as given, not
    /// through text).
    fn apply_flags(&self, s: &mut Settings) {
        if let Some(upstream) = &self.upstream {
            s.upstream.clone_from(upstream);
        }
        if self.upstream_token.is_some() {
            s.upstream_token.clone_from(&self.upstream_token);
        }
        s.upstream_dialect = self.upstream_dialect.unwrap_or(s.upstream_dialect);
        s.listen = self.listen.unwrap_or(s.listen);
        if let Some(dir) = &self.data_dir {
            s.data_dir.clone_from(dir);
        }
        if self.mcp_token.is_some() {
            s.mcp.token.clone_from(&self.mcp_token);
        }
        // A flag can switch stateless mode on, not off: `--mcp-stateless` has no value.
        s.mcp.stateless |= self.mcp_stateless;
        s.fleet.node |= self.fleet;
        let secs = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_secs);
        let (idem, ttl) = (self.idempotency, &mut s.idempotency);
        ttl.completed_ttl = secs(idem.completed_ttl_secs, ttl.completed_ttl);
        ttl.in_progress_ttl = secs(idem.in_progress_ttl_secs, ttl.in_progress_ttl);
    }
}

/// Whether a setting's value is a list (comma-separated in the environment).
type SettingKeys = HashMap<String, bool>;

/// Every key of `Settings` in the environment's spelling (`section__key`, lower case), with
/// whether its value is a list: the keys of the defaults as TOML, and as `config` holds them
/// (TOML leaves unset optional keys out, `config` leaves empty lists out).
fn setting_keys(defaults: &config::Config) -> anyhow::Result<SettingKeys> {
    let mut keys = SettingKeys::new();
    for (key, value) in toml::Table::try_from(Settings::default())? {
        match value {
            toml::Value::Table(section) => {
                for (inner, v) in section {
                    keys.insert(format!("{key}__{inner}"), v.is_array());
                }
            }
            v => {
                keys.insert(key, v.is_array());
            }
        }
    }
    for (key, value) in defaults.collect()? {
        match value.kind {
            ValueKind::Table(section) => {
                for inner in section.into_keys() {
                    keys.entry(format!("{key}__{inner}")).or_insert(false);
                }
            }
            _ => {
                keys.entry(key).or_insert(false);
            }
        }
    }
    Ok(keys)
}

/// The `VK_OBSERVER_*` variables as a layer: a variable whose name has a section (`__`) must
/// name a setting (a misspelt one is an error), one without a section is taken only when it
/// names a top-level setting. Empty variables count as unset, as clap counts them.
fn add_environment(
    layers: ConfigBuilder<DefaultState>,
    vars: HashMap<String, String>,
    keys: &SettingKeys,
) -> ConfigBuilder<DefaultState> {
    let (lists, scalars): (HashMap<_, _>, HashMap<_, _>) = vars
        .into_iter()
        .filter(|(name, _)| {
            name.strip_prefix(ENV_PREFIX).is_some_and(|rest| {
                let key = rest.to_lowercase();
                key.contains("__") || keys.contains_key(&key)
            })
        })
        .partition(|(name, _)| {
            let key = name[ENV_PREFIX.len()..].to_lowercase();
            keys.get(&key).copied().unwrap_or(false)
        });
    let environment = || {
        Environment::with_prefix(ENV_PREFIX.trim_end_matches('_'))
            .prefix_separator("_")
            .separator("__")
            .ignore_empty(true)
    };
    let mut list_layer = environment()
        .try_parsing(true)
        .list_separator(",")
        .source(Some(lists.into_iter().collect()));
    for (key, _) in keys.iter().filter(|(_, list)| **list) {
        list_layer = list_layer.with_list_parse_key(&key.replace("__", "."));
    }
    layers
        .add_source(environment().source(Some(scalars.into_iter().collect())))
        .add_source(list_layer)
}
