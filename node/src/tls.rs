//! TLS for clients and peers: the rustls configurations built from the configured PEM files,
//! and the handshakes that wrap an accepted or dialled TCP connection.
//!
//! * Clients: with `tls_port` set, a second client listener speaks TLS with the certificate in
//!   `tls_cert_file` and its key in `tls_key_file`. `tls_auth_clients` (redis's default `yes`)
//!   makes every client present a certificate signed by a CA of `tls_ca_cert_file`; `optional`
//!   checks one if it is presented; `no` asks for none. A connection whose handshake fails
//!   (garbage, plain RESP, a certificate the CA did not sign) or takes longer than
//!   [`HANDSHAKE_TIMEOUT`] is closed and counted; the others are not affected.
//! * Peers: with `tls_cluster`, every peer connection is mutual TLS against the same CA: the
//!   dialler checks that the acceptor's certificate names the host it dialled, and the
//!   acceptor that the dialler's certificate was signed by the CA. The cluster hello (cluster
//!   id and secret) then runs inside the encrypted stream as it does over plain TCP.
//! * HTTP: with `tls_http`, the `/metrics`, `/health` and `/status` listener speaks TLS with
//!   the same certificate and asks clients for theirs as `tls_auth_clients` says.
//!
//! The crypto provider is *ring*, given to each configuration rather than installed for the
//! process.
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::{server, TlsAcceptor, TlsConnector};

use crate::config::{ConfigError, NodeConfig};
use crate::context::ClientCounters;

/// How long a client's TLS handshake may take before its connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether clients of the TLS port must present a certificate (redis's `tls-auth-clients`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthClients {
    /// Every client presents a certificate signed by the CA (the default).
    Yes,
    /// A client may present one; if it does, it must be signed by the CA.
    Optional,
    /// No client certificate is asked for.
    No,
}

impl AuthClients {
    /// Parses `yes`, `optional` or `no`.
    pub fn parse(name: &str) -> Result<AuthClients, ConfigError> {
        match name {
            "yes" => Ok(AuthClients::Yes),
            "optional" => Ok(AuthClients::Optional),
            "no" => Ok(AuthClients::No),
            other => Err(ConfigError::Invalid(format!(
                "tls_auth_clients must be yes, optional or no, not {other:?}"
            ))),
        }
    }
}

/// Checks the TLS settings of `config` that need no file: which files a setting needs, and that
/// some client listener is left.
pub fn check_config(config: &NodeConfig) -> Result<(), ConfigError> {
    let invalid = |m: &str| Err(ConfigError::Invalid(m.to_string()));
    let auth = AuthClients::parse(&config.tls_auth_clients)?;
    if config.client_addr.port() == 0 && config.tls_port == 0 {
        return invalid(
            "the client port is 0 (disabled) and no tls_port is set: no client could connect",
        );
    }
    let clients = config.tls_port != 0 || config.tls_http;
    if !clients && !config.tls_cluster {
        return Ok(());
    }
    if config.tls_cert_file.is_none() || config.tls_key_file.is_none() {
        return invalid("tls_port, tls_http and tls_cluster need tls_cert_file and tls_key_file");
    }
    let needs_ca = config.tls_cluster || auth != AuthClients::No;
    if needs_ca && config.tls_ca_cert_file.is_none() {
        return invalid("tls_cluster, and tls_auth_clients yes or optional, need tls_ca_cert_file");
    }
    Ok(())
}

/// A replica's TLS configurations, built once at start.
pub struct NodeTls {
    /// The TLS client listener's handshakes (none without `tls_port`).
    pub clients: Option<TlsAcceptor>,
    /// The HTTP listener's handshakes (none without `tls_http`).
    pub http: Option<TlsAcceptor>,
    /// Peer connections' handshakes (none without `tls_cluster`).
    pub peers: Option<Arc<PeerTls>>,
}

