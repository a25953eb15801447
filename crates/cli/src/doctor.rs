//! `vk-observer doctor`: checks a person runs before (or while) the daemon runs, each printed as
//! `ok|warn|fail  <what>: <detail>`. The config (file + environment + flags, resolved exactly as
//! `serve` does, printed with tokens redacted and round-tripped through TOML), VK (`/api/info`,
//! `/api/config/status`), the daemon (`/healthz`, MCP `initialize`), the listen port, the data
//! dir (never opened while a daemon answers on the listen address) and the versions. Exit code
//! 0 when nothing failed, 1 otherwise.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::client::DaemonClient;
use super::settings_toml::{round_trip, to_toml};
use vk_observer_config::{ConfigFile, NatsCredentials, Settings, SettingsArgs};

/// How long one network check may take.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

pub struct DoctorOptions {
    /// The daemon's settings, as `serve` takes them; `mcp_token` is also the bearer token the
    /// daemon check sends.
    pub settings: SettingsArgs,
    pub daemon: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Warn,
    Fail,
}

#[derive(Default)]
pub(crate) struct Report {
    failed: usize,
    warned: usize,
}

impl Report {
    fn line(&mut self, level: Level, what: &str, detail: impl AsRef<str>) {
        let tag = match level {
            Level::Ok => "ok",
            Level::Warn => {
                self.warned += 1;
                "warn"
            }
            Level::Fail => {
                self.failed += 1;
                "fail"
            }
        };
        outln!("{tag:<4}  {what}: {}", detail.as_ref());
    }

    pub(crate) fn ok(&mut self, what: &str, detail: impl AsRef<str>) {
        self.line(Level::Ok, what, detail);
    }
    pub(crate) fn warn(&mut self, what: &str, detail: impl AsRef<str>) {
        self.line(Level::Warn, what, detail);
    }
    pub(crate) fn fail(&mut self, what: &str, detail: impl AsRef<str>) {
        self.line(Level::Fail, what, detail);
    }
}

/// Run every check; the process exit code.
pub async fn run(opts: DoctorOptions) -> anyhow::Result<i32> {
    let mut r = Report::default();
    let (mut loaded, file) = match check_config(&mut r, &opts.settings) {
        Some(file) => (true, file),
        None => (false, None),
    };
    // Layered even when they do not validate: what to check is still known.
    let s = opts.settings.layered(file.as_ref()).unwrap_or_else(|e| {
        r.fail("settings", format!("{e:#}"));
        loaded = false;
        opts.settings.over_defaults().unwrap_or_default()
    });
    if loaded {
        check_settings(&mut r, s.clone());
    }
    let env_free = opts.settings.without_environment(file.as_ref()).ok();
    check_fleet(&mut r, &s, env_free.as_ref());
    match Some(&s.upstream).filter(|u| !u.is_empty()) {
        _ if s.fleet.node => r.ok("vk", "a fleet node has no VK of its own"),
        Some(u) => {
            check_vk(&mut r, u, s.upstream_token.clone()).await;
            super::doctor_dialect::check(&mut r, u, s.upstream_token.clone(), s.upstream_dialect)
                .await;
        }
        None => r.fail(
            "vk",
            "no upstream to check: pass --upstream URL or set VK_OBSERVER_UPSTREAM",
        ),
    }
    // The daemon at --daemon, else on the listen address.
    let daemon_url = opts
        .daemon
        .clone()
        .unwrap_or_else(|| format!("http://{}/mcp", connect_addr(s.listen)));
    let (daemon_health, daemon_version) =
        check_daemon(&mut r, &daemon_url, s.mcp.token.as_deref()).await;
    let listen_base = format!("http://{}", connect_addr(s.listen));
    let listen_health = if listen_base == base_of(&daemon_url) {
        daemon_health
    } else {
        healthz(&listen_base).await
    };
    let daemon_on_listen = matches!(listen_health, Health::Daemon(_));
    check_port(&mut r, s.listen, &listen_health);
    check_data_dir(&mut r, &s.data_dir, daemon_on_listen.then_some(s.listen));
    check_versions(&mut r, daemon_version);
    outln!("{} failed, {} warnings", r.failed, r.warned);
    Ok(if r.failed > 0 { 1 } else { 0 })
}

/// The config file loads (`Some(None)` when none was named); `None` when it does not.
fn check_config(r: &mut Report, flags: &SettingsArgs) -> Option<Option<ConfigFile>> {
    let Some(p) = &flags.config else {
        r.ok(
            "config",
            "no config file given (--config or VK_OBSERVER_CONFIG): flags, environment and defaults",
        );
        return Some(None);
    };
    match ConfigFile::load(p) {
        Ok(f) => {
            r.ok("config", format!("{} loads", p.display()));
            Some(Some(f))
        }
        Err(e) => {
            r.fail("config", format!("{e:#}"));
            None
        }
    }
}

