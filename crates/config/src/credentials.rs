//! The NATS credential a fleet daemon presents, from `[fleet]`: a `credentials_file` read
//! here (its kind told by its content), a token, or a user and password. `describe` says where
//! it came from and what it is, never the secret (`doctor`, the start log).

use std::path::{Path, PathBuf};

use super::FleetSettings;

/// What a daemon authenticates to NATS with.
#[derive(Clone, PartialEq, Eq)]
pub enum NatsCredentials {
    /// No credential: a server without authorization.
    None,
    /// A `.creds` file (user JWT and NKey seed, as `nsc` writes them).
    CredsFile(PathBuf),
    /// An NKey user seed (`SU…`), from a file.
    NkeySeed { seed: String, file: PathBuf },
    /// A user and password, from a file (`user:password`) or the settings.
    UserPassword {
        user: String,
        password: String,
        file: Option<PathBuf>,
    },
    /// A token (from the settings: the environment or the config file).
    Token(String),
}

impl std::fmt::Debug for NatsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl NatsCredentials {
    /// The credential `[fleet]` names, its file read.
    pub fn from_settings(s: &FleetSettings) -> anyhow::Result<NatsCredentials> {
        if let Some(path) = &s.credentials_file {
            return read_file(path);
        }
        if let Some(token) = &s.token {
            return Ok(NatsCredentials::Token(token.clone()));
        }
        match (&s.user, &s.password) {
            (Some(user), Some(password)) => Ok(NatsCredentials::UserPassword {
                user: user.clone(),
                password: password.clone(),
                file: None,
            }),
            _ => Ok(NatsCredentials::None),
        }
    }

    /// Where the credential came from and what it is, its secret redacted.
    pub fn describe(&self) -> String {
        match self {
            NatsCredentials::None => "none (the NATS server must not require authorization)".into(),
            NatsCredentials::CredsFile(p) => {
                format!(
                    "credentials file {} (JWT + NKey seed, <redacted>)",
                    p.display()
                )
            }
            NatsCredentials::NkeySeed { file, .. } => {
                format!("NKey seed from {} (<redacted>)", file.display())
            }
            NatsCredentials::UserPassword {
                user,
                file: Some(file),
                ..
            } => format!(
                "user {user:?} and password from {} (<redacted>)",
                file.display()
            ),
            NatsCredentials::UserPassword { user, .. } => {
                format!("user {user:?} and password from the settings (<redacted>)")
            }
            NatsCredentials::Token(_) => "token from the settings (<redacted>)".into(),
        }
    }
}

/// A credentials file, by its content: a `.creds` file, a seed alone, or `user:password`.
fn read_file(path: &Path) -> anyhow::Result<NatsCredentials> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read [fleet] credentials_file {}: {e}",
            path.display()
        )
    })?;
    let text = text.trim();
    if text.contains("BEGIN NATS USER JWT") {
        return Ok(NatsCredentials::CredsFile(path.to_path_buf()));
    }
    if text.starts_with("SU") && !text.contains(char::is_whitespace) && !text.contains(':') {
        return Ok(NatsCredentials::NkeySeed {
            seed: text.to_owned(),
            file: path.to_path_buf(),
        });
    }
    match text.split_once(':') {
        Some((user, password))
            if !user.is_empty() && !password.is_empty() && !text.contains('\n') =>
        {
            Ok(NatsCredentials::UserPassword {
                user: user.to_owned(),
                password: password.to_owned(),
                file: Some(path.to_path_buf()),
            })
        }
        _ => anyhow::bail!(
            "[fleet] credentials_file {} is none of: a .creds file (JWT + seed), an NKey seed \
             (SU…), one line user:password",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_file(text: &str) -> anyhow::Result<NatsCredentials> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nats.creds");
        std::fs::write(&p, text).unwrap();
        let settings = FleetSettings {
            credentials_file: Some(p),
            ..FleetSettings::default()
        };
        NatsCredentials::from_settings(&settings)
    }

    #[test]
    fn a_credentials_file_is_told_by_its_content_and_never_shown() {
        let creds = "-----BEGIN NATS USER JWT-----\neyJ0\n------END NATS USER JWT------\n\n\
                     -----BEGIN USER NKEY SEED-----\nSUAB\n------END USER NKEY SEED------\n";
        assert!(matches!(
            from_file(creds).unwrap(),
            NatsCredentials::CredsFile(_)
        ));
        let seed =
            from_file("SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY\n").unwrap();
        assert!(matches!(seed, NatsCredentials::NkeySeed { .. }));
        assert!(!seed.describe().contains("SUAC"), "{}", seed.describe());
        let up = from_file("host-a:s3cret\n").unwrap();
        assert!(
            matches!(&up, NatsCredentials::UserPassword { user, password, .. }
            if user == "host-a" && password == "s3cret")
        );
        assert!(up.describe().contains("host-a") && !up.describe().contains("s3cret"));
        assert!(from_file("just words\n").is_err());
        assert!(from_file(":nouser\n").is_err());
        let token = NatsCredentials::from_settings(&FleetSettings {
            token: Some("t0k".into()),
            ..FleetSettings::default()
        })
        .unwrap();
        assert!(!format!("{token:?}").contains("t0k"));
    }
}
