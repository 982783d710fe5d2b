//! Blocking TLS connections to a replica's Redis or HTTP port, for `logless up --tls`'s
//! readiness probe and `logless status` against replicas with `tls_http`.
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use logless_harness::probe;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// A TLS connection to `addr` with `config`, checking that the replica's certificate names
/// `addr`'s IP address; reads and writes wait up to `timeout`.
pub fn connect(
    config: &Arc<ClientConfig>,
    addr: SocketAddr,
    timeout: Duration,
) -> std::io::Result<StreamOwned<ClientConnection, TcpStream>> {
    let connection = ClientConnection::new(config.clone(), ServerName::from(addr.ip()))
        .map_err(std::io::Error::other)?;
    Ok(StreamOwned::new(connection, probe::connect(addr, timeout)?))
}
