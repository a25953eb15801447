//! `vk-observer token create|list|revoke`: the scoped tokens of the tokens file
//! (`config::access`; where it is and why there: that module's doc). It edits the file only,
//! never a running daemon's memory: the daemon re-reads the file when it changes, so a created
//! token works and a revoked one is refused at the next request, and both hold across
//! restarts. The secret is printed once, on stdout alone (so `$(vk-observer token create …)`
//! captures it), and is never written anywhere.

use std::path::Path;

use uuid::Uuid;

use vk_observer_config::access::{Scopes, TokenFile};

/// What `token` was asked to do.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a token and print its secret once.
    Create {
        /// Its name, shown in the audit trail and `token list`.
        #[arg(long)]
        name: String,
        /// Comma-separated: read, write, approve, deliver.
        #[arg(long)]
        scopes: String,
        /// A project it may act on (repeat for more; none: every project).
        #[arg(long = "project")]
        projects: Vec<Uuid>,
    },
    /// List the tokens: name, scopes, projects, creation time (never a secret).
    List,
    /// Revoke the token with this name.
    Revoke { name: String },
}

/// Runs `command` on the tokens file at `path`; the exit code.
pub fn run(path: &Path, command: TokenCommand) -> anyhow::Result<i32> {
    let mut file = TokenFile::load(path)?;
    match command {
        TokenCommand::Create {
            name,
            scopes,
            projects,
        } => {
            let scopes = Scopes::parse_list(&scopes)?;
            let projects = projects.iter().map(Uuid::to_string).collect();
            let secret = file.create(&name, scopes, projects)?;
            file.save(path)?;
            eprintln!(
                "token {name:?} ({}) saved in {}; its secret is shown once:",
                scopes.names(),
                path.display()
            );
            outln!("{secret}");
        }
        TokenCommand::List => {
            outln!("{:<24} {:<28} {:<12} PROJECTS", "NAME", "SCOPES", "CREATED");
            for t in &file.tokens {
                let created = chrono::DateTime::from_timestamp(t.created_unix as i64, 0)
                    .map(|d| d.format("%Y-%m-%d").to_string())
                    .unwrap_or_default();
                let projects = if t.projects.is_empty() {
                    "all".to_string()
                } else {
                    t.projects.join(",")
                };
                outln!(
                    "{:<24} {:<28} {:<12} {projects}",
                    t.name,
                    t.scope_set().names(),
                    created
                );
            }
        }
        TokenCommand::Revoke { name } => {
            if !file.revoke(&name) {
                anyhow::bail!("no token named {name:?} in {}", path.display());
            }
            file.save(path)?;
            outln!("revoked {name}");
        }
    }
    Ok(0)
}
