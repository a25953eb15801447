//! The layers' order, the names they read, and the example file checked against the type.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use super::*;

fn example_path() -> std::path::PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("config/vk-observer.example.toml")
}

fn with_upstream() -> SettingsArgs {
    SettingsArgs {
        upstream: Some("http://127.0.0.1:3000".into()),
        ..SettingsArgs::default()
    }
}

/// Flags over `file` over defaults, no environment, validated.
fn resolve(flags: &SettingsArgs, file: Option<&ConfigFile>) -> anyhow::Result<ValidSettings> {
    flags.read(file, None)?.validate()
}

fn vars(pairs: &[(&str, &str)]) -> Option<HashMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[test]
fn example_config_loads_and_resolves() {
    let f = ConfigFile::load(&example_path()).unwrap();
    let s = resolve(&with_upstream(), Some(&f)).unwrap();
    assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(s.retention.prune_every, Duration::from_secs(600));
}

#[test]
fn a_public_listen_address_needs_a_token() {
    let local_flags = with_upstream();
    let public = SettingsArgs {
        listen: Some("0.0.0.0:8765".parse().unwrap()),
        ..local_flags.clone()
    };
    let err = resolve(&public, None).unwrap_err();
    assert!(err.to_string().contains("VK_OBSERVER_MCP_TOKEN"), "{err}");
    let with_token = SettingsArgs {
        mcp_token: Some("s3cret".into()),
        ..public
    };
    let s = resolve(&with_token, None).unwrap();
    assert_eq!(s.mcp.token.as_deref(), Some("s3cret"));
    let local = resolve(&local_flags, None).unwrap();
    assert!(local.mcp.token.is_none());
}

#[test]
fn unknown_keys_and_bad_urls_are_rejected() {
    assert!(toml::from_str::<Settings>("nope = 1").is_err());
    assert!(toml::from_str::<Settings>("[mcp]\nnope = 1").is_err());
    let no_scheme = SettingsArgs {
        upstream: Some("127.0.0.1:3000".into()),
        ..SettingsArgs::default()
    };
    assert!(resolve(&no_scheme, None).is_err());
}