impl NodeTls {
    /// Reads the certificate, key and CA files `config` names and builds its configurations.
    pub fn from_config(config: &NodeConfig) -> Result<NodeTls, ConfigError> {
        check_config(config)?;
        if config.tls_port == 0 && !config.tls_http && !config.tls_cluster {
            return Ok(NodeTls {
                clients: None,
                http: None,
                peers: None,
            });
        }
        let required = |file: &Option<PathBuf>| file.clone().expect("checked by check_config");
        let chain = read_certificates(&required(&config.tls_cert_file))?;
        let key = read_key(&required(&config.tls_key_file))?;
        let roots = match &config.tls_ca_cert_file {
            Some(path) => Some(read_roots(path)?),
            None => None,
        };
        let acceptor = if config.tls_port == 0 && !config.tls_http {
            None
        } else {
            let auth = AuthClients::parse(&config.tls_auth_clients)?;
            let server = server_config(roots.clone(), auth, chain.clone(), key.clone_key())?;
            Some(TlsAcceptor::from(server))
        };
        let clients = acceptor.clone().filter(|_| config.tls_port != 0);
        let http = acceptor.filter(|_| config.tls_http);
        let peers = if config.tls_cluster {
            let roots = roots.expect("checked by check_config");
            Some(Arc::new(PeerTls::new(roots, chain, key)?))
        } else {
            None
        };
        Ok(NodeTls {
            clients,
            http,
            peers,
        })
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

fn invalid(path: &Path, what: &str, e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("{} ({what}): {e}", path.display()))
}

/// Every certificate of a PEM file, in order (a server's own first, then its chain).
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(path, "certificates", e))?;
    if certificates.is_empty() {
        return Err(invalid(path, "certificates", "no CERTIFICATE in the file"));
    }
    Ok(certificates)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, ConfigError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| invalid(path, "private key", e))
}

/// The CA certificates of a PEM file, as trust anchors.
fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, ConfigError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(path)? {
        roots
            .add(certificate)
            .map_err(|e| invalid(path, "CA certificate", e))?;
    }
    Ok(Arc::new(roots))
}

/// A server configuration presenting `chain`, checking client certificates against `roots`
/// as `auth` says.
fn server_config(
    roots: Option<Arc<RootCertStore>>,
    auth: AuthClients,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, ConfigError> {
    let tls_error = |e: &dyn std::fmt::Display| ConfigError::Invalid(format!("TLS: {e}"));
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(&e))?;
    let builder = match (auth, roots) {
        (AuthClients::No, _) | (_, None) => builder.with_no_client_auth(),
        (auth, Some(roots)) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider());
            let verifier = if auth == AuthClients::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| tls_error(&e))?)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| tls_error(&format!("the certificate and key do not fit: {e}")))?;
    Ok(Arc::new(config))
}

/// A client configuration trusting `roots` and presenting `identity` (certificate chain and
/// key) when asked for one.
fn build_client_config(
    roots: Arc<RootCertStore>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<Arc<ClientConfig>, ConfigError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Invalid(format!("TLS: {e}")))?
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| ConfigError::Invalid(format!("TLS client certificate: {e}")))?,
    };
    Ok(Arc::new(config))
}

/// The configuration of a client of a replica's TLS port: it trusts the CA certificates in
/// `ca_file` and, given `identity` (a certificate file and its key file), presents that
/// certificate. For tests and `logless up`'s readiness probe.
pub fn client_config(
    ca_file: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, ConfigError> {
    let identity = match identity {
        None => None,
        Some((cert, key)) => Some((read_certificates(cert)?, read_key(key)?)),
    };
    build_client_config(read_roots(ca_file)?, identity)
}

/// Completes the TLS handshake of an accepted client connection within
/// [`HANDSHAKE_TIMEOUT`], counting a failure (garbage, a refused or missing certificate, a
/// timeout) in `counters`.
pub async fn accept_client(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    counters: &ClientCounters,
) -> io::Result<server::TlsStream<TcpStream>> {
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
    let result = handshake.unwrap_or_else(|_| {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no TLS handshake in time",
        ))
    });
    if result.is_err() {
        counters
            .tls_handshake_failures
            .fetch_add(1, Ordering::Relaxed);
    }
    result
}

/// A connection that reads and writes bytes: plain TCP or TLS over it.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// A peer connection, encrypted or not.
pub type PeerStream = Box<dyn Stream>;

