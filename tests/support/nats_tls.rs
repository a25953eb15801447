//! A real `nats-server` over TLS for tests/fleet_tls*.rs: a CA, a server certificate for
//! 127.0.0.1 and a client certificate are made at test time (rcgen), and the server is started
//! from a config that requires TLS and verifies client certificates (`verify: true`), on a free
//! loopback port with JetStream in a temporary directory. `ServerCert` makes the server's
//! certificate expired or for another name; `TlsNats::client` issues more client certificates
//! from the same CA (expired, or expiring in some days). The same absent-binary rule as
//! `nats::NatsServer` (skipped with a line, failed under `CI`).

use std::path::PathBuf;
use std::process::{Child, Command};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// The server certificate a `TlsNats` presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCert {
    /// For 127.0.0.1 and localhost, valid now.
    Good,
    /// For 127.0.0.1 and localhost, expired yesterday.
    Expired,
    /// Valid now, for another host name only.
    OtherName,
}

/// A certificate's validity: from a year ago until `days` from now (negative: expired).
pub fn valid_for_days(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(365);
    params.not_after = now + time::Duration::days(days);
}

pub struct TlsNats {
    ca: CertifiedIssuer<'static, KeyPair>,
    child: Child,
    pub url: String,
    /// The CA that signed the server's and the client's certificates (PEM).
    pub ca_file: PathBuf,
    /// A client certificate the server accepts, and its key (PEM).
    pub client_cert_file: PathBuf,
    pub client_key_file: PathBuf,
    _dir: tempfile::TempDir,
}

/// Write a certificate signed by `ca` for `names`, and its key, as `<stem>.pem` and
/// `<stem>-key.pem` in `dir`.
fn issue(
    ca: &CertifiedIssuer<'_, KeyPair>,
    names: &[&str],
    days: i64,
    dir: &std::path::Path,
    stem: &str,
) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, stem);
    valid_for_days(&mut params, days);
    let cert = params.signed_by(&key, &**ca).unwrap();
    let (cert_file, key_file) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}-key.pem")),
    );
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (cert_file, key_file)
}

impl TlsNats {
    pub fn start(test: &str) -> Option<TlsNats> {
        Self::start_with(test, ServerCert::Good)
    }

    /// A client certificate from the same CA valid for `days` more days (negative: expired),
    /// and its key.
    pub fn client(&self, stem: &str, days: i64) -> (PathBuf, PathBuf) {
        issue(&self.ca, &["localhost"], days, self._dir.path(), stem)
    }

    pub fn start_with(test: &str, server: ServerCert) -> Option<TlsNats> {
        let binary = super::nats::binary_or_skip(test)?;
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "vk-observer test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let (names, days): (&[&str], i64) = match server {
            ServerCert::Good => (&["127.0.0.1", "localhost"], 365),
            ServerCert::Expired => (&["127.0.0.1", "localhost"], -1),
            ServerCert::OtherName => (&["nats.example.net"], 365),
        };
        let (server_cert, server_key) = issue(&ca, names, days, dir.path(), "server");
        let (client_cert_file, client_key_file) =
            issue(&ca, &["localhost"], 365, dir.path(), "client");
        let (child, port) = super::nats::start_on_a_free_port(|port| {
            let conf = format!(
                "listen: 127.0.0.1:{port}\njetstream {{ store_dir: {store:?} }}\n\
                 tls {{\n  cert_file: {server_cert:?}\n  key_file: {server_key:?}\n  \
                 ca_file: {ca_file:?}\n  verify: true\n  timeout: 2\n}}\n",
                store = dir.path().join("jetstream"),
            );
            let path = dir.path().join("nats-server.conf");
            std::fs::write(&path, conf).unwrap();
            super::nats::spawn_ready(Command::new(&binary).arg("-c").arg(&path), dir.path())
        });
        Some(TlsNats {
            ca,
            child,
            url: format!("tls://127.0.0.1:{port}"),
            ca_file,
            client_cert_file,
            client_key_file,
            _dir: dir,
        })
    }
}

impl Drop for TlsNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