/// Every key the example file sets or shows commented out (`# key = value`), as a table.
fn example_with_comments_uncommented() -> String {
    let text = std::fs::read_to_string(example_path()).unwrap();
    text.lines()
        .map(|l| uncomment_sample(l).unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `# key = value` → `key = value`; any other line unchanged (`None`).
fn uncomment_sample(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("# ")?;
    let (key, _) = rest.split_once(" = ")?;
    key.chars()
        .all(|c| c.is_ascii_lowercase() || c == '_')
        .then_some(rest)
}

fn key_set(table: &toml::Table) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for (k, v) in table {
        match v {
            toml::Value::Table(section) => keys.extend(section.keys().map(|i| format!("{k}.{i}"))),
            _ => {
                keys.insert(k.clone());
            }
        }
    }
    keys
}

#[test]
fn the_example_file_shows_every_setting_and_nothing_else() {
    // Strict: the file and its commented samples parse into the type, unknown keys rejected.
    let text = example_with_comments_uncommented();
    let parsed: Settings = toml::from_str(&text).expect("the example's samples are settings");
    let shown = key_set(&text.parse::<toml::Table>().unwrap());
    // Complete: every key `Settings` writes (the defaults, and a value in each optional one).
    let full = Settings {
        upstream: "http://127.0.0.1:3000".into(),
        upstream_token: Some("t".into()),
        mcp: McpSettings {
            token: Some("t".into()),
            tokens_file: Some("/tmp/tokens.toml".into()),
            ..McpSettings::default()
        },
        fleet: FleetSettings {
            credentials_file: Some("/c".into()),
            token: Some("t".into()),
            user: Some("u".into()),
            password: Some("p".into()),
            tls_ca_file: Some("/ca.pem".into()),
            tls_cert_file: Some("/c.pem".into()),
            tls_key_file: Some("/k.pem".into()),
            domain: Some("hub".into()),
            ..FleetSettings::default()
        },
        ..Settings::default()
    };
    let written = key_set(&toml::Table::try_from(&full).unwrap());
    assert_eq!(
        written, shown,
        "keys of Settings vs keys of the example file"
    );
    assert_eq!(parsed.retention, Retention::default());
    assert_eq!(
        parsed.store,
        StoreSettings::default(),
        "the example shows the default"
    );
}

#[test]
fn store_compression_comes_from_its_section_variable() {
    for (value, compression) in [("false", false), ("true", true)] {
        let env = vars(&[("VK_OBSERVER_STORE__COMPRESSION", value)]);
        let s = with_upstream().read(None, env).unwrap();
        let page_compression = DEFAULT_STORE_PAGE_COMPRESSION;
        let want = StoreSettings {
            compression,
            page_compression,
        };
        assert_eq!(s.store, want);
        let env = vars(&[("VK_OBSERVER_STORE__PAGE_COMPRESSION", value)]);
        let s = with_upstream().read(None, env).unwrap();
        let want = StoreSettings {
            compression: DEFAULT_STORE_COMPRESSION,
            page_compression: compression,
        };
        assert_eq!(s.store, want);
    }
}

#[test]
fn layers_stack_defaults_file_environment_flags() {
    let f = ConfigFile::load(&example_path()).unwrap();
    let env = vars(&[
        ("VK_OBSERVER_MCP__MAX_SESSIONS", "64"),
        ("VK_OBSERVER_MCP__ALLOWED_HOSTS", "a.lan,b.lan"),
        ("VK_OBSERVER_RETENTION__PRUNE_EVERY", "5m"),
        ("VK_OBSERVER_LISTEN", "127.0.0.1:9000"),
        ("VK_OBSERVER_IDEMPOTENCY__PRUNE_EVERY", "1m"),
        // Not settings: left to their commands.
        ("VK_OBSERVER_DAEMON", "http://x/mcp"),
        ("VK_OBSERVER_CONFIG", "/nowhere.toml"),
        ("VK_OBSERVER_LOG_JSON", "true"),
        ("VK_OBSERVER_MCP_TOKEN", "clap-reads-this"),
        ("VK_OBSERVER_UPSTREAM_TOKEN", ""),
    ]);
    let flags = SettingsArgs {
        listen: Some("127.0.0.1:9001".parse().unwrap()),
        ..with_upstream()
    };
    let s = flags.read(Some(&f), env).unwrap();
    assert_eq!(s.mcp.max_sessions, 64);
    assert_eq!(s.mcp.allowed_hosts, ["a.lan", "b.lan"]);
    assert_eq!(s.retention.prune_every, Duration::from_secs(300));
    assert_eq!(s.idempotency.prune_every, Duration::from_secs(60));
    assert_eq!(s.listen.to_string(), "127.0.0.1:9001", "the flag wins");
    assert_eq!(s.mcp.token, None);
    assert_eq!(s.upstream_token, None, "an empty variable is unset");
    assert_eq!(s.retention.events_kept, 100_000, "the file's value");
}

#[test]
fn a_misspelt_section_variable_is_an_error() {
    let env = vars(&[("VK_OBSERVER_MCP__MAX_SESIONS", "64")]);
    assert!(with_upstream().read(None, env).is_err());
}

#[test]
fn idempotency_flags_are_whole_seconds_and_stateless_only_switches_on() {
    let flags = SettingsArgs {
        mcp_stateless: true,
        idempotency: IdempotencyArgs {
            completed_ttl_secs: Some(0),
            in_progress_ttl_secs: Some(90),
        },
        ..with_upstream()
    };
    let s = resolve(&flags, None).unwrap();
    assert!(s.mcp.stateless);
    assert_eq!(s.idempotency.completed_ttl, Duration::ZERO);
    assert_eq!(s.idempotency.in_progress_ttl, Duration::from_secs(90));
    assert_eq!(s.mcp.progress_interval(), None);
}

#[test]
fn a_blank_mcp_token_flag_is_no_token_even_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.toml");
    std::fs::write(&p, "[mcp]\ntoken = \"from-file\"\n").unwrap();
    let f = ConfigFile::load(&p).unwrap();
    let from_file = resolve(&with_upstream(), Some(&f)).unwrap();
    assert_eq!(from_file.mcp.token.as_deref(), Some("from-file"));
    let blank = SettingsArgs {
        mcp_token: Some("  ".into()),
        ..with_upstream()
    };
    assert_eq!(resolve(&blank, Some(&f)).unwrap().mcp.token, None);
}

