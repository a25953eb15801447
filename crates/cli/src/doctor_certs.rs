//! `doctor`'s certificate lines: each TLS certificate a `[fleet]` names (`tls_cert_file`,
//! `tls_ca_file`) with its subject and expiry: ok, a warning within `fleet::certs::WARN_DAYS`
//! of expiry, a failure once expired, not yet valid, or unreadable.

use vk_observer_config::FleetSettings;
use vk_observer_fleet::certs;

use super::doctor::Report;

/// One line per certificate of each configured file.
pub(crate) fn check(r: &mut Report, fleet: &FleetSettings) {
    let now = chrono::Utc::now();
    for (role, file) in certs::configured(fleet) {
        let what = format!("nats tls {} certificate", role.as_str());
        let found = match certs::read(role, &file) {
            Ok(found) => found,
            Err(e) => {
                r.fail(&what, format!("{e:#}"));
                continue;
            }
        };
        for cert in found {
            let detail = format!(
                "{} · {} · expires {} ({} days left)",
                cert.file.display(),
                cert.subject,
                cert.not_after.to_rfc3339(),
                cert.days_left(now)
            );
            if let Some(problem) = cert.problem(now) {
                r.fail(&what, format!("{detail}: {problem}; NATS refuses it"));
            } else if cert.expires_soon(now) {
                r.warn(
                    &what,
                    format!(
                        "{detail}: renew it (warned within {} days)",
                        certs::WARN_DAYS
                    ),
                );
            } else {
                r.ok(&what, detail);
            }
        }
    }
}