/// The settings validate; print them (tokens redacted) and check they round-trip through TOML.
fn check_settings(r: &mut Report, merged: Settings) {
    let s = match merged.validate() {
        Ok(s) => s,
        Err(e) => return r.fail("settings", format!("{e:#}")),
    };
    r.ok(
        "settings",
        "valid; effective values (flag > env > file > default, tokens redacted):",
    );
    for line in to_toml(&s, true).lines() {
        if line.is_empty() {
            outln!();
        } else {
            outln!("        {line}");
        }
    }
    match round_trip(&s) {
        Ok(()) => r.ok(
            "round-trip",
            "the effective settings written as TOML load back to the same settings",
        ),
        Err(e) => r.fail("round-trip", format!("{e:#}")),
    }
    check_tokens(r, &s.tokens_path(), s.mcp.token.is_some());
}

/// `[fleet]`: the role, the NATS credential (what it is and where it came from, its secret
/// redacted) and TLS. `env_free` is the same settings without the environment layer.
fn check_fleet(r: &mut Report, s: &Settings, env_free: Option<&Settings>) {
    let f = &s.fleet;
    if f.urls.is_empty() {
        return;
    }
    let role = if f.node {
        "fleet node".to_owned()
    } else {
        format!("host {:?}", f.host)
    };
    r.ok("fleet", format!("{role} on NATS {}", f.urls.join(", ")));
    let credential = match NatsCredentials::from_settings(f) {
        Ok(c) => c,
        Err(e) => return r.fail("nats credential", format!("{e:#}")),
    };
    let from_env = env_free.is_none_or(|e| {
        (
            e.fleet.token.as_ref(),
            e.fleet.user.as_ref(),
            e.fleet.password.as_ref(),
        ) != (f.token.as_ref(), f.user.as_ref(), f.password.as_ref())
            || e.fleet.credentials_file != f.credentials_file
    });
    let origin = if from_env {
        " · set in the environment (VK_OBSERVER_FLEET__*)"
    } else {
        " · set in the config file"
    };
    let origin = if credential == NatsCredentials::None {
        ""
    } else {
        origin
    };
    r.ok(
        "nats credential",
        format!("{}{origin}", credential.describe()),
    );
    let tls = match (&f.tls_ca_file, &f.tls_cert_file, f.tls_required) {
        (None, None, false) => {
            "off unless the server asks for it (tls:// URLs use the system's CAs)".to_owned()
        }
        (ca, cert, required) => format!(
            "CA {} · client certificate {} · required {required}",
            ca.as_ref()
                .map_or("system".into(), |p| p.display().to_string()),
            cert.as_ref()
                .map_or("none".into(), |p| p.display().to_string()),
        ),
    };
    r.ok("nats tls", tls);
    super::doctor_certs::check(r, f);
}

/// The tokens file: how many scoped tokens, by name and scopes (never a secret or a hash).
fn check_tokens(r: &mut Report, path: &std::path::Path, config_token: bool) {
    match vk_observer_config::access::TokenFile::load(path) {
        Ok(file) if file.tokens.is_empty() && !config_token => r.ok(
            "tokens",
            format!("none in {}: loopback clients need no token; inside an attempt workspace they get read+write on their own attempt", path.display()),
        ),
        Ok(file) => {
            let names: Vec<String> = file
                .tokens
                .iter()
                .map(|t| format!("{} ({})", t.name, t.scope_set().names()))
                .collect();
            r.ok(
                "tokens",
                format!(
                    "every caller needs one; [mcp] token: {}; {} scoped in {}: {}",
                    if config_token { "set (every scope)" } else { "none" },
                    names.len(),
                    path.display(),
                    names.join(", ")
                ),
            )
        }
        Err(e) => r.fail("tokens", format!("{e:#}")),
    }
}

/// A vk-observer daemon answers `/healthz` and an MCP session at `url`; what `/healthz` said
/// and the daemon's (name, version).
async fn check_daemon(
    r: &mut Report,
    url: &str,
    token: Option<&str>,
) -> (Health, Option<(String, String)>) {
    let health = healthz(&base_of(url)).await;
    let mut version = None;
    match &health {
        Health::Daemon(h) => {
            let up = h["upstream"].as_str().unwrap_or("?");
            let detail = format!(
                "vk-observer answers at {url} (upstream {up}, token {})",
                h["token"].as_str().unwrap_or("?")
            );
            if up == "connected" {
                r.ok("daemon", detail);
            } else {
                r.warn(
                    "daemon",
                    format!("{detail}; it serves from its cache until VK is back"),
                );
            }
            match DaemonClient::connect(url, token).await {
                Ok(c) => {
                    version = c.server_info();
                    r.ok("daemon mcp", format!("{url} accepts an MCP session"));
                    c.close().await;
                }
                Err(e) => r.fail("daemon mcp", format!("{e:#}")),
            }
        }
        Health::Other(what) => r.fail(
            "daemon",
            format!("{url} answers but is not a vk-observer daemon ({what})"),
        ),
        Health::Nothing(why) => r.warn(
            "daemon",
            format!("none answers at {url} ({why}); start one with `vk-observer serve`"),
        ),
    }
    (health, version)
}