#[test]
fn a_fleet_host_name_must_be_a_subject_token_and_a_node_needs_nats() {
    let host = |name: &str| Settings {
        upstream: "http://127.0.0.1:3000".into(),
        fleet: FleetSettings {
            urls: vec!["nats://127.0.0.1:4222".into()],
            host: name.into(),
            ..FleetSettings::default()
        },
        ..Settings::default()
    };
    for bad in ["", "a.b", "a*", ">", "with space", &"x".repeat(65)] {
        let err = host(bad).validate().unwrap_err().to_string();
        assert!(
            err.contains("not a valid fleet host name"),
            "{bad:?}: {err}"
        );
    }
    assert!(host("build-box_2").validate().is_ok());
    let node = |urls: Vec<String>| Settings {
        fleet: FleetSettings {
            urls,
            node: true,
            ..FleetSettings::default()
        },
        ..Settings::default()
    };
    assert!(node(vec![]).validate().is_err(), "a node needs NATS");
    assert!(
        node(vec!["nats://n:4222".into()]).validate().is_ok(),
        "and no VK"
    );
}

#[test]
fn nats_credentials_are_one_source_never_a_flag_and_tls_files_go_in_pairs() {
    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        settings: SettingsArgs,
    }
    use clap::Parser as _;
    for flag in [
        "--fleet-token",
        "--nats-password",
        "--nats-creds",
        "--nats-user",
    ] {
        let cmd = Cmd::try_parse_from(["vk-observer", flag, "hunter2"]).unwrap();
        let err = cmd.settings.over_defaults().unwrap_err().to_string();
        assert!(
            err.contains("not taken on the command line") && !err.contains("hunter2"),
            "{flag}: {err}"
        );
    }
    let node = |fleet: FleetSettings| Settings {
        fleet: FleetSettings {
            urls: vec!["nats://n:4222".into()],
            node: true,
            ..fleet
        },
        ..Settings::default()
    };
    let refused = |fleet: FleetSettings, why: &str| {
        let err = node(fleet).validate().unwrap_err().to_string();
        assert!(err.contains(why), "{err}");
    };
    refused(
        FleetSettings {
            token: Some("t".into()),
            credentials_file: Some("/x.creds".into()),
            ..FleetSettings::default()
        },
        "give one NATS credential",
    );
    refused(
        FleetSettings {
            user: Some("u".into()),
            ..FleetSettings::default()
        },
        "user and password go together",
    );
    refused(
        FleetSettings {
            tls_cert_file: Some("/c.pem".into()),
            ..FleetSettings::default()
        },
        "tls_cert_file and tls_key_file go together",
    );
    refused(
        FleetSettings {
            replicas: 7,
            ..FleetSettings::default()
        },
        "replicas must be 1 to 5",
    );
    let ok = node(FleetSettings {
        user: Some("fleet".into()),
        password: Some("pw-secret".into()),
        tls_required: true,
        replicas: 3,
        ..FleetSettings::default()
    })
    .validate()
    .unwrap();
    assert!(!ok.to_toml(true).contains("pw-secret"));
}
