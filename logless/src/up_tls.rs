//! What `logless up --tls` adds: throwaway certificates under `DIR/tls/` (made by
//! [`crate::certs`] on first use and kept for later runs), replicas that serve Redis over TLS
//! only and talk to each other over mutual TLS, a readiness probe over TLS, and the
//! `redis-cli --tls` line to print.
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use logless_harness::probe;
use logless_harness::server::ServerSpec;

use crate::certs::{self, CA_CERT, CLIENT_CERT, CLIENT_KEY, SERVER_CERT, SERVER_KEY};
use crate::tls_client;

/// The certificates' folder in `logless up`'s directory.
pub const TLS_DIR: &str = "tls";
/// How long `logless up`'s certificates are valid.
const CERTIFICATE_DAYS: u64 = 365;

/// `logless up`'s TLS: where its certificates are, and a client configuration that trusts them.
pub struct UpTls {
    dir: PathBuf,
    auth_clients: String,
    client: Arc<rustls::ClientConfig>,
}

impl UpTls {
    /// Makes the certificates in `up_dir/tls/` unless they are there, for replicas whose
    /// `tls-auth-clients` is `auth_clients`.
    pub fn prepare(up_dir: &Path, auth_clients: &str) -> Result<UpTls, String> {
        logless_node::tls::AuthClients::parse(auth_clients).map_err(|e| e.to_string())?;
        let dir = up_dir.join(TLS_DIR);
        if !dir.join(CA_CERT).exists() {
            let hosts = certs::LOOPBACK_HOSTS.map(String::from);
            certs::generate(&dir, &hosts, CERTIFICATE_DAYS)?;
        }
        let client = logless_node::tls::client_config(
            &dir.join(CA_CERT),
            Some((&dir.join(CLIENT_CERT), &dir.join(CLIENT_KEY))),
        )
        .map_err(|e| e.to_string())?;
        Ok(UpTls {
            dir,
            auth_clients: auth_clients.to_string(),
            client,
        })
    }

    /// `spec` serving its Redis port over TLS only (the plain port disabled) and its peers over
    /// mutual TLS.
    pub fn apply(&self, spec: ServerSpec) -> ServerSpec {
        let tls_port = spec.client.port();
        ServerSpec {
            client: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            ..spec
        }
        .flag("--tls-port", tls_port)
        .flag("--tls-cert-file", self.dir.join(SERVER_CERT).display())
        .flag("--tls-key-file", self.dir.join(SERVER_KEY).display())
        .flag("--tls-ca-cert-file", self.dir.join(CA_CERT).display())
        .flag("--tls-auth-clients", &self.auth_clients)
        .flag("--tls-cluster", true)
    }

    /// Sends `args` to the replica at `addr` over TLS, after `AUTH password` if one is given,
    /// and returns the first line of the reply, as [`probe::resp_ask_as`] does.
    pub fn ask(
        &self,
        addr: SocketAddr,
        password: Option<&str>,
        args: &[&str],
        timeout: Duration,
    ) -> std::io::Result<String> {
        probe::resp_ask_on_as(
            tls_client::connect(&self.client, addr, timeout)?,
            password,
            args,
        )
    }

    /// The `redis-cli` options that connect to a replica: the CA, and the client certificate
    /// if the replicas ask for one.
    pub fn redis_cli_options(&self) -> String {
        let dir = self.dir.display();
        let mut options = format!("--tls --cacert {dir}/{CA_CERT}");
        if self.auth_clients != "no" {
            options += &format!(" --cert {dir}/{CLIENT_CERT} --key {dir}/{CLIENT_KEY}");
        }
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_certificates_once_and_serves_redis_over_tls_only() {
        let dir = tempfile::tempdir().unwrap();
        let tls = UpTls::prepare(dir.path(), "yes").unwrap();
        let ca = std::fs::read(dir.path().join("tls").join(CA_CERT)).unwrap();
        let again = UpTls::prepare(dir.path(), "no").unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("tls").join(CA_CERT)).unwrap(),
            ca,
            "a second run keeps the CA its clients trust"
        );
        assert!(tls.redis_cli_options().contains("--cert "));
        assert!(!again.redis_cli_options().contains("--cert "));

        let spec =
            logless_harness::server::loopback_cluster(1, 17000, dir.path(), "memory").remove(0);
        let line: Vec<String> = tls
            .apply(spec)
            .command_line()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let value = |flag: &str| {
            let at = line.iter().position(|a| a == flag).expect(flag);
            line[at + 1].clone()
        };
        assert_eq!(value("--client-addr"), "127.0.0.1:0");
        assert_eq!(value("--tls-port"), "17000");
        assert_eq!(value("--tls-cluster"), "true");
        assert_eq!(value("--tls-auth-clients"), "yes");
        assert!(UpTls::prepare(dir.path(), "maybe").is_err());
    }
}