/// The listen port is served by a daemon, or free to take.
fn check_port(r: &mut Report, listen: SocketAddr, health: &Health) {
    if let Health::Daemon(_) = health {
        return r.ok(
            "port",
            format!("{listen} is served by a vk-observer daemon"),
        );
    }
    match std::net::TcpListener::bind(listen) {
        Ok(l) => {
            drop(l);
            r.ok("port", format!("{listen} is free"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => r.fail(
            "port",
            format!(
                "{listen} is in use by another program; pick another with --listen or `listen`"
            ),
        ),
        Err(e) => r.fail("port", format!("cannot listen on {listen}: {e}")),
    }
}

/// This binary's version beside the daemon's.
fn check_versions(r: &mut Report, daemon: Option<(String, String)>) {
    let ours = env!("CARGO_PKG_VERSION");
    match daemon {
        Some((_, v)) if v == ours => r.ok(
            "versions",
            format!("vk-observer {ours} (this binary), daemon {v}"),
        ),
        Some((_, v)) => r.warn(
            "versions",
            format!("vk-observer {ours} (this binary), but the daemon runs {v}: restart it"),
        ),
        None => r.ok("versions", format!("vk-observer {ours} (this binary)")),
    }
}

/// An address to connect to for a listen address (an unspecified IP means this host).
fn connect_addr(listen: SocketAddr) -> SocketAddr {
    let mut a = listen;
    if a.ip().is_unspecified() {
        a.set_ip(if a.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    a
}

/// `http://host:port` of an MCP URL like `http://host:port/mcp`.
fn base_of(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let mut s = format!("{}://{}", u.scheme(), u.host_str().unwrap_or("127.0.0.1"));
            if let Some(p) = u.port() {
                s.push_str(&format!(":{p}"));
            }
            s
        }
        Err(_) => url
            .trim_end_matches('/')
            .trim_end_matches("/mcp")
            .to_string(),
    }
}

enum Health {
    /// `/healthz` answered vk-observer's JSON.
    Daemon(Value),
    /// Something else answered.
    Other(String),
    /// Nothing answered.
    Nothing(String),
}

async fn healthz(base: &str) -> Health {
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
    {
        Ok(h) => h,
        Err(e) => return Health::Nothing(e.to_string()),
    };
    let resp = match http.get(format!("{base}/healthz")).send().await {
        Ok(r) => r,
        Err(e) => {
            return Health::Nothing(if e.is_connect() {
                "connection refused".into()
            } else {
                e.to_string()
            });
        }
    };
    let status = resp.status();
    match resp.json::<Value>().await {
        Ok(v) if v.get("status").is_some() && v.get("token").is_some() => Health::Daemon(v),
        Ok(_) => Health::Other(format!(
            "/healthz answered {status} without vk-observer's fields"
        )),
        Err(_) => Health::Other(format!("/healthz answered {status}, not JSON")),
    }
}

async fn check_vk(r: &mut Report, upstream: &str, token: Option<String>) {
    let vk = match vk_observer_upstream::VkClient::new(upstream, token) {
        Ok(v) => v,
        Err(e) => return r.fail("vk", e.to_string()),
    };
    match tokio::time::timeout(CHECK_TIMEOUT, vk.info()).await {
        Err(_) => {
            return r.fail(
                "vk",
                format!(
                    "{upstream} did not answer /api/info within {}s",
                    CHECK_TIMEOUT.as_secs()
                ),
            );
        }
        Ok(Err(e)) => {
            let hint = match &e {
                vk_observer_upstream::UpstreamError::Status {
                    status: 401 | 403, ..
                } => "; VK wants a token: set upstream_token or VK_OBSERVER_UPSTREAM_TOKEN",
                vk_observer_upstream::UpstreamError::Unreachable { .. } => {
                    "; is VK running there? (pass --upstream URL)"
                }
                _ => "",
            };
            let cause = match &e {
                vk_observer_upstream::UpstreamError::Unreachable { .. } => {
                    super::client::tcp_cause(upstream)
                        .await
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default()
                }
                _ => String::new(),
            };
            return r.fail("vk", format!("{upstream}: {e}{cause}{hint}"));
        }
        Ok(Ok(info)) => {
            // VK 0.1.x names its version in `/api/info`; the fork only its config's last one.
            let version = info["version"]
                .as_str()
                .or_else(|| info["config"]["last_app_version"].as_str())
                .map(|v| format!("VK {v}"))
                .unwrap_or_else(|| "VK version unknown".into());
            let projects = info["config"]["projects"].as_array().map(Vec::len);
            let mut detail = format!("{upstream} answers /api/info ({version}");
            if let Some(n) = projects {
                let s = if n == 1 { "" } else { "s" };
                detail.push_str(&format!(", {n} project{s}"));
            }
            detail.push(')');
            r.ok("vk", detail);
        }
    }
    match tokio::time::timeout(CHECK_TIMEOUT, vk.config_status()).await {
        Ok(Ok(s)) => {
            let loaded = s
                .loaded_at_unix_ms
                .and_then(chrono::DateTime::from_timestamp_millis)
                .map(|t| {
                    format!(
                        "config loaded at {}",
                        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    )
                })
                .unwrap_or_else(|| {
                    "no loaded_at_unix_ms: restarts of VK are detected by stream resets only".into()
                });
            r.ok(
                "vk config",
                format!("/api/config/status answers ({loaded})"),
            );
        }
        Ok(Err(e)) => r.warn(
            "vk config",
            format!("{e}; the daemon cannot tell a VK restart from a reconnect"),
        ),
        Err(_) => r.warn("vk config", "/api/config/status did not answer in time"),
    }
}

fn check_data_dir(r: &mut Report, dir: &Path, held_by: Option<SocketAddr>) {
    let shown = dir.display();
    if let Some(listen) = held_by {
        // sled allows one process per data dir: never open it beside a running daemon.
        if dir.is_dir() {
            r.ok(
                "data dir",
                format!("{shown} exists; the daemon on {listen} holds it (not opened)"),
            );
        } else {
            r.warn(
                "data dir",
                format!("{shown} does not exist, yet a daemon answers on {listen}: it uses another data dir"),
            );
        }
    } else if dir.exists() {
        check_existing_dir(r, dir);
    } else {
        check_creatable_dir(r, dir);
    }
}

/// No daemon holds `dir`: it is a writable directory, and any cache in it opens.
fn check_existing_dir(r: &mut Report, dir: &Path) {
    let shown = dir.display();
    if !dir.is_dir() {
        return r.fail("data dir", format!("{shown} exists but is not a directory"));
    }
    if let Err(e) = probe_writable(dir) {
        return r.fail("data dir", format!("{shown} is not writable: {e}"));
    }
    let has_store = dir.join("conf").exists() || dir.join("db").exists();
    if !has_store {
        return r.ok(
            "data dir",
            format!("{shown} exists, is writable and holds no cache yet"),
        );
    }
    match vk_observer_store::StoreOwner::open(dir, vk_observer_store::Retention::default()) {
        Ok(owner) => {
            let token = owner.store().token().to_string();
            drop(owner);
            r.ok(
                "data dir",
                format!(
                    "{shown} is writable and holds a cache (token {token}); no daemon holds it"
                ),
            );
        }
        Err(e @ vk_observer_store::StoreError::Locked { .. }) => r.warn(
            "data dir",
            format!("{shown} is locked by another process (a daemon listening elsewhere?): {e}"),
        ),
        Err(e) => r.fail("data dir", e.to_string()),
    }
}

/// Not there yet: the daemon creates it, so the nearest existing ancestor must be writable.
fn check_creatable_dir(r: &mut Report, dir: &Path) {
    let shown = dir.display();
    let mut ancestor = dir.parent();
    while let Some(a) = ancestor {
        if a.as_os_str().is_empty() {
            ancestor = None;
            break;
        }
        if a.exists() {
            break;
        }
        ancestor = a.parent();
    }
    let a = ancestor
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    match probe_writable(&a) {
        Ok(()) => r.ok(
            "data dir",
            format!(
                "{shown} does not exist yet; the daemon will create it ({} is writable)",
                a.display()
            ),
        ),
        Err(e) => r.fail(
            "data dir",
            format!(
                "{shown} cannot be created: {} is not writable ({e})",
                a.display()
            ),
        ),
    }
}

/// Create and remove a small file in `dir`.
fn probe_writable(dir: &Path) -> std::io::Result<()> {
    let p = dir.join(format!(".vk-observer-doctor-{}", std::process::id()));
    std::fs::write(&p, b"probe")?;
    std::fs::remove_file(&p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_urls_map_to_their_base() {
        assert_eq!(
            base_of("http://127.0.0.1:8765/mcp"),
            "http://127.0.0.1:8765"
        );
        assert_eq!(base_of("http://localhost/mcp/"), "http://localhost");
        let any: SocketAddr = "0.0.0.0:8765".parse().unwrap();
        assert_eq!(connect_addr(any).to_string(), "127.0.0.1:8765");
    }
}
