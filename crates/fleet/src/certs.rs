//! The TLS certificates a `[fleet]` names (`tls_cert_file`, `tls_ca_file`): each one's subject
//! and expiry, for `doctor`, the `vk_observer_fleet_tls_cert_days_left` gauge and a warning in
//! the log within [`WARN_DAYS`] of expiry; a refusal naming the cause before connecting with an
//! expired client certificate (the server would only end the handshake); and the words for
//! what the TLS layer found wrong with the server's certificate.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use vk_observer_config::FleetSettings;
use vk_observer_telemetry::fleet_metrics as m;

/// Days before expiry from which `doctor` and the log warn.
pub const WARN_DAYS: i64 = 30;
/// How often a running daemon sets the gauge again (and warns again).
const RECHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Which `[fleet]` file a certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertRole {
    /// `tls_cert_file`: this daemon's client certificate.
    Client,
    /// `tls_ca_file`: a CA the daemon trusts for the server's certificate.
    Ca,
}

impl CertRole {
    /// The setting's name and the gauge's `role` label.
    pub fn as_str(self) -> &'static str {
        match self {
            CertRole::Client => "client",
            CertRole::Ca => "ca",
        }
    }

    fn setting(self) -> &'static str {
        match self {
            CertRole::Client => "tls_cert_file",
            CertRole::Ca => "tls_ca_file",
        }
    }
}

/// One certificate of a configured file.
#[derive(Debug, Clone, PartialEq)]
pub struct CertFacts {
    pub role: CertRole,
    pub file: PathBuf,
    pub subject: String,
    pub not_before: DateTime<Utc>,
    pub not_after: DateTime<Utc>,
}

impl CertFacts {
    /// Whole days until it expires (negative once expired).
    pub fn days_left(&self, now: DateTime<Utc>) -> i64 {
        (self.not_after - now).num_days()
    }

    /// What is wrong with it at `now`, in words, or `None`.
    pub fn problem(&self, now: DateTime<Utc>) -> Option<String> {
        if now > self.not_after {
            Some(format!("expired on {}", self.not_after.to_rfc3339()))
        } else if now < self.not_before {
            Some(format!("not valid before {}", self.not_before.to_rfc3339()))
        } else {
            None
        }
    }

    /// Expires within [`WARN_DAYS`] (and has not yet).
    pub fn expires_soon(&self, now: DateTime<Utc>) -> bool {
        self.problem(now).is_none() && self.days_left(now) < WARN_DAYS
    }
}

/// The certificate files `settings` names, by role.
pub fn configured(settings: &FleetSettings) -> Vec<(CertRole, PathBuf)> {
    let client = settings
        .tls_cert_file
        .clone()
        .map(|f| (CertRole::Client, f));
    let ca = settings.tls_ca_file.clone().map(|f| (CertRole::Ca, f));
    client.into_iter().chain(ca).collect()
}

/// Every certificate in a PEM file (a client file's first is its own; a CA file may hold several).
pub fn read(role: CertRole, file: &Path) -> anyhow::Result<Vec<CertFacts>> {
    let bytes = std::fs::read(file)
        .map_err(|e| anyhow::anyhow!("cannot read {} {}: {e}", role.setting(), file.display()))?;
    let mut found = Vec::new();
    for pem in x509_parser::pem::Pem::iter_from_buffer(&bytes) {
        let pem = pem.map_err(|e| {
            anyhow::anyhow!("{} {} is not PEM: {e}", role.setting(), file.display())
        })?;
        if pem.label != "CERTIFICATE" {
            continue;
        }
        let cert = pem.parse_x509().map_err(|e| {
            anyhow::anyhow!(
                "{} {}: not a certificate: {e}",
                role.setting(),
                file.display()
            )
        })?;
        let at = |t: &x509_parser::time::ASN1Time| {
            DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(DateTime::<Utc>::MIN_UTC)
        };
        found.push(CertFacts {
            role,
            file: file.to_path_buf(),
            subject: cert.subject().to_string(),
            not_before: at(&cert.validity().not_before),
            not_after: at(&cert.validity().not_after),
        });
    }
    if found.is_empty() {
        anyhow::bail!("{} {} holds no certificate", role.setting(), file.display());
    }
    Ok(found)
}

