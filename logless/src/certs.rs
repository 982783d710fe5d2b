//! `logless certs`: throwaway TLS certificates, for trying TLS out, for tests and for
//! `logless up --tls`.
//!
//! In one directory it writes a new CA (`ca.crt`, `ca.key`), a certificate for the replicas
//! (`server.crt`, `server.key`) valid for the hosts given, and a client certificate
//! (`client.crt`, `client.key`) for clients of a replica with `tls-auth-clients yes`; both are
//! signed by the CA and valid for [`CertsArgs::days`] days. The replicas' certificate serves
//! clients and peers and also dials peers (`tls-cluster`), so it is made for both. Keys are
//! readable by their owner only. A production deployment's certificates come from its own CA:
//! whoever holds `ca.key` can make certificates every replica trusts.
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The CA certificate's file name.
pub const CA_CERT: &str = "ca.crt";
/// The CA key's file name.
pub const CA_KEY: &str = "ca.key";
/// The replicas' certificate's file name.
pub const SERVER_CERT: &str = "server.crt";
/// The replicas' key's file name.
pub const SERVER_KEY: &str = "server.key";
/// The client certificate's file name.
pub const CLIENT_CERT: &str = "client.crt";
/// The client key's file name.
pub const CLIENT_KEY: &str = "client.key";
/// The hosts a certificate is made for by default: loopback, by address and by name.
pub const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1", "::1", "localhost"];

#[derive(clap::Args, Clone, Debug)]
pub struct CertsArgs {
    /// Where to write the files; it must not hold a CA yet.
    #[arg(long, default_value = "logless-tls")]
    pub dir: PathBuf,
    /// The names and addresses clients and peers reach the replicas by, comma-separated: the
    /// replicas' certificate is valid for these.
    #[arg(long, value_delimiter = ',', default_values_t = LOOPBACK_HOSTS.map(String::from))]
    pub hosts: Vec<String>,
    /// How many days the certificates are valid.
    #[arg(long, default_value_t = 365)]
    pub days: u64,
}

/// Writes a new CA, the replicas' and a client certificate into `dir` (created if missing),
/// the replicas' valid for `hosts`. Refuses to replace an existing CA.
pub fn generate(dir: &Path, hosts: &[String], days: u64) -> Result<(), String> {
    if dir.join(CA_CERT).exists() {
        return Err(format!(
            "{} already holds a CA: remove it, or choose another directory",
            dir.display()
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let made = |e: rcgen::Error| format!("cannot make a certificate: {e}");
    let now = SystemTime::now();
    let valid = |params: &mut CertificateParams| {
        // A day's slack for clocks behind this one.
        params.not_before = (now - Duration::from_secs(86_400)).into();
        params.not_after = (now + Duration::from_secs(days * 86_400)).into();
    };

    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "logless throwaway CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    valid(&mut ca);
    let ca_key = KeyPair::generate().map_err(made)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(made)?;
    write(dir, CA_CERT, &ca_cert.pem(), 0o644)?;
    write(dir, CA_KEY, &ca_key.serialize_pem(), 0o600)?;
    let issuer = Issuer::new(ca, ca_key);

    let leaf = |names: Vec<String>,
                common_name: &str,
                usages: Vec<ExtendedKeyUsagePurpose>,
                cert_file: &str,
                key_file: &str| {
        let mut params = CertificateParams::new(names).map_err(made)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages;
        valid(&mut params);
        let key = KeyPair::generate().map_err(made)?;
        let cert = params.signed_by(&key, &issuer).map_err(made)?;
        write(dir, cert_file, &cert.pem(), 0o644)?;
        write(dir, key_file, &key.serialize_pem(), 0o600)
    };
    leaf(
        hosts.to_vec(),
        "logless replica",
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
        SERVER_CERT,
        SERVER_KEY,
    )?;
    leaf(
        Vec::new(),
        "logless client",
        vec![ExtendedKeyUsagePurpose::ClientAuth],
        CLIENT_CERT,
        CLIENT_KEY,
    )
}

/// Writes `text` to the new file `dir/name` with permissions `mode`.
fn write(dir: &Path, name: &str, text: &str, mode: u32) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

pub fn certs(args: &CertsArgs) -> ExitCode {
    if args.hosts.is_empty() || args.days == 0 {
        eprintln!("error: --hosts must name at least one host, and --days must be at least 1");
        return ExitCode::from(2);
    }
    if let Err(e) = generate(&args.dir, &args.hosts, args.days) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let dir = args.dir.display();
    println!(
        "wrote a throwaway CA and certificates to {dir} (replicas valid for {})",
        args.hosts.join(", ")
    );
    println!(
        "replicas:  --tls-cert-file {dir}/{SERVER_CERT} --tls-key-file {dir}/{SERVER_KEY} \
         --tls-ca-cert-file {dir}/{CA_CERT}"
    );
    println!(
        "clients:   redis-cli --tls --cacert {dir}/{CA_CERT} --cert {dir}/{CLIENT_CERT} \
         --key {dir}/{CLIENT_KEY}"
    );
    println!("keep {dir}/{CA_KEY} away from the replicas: it can sign certificates they trust");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_and_certificates_with_private_keys() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let hosts = LOOPBACK_HOSTS.map(String::from);
        generate(dir.path(), &hosts, 1).unwrap();
        let mode = |name| {
            let meta = std::fs::metadata(dir.path().join(name)).unwrap();
            meta.permissions().mode() & 0o777
        };
        for key in [CA_KEY, SERVER_KEY, CLIENT_KEY] {
            assert_eq!(mode(key), 0o600, "{key}");
        }
        for cert in [CA_CERT, SERVER_CERT, CLIENT_CERT] {
            assert_ne!(mode(cert) & 0o400, 0, "{cert}");
        }
        let refused = generate(dir.path(), &hosts, 1).unwrap_err();
        assert!(refused.contains("already holds a CA"), "{refused}");
    }
}