/// Mutual TLS between peers against the cluster's CA.
pub struct PeerTls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls")
    }
}

impl PeerTls {
    /// Each peer presents `chain` both as the dialler and as the acceptor, and trusts `roots`.
    fn new(
        roots: Arc<RootCertStore>,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<PeerTls, ConfigError> {
        let server = server_config(
            Some(roots.clone()),
            AuthClients::Yes,
            chain.clone(),
            key.clone_key(),
        )?;
        Ok(PeerTls {
            acceptor: TlsAcceptor::from(server),
            connector: TlsConnector::from(build_client_config(roots, Some((chain, key)))?),
        })
    }

    /// `stream`, dialled to `addr` (`HOST:PORT`), as a peer connection: through a TLS
    /// handshake that checks the acceptor's certificate names `HOST`, or plain without `tls`.
    pub async fn dial(
        tls: Option<&PeerTls>,
        stream: TcpStream,
        addr: &str,
    ) -> Result<PeerStream, String> {
        let Some(tls) = tls else {
            return Ok(Box::new(stream));
        };
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host:?} is not a name TLS can check: {e}"))?;
        let stream = tls
            .connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        Ok(Box::new(stream))
    }

    /// An accepted `stream` as a peer connection: through a TLS handshake that checks the
    /// dialler's certificate against the CA, or plain without `tls`.
    pub async fn accept(tls: Option<&PeerTls>, stream: TcpStream) -> Result<PeerStream, String> {
        let Some(tls) = tls else {
            return Ok(Box::new(stream));
        };
        let stream = tls
            .acceptor
            .accept(stream)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        Ok(Box::new(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_tls(config: NodeConfig) -> NodeConfig {
        NodeConfig {
            tls_cert_file: Some("server.crt".into()),
            tls_key_file: Some("server.key".into()),
            tls_ca_cert_file: Some("ca.crt".into()),
            ..config
        }
    }

    #[test]
    fn checks_which_files_each_setting_needs() {
        let plain = NodeConfig::default();
        check_config(&plain).unwrap();
        let tls_http = NodeConfig {
            tls_http: true,
            tls_auth_clients: "no".into(),
            ..plain.clone()
        };
        assert!(check_config(&tls_http).is_err(), "no certificate");
        check_config(&with_tls(tls_http)).unwrap();
        let tls_port = NodeConfig {
            tls_port: 7380,
            ..plain.clone()
        };
        assert!(check_config(&tls_port).is_err(), "no certificate");
        check_config(&with_tls(tls_port.clone())).unwrap();
        let without_ca = NodeConfig {
            tls_ca_cert_file: None,
            ..with_tls(tls_port.clone())
        };
        assert!(
            check_config(&without_ca).is_err(),
            "clients are checked by default"
        );
        check_config(&NodeConfig {
            tls_auth_clients: "no".into(),
            ..without_ca.clone()
        })
        .unwrap();
        assert!(check_config(&NodeConfig {
            tls_auth_clients: "no".into(),
            tls_cluster: true,
            ..without_ca
        })
        .is_err());
        assert!(check_config(&NodeConfig {
            tls_auth_clients: "sometimes".into(),
            ..with_tls(tls_port.clone())
        })
        .is_err());
        let no_port = NodeConfig {
            client_addr: "127.0.0.1:0".parse().unwrap(),
            ..plain
        };
        assert!(check_config(&no_port).is_err(), "no listener at all");
        check_config(&with_tls(NodeConfig {
            tls_port: 7380,
            ..no_port
        }))
        .unwrap();
    }

    #[test]
    fn a_missing_or_empty_file_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let config = NodeConfig {
            tls_port: 7380,
            tls_cert_file: Some(empty.clone()),
            tls_key_file: Some(dir.path().join("missing.key")),
            tls_auth_clients: "no".into(),
            ..NodeConfig::default()
        };
        let error = NodeTls::from_config(&config).err().unwrap().to_string();
        assert!(
            error.contains("empty.crt") && error.contains("no CERTIFICATE"),
            "{error}"
        );
    }
}