/// Refuse to connect with a client certificate that is expired or not valid yet, naming it.
pub fn check_client_certificate(settings: &FleetSettings) -> anyhow::Result<()> {
    let Some(file) = &settings.tls_cert_file else {
        return Ok(());
    };
    let now = Utc::now();
    let own = read(CertRole::Client, file)?;
    if let Some(problem) = own.first().and_then(|c| c.problem(now)) {
        anyhow::bail!(
            "the client certificate {} ({}) {problem}: the NATS server will refuse it; renew it \
             (`vk-observer doctor` shows each certificate's expiry)",
            file.display(),
            own[0].subject
        );
    }
    Ok(())
}

/// Set the days-left gauges now and every [`RECHECK_EVERY`] until `cancel` (nothing to do
/// without a certificate file).
pub(crate) fn spawn_expiry_watch(
    settings: FleetSettings,
    cancel: tokio_util::sync::CancellationToken,
) {
    if configured(&settings).is_empty() {
        return;
    }
    tokio::spawn(async move {
        loop {
            watch_expiry(&settings);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(RECHECK_EVERY) => {}
            }
        }
    });
}

/// Set the days-left gauge of each configured certificate (the soonest of a file), and warn
/// in the log of one expiring within [`WARN_DAYS`] or expired.
pub fn watch_expiry(settings: &FleetSettings) {
    let now = Utc::now();
    for (role, file) in configured(settings) {
        let certs = match read(role, &file) {
            Ok(certs) => certs,
            Err(e) => {
                tracing::warn!(error = %e, "fleet TLS certificate unreadable");
                continue;
            }
        };
        let Some(soonest) = certs.iter().min_by_key(|c| c.not_after) else {
            continue;
        };
        let days = soonest.days_left(now);
        metrics::gauge!(m::FLEET_TLS_DAYS_LEFT, "role" => role.as_str()).set(days as f64);
        if let Some(problem) = soonest.problem(now) {
            tracing::error!(file = %file.display(), subject = %soonest.subject, "fleet TLS certificate {problem}");
        } else if days < WARN_DAYS {
            tracing::warn!(file = %file.display(), subject = %soonest.subject, days_left = days, "fleet TLS certificate expires soon");
        }
    }
}

/// What the TLS layer found wrong in a failed connection, in words naming the cause, when the
/// error chain holds a TLS certificate error; `None` otherwise.
pub fn explain(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as Tls};
    let mut next = Some(error);
    while let Some(e) = next {
        let tls = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<Tls>())
            .or_else(|| e.downcast_ref::<Tls>());
        if let Some(tls) = tls {
            return match tls {
                Tls::InvalidCertificate(Cert::Expired | Cert::ExpiredContext { .. }) => {
                    Some(format!("the NATS server's certificate has expired ({tls})"))
                }
                Tls::InvalidCertificate(
                    Cert::NotValidForName | Cert::NotValidForNameContext { .. },
                ) => Some(format!(
                    "the NATS server's certificate does not name the host in [fleet] urls ({tls})"
                )),
                Tls::InvalidCertificate(Cert::UnknownIssuer) => Some(format!(
                    "the NATS server's certificate is not signed by a CA in tls_ca_file ({tls})"
                )),
                Tls::AlertReceived(Alert::CertificateExpired) => Some(format!(
                    "the NATS server refused this daemon's client certificate as expired ({tls})"
                )),
                Tls::AlertReceived(Alert::BadCertificate | Alert::CertificateRequired) => Some(
                    format!("the NATS server refused this daemon's client certificate ({tls})"),
                ),
                _ => None,
            };
        }
        next = e.source();
    }
    None
}
