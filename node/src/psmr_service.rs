//! The service the psmr engine replicates, chosen per replica with `service` (`--service`):
//! the B⁺-tree key-value service (`btree`, the default) or NetFS (`netfs`, seed 004 §V-B).
//!
//! The engine, its worker threads and its loop handle commands as bytes; [`PsmrService`] gives
//! them one service type whatever the choice: its commands and replies are the chosen
//! service's encodings, passed through untouched, and C-G, execution and the digest are the
//! chosen service's, on those encodings.
use std::fmt;
use std::str::FromStr;

use logless_btree::KvService;
use logless_netfs::NetFs;
use logless_service::{DecodeError, Digest, Group, ParallelService, Reader, Service, Wire};

/// Which service a replica of the psmr engine runs; the same on every replica, and fixed for
/// a data directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceKind {
    /// The B⁺-tree key-value service, through `GET`, `SET NX|XX`, `DEL`, `LOGLESS.RANGE`.
    #[default]
    Btree,
    /// NetFS, through `LOGLESS.FS <request frame>`.
    NetFs,
}

impl ServiceKind {
    /// The service, empty.
    pub fn start(self) -> PsmrService {
        match self {
            ServiceKind::Btree => PsmrService::Btree(KvService::new()),
            ServiceKind::NetFs => PsmrService::NetFs(NetFs::new()),
        }
    }
}

impl fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServiceKind::Btree => "btree",
            ServiceKind::NetFs => "netfs",
        })
    }
}

/// A service name that is neither `btree` nor `netfs`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown psmr service '{0}': the psmr engine serves btree (the B+-tree key-value service) or netfs (NetFS)")]
pub struct UnknownService(pub String);

impl FromStr for ServiceKind {
    type Err = UnknownService;

    fn from_str(s: &str) -> Result<ServiceKind, UnknownService> {
        match s {
            "btree" => Ok(ServiceKind::Btree),
            "netfs" => Ok(ServiceKind::NetFs),
            other => Err(UnknownService(other.to_owned())),
        }
    }
}

/// One command or reply of the chosen service, as that service encodes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded(pub Vec<u8>);

impl Wire for Encoded {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }

    fn decode_from(reader: &mut Reader<'_>) -> Result<Encoded, DecodeError> {
        Ok(Encoded(reader.rest().to_vec()))
    }
}

/// The service a replica runs (see the module docs).
pub enum PsmrService {
    /// The B⁺-tree key-value service.
    Btree(KvService),
    /// NetFS.
    NetFs(NetFs),
}

impl PsmrService {
    /// Which service this is.
    pub fn kind(&self) -> ServiceKind {
        match self {
            PsmrService::Btree(_) => ServiceKind::Btree,
            PsmrService::NetFs(_) => ServiceKind::NetFs,
        }
    }
}

/// `command` decoded as `S`'s and run through `shared` if it decodes.
fn shared_of<S: ParallelService>(service: &S, command: &Encoded) -> Option<Encoded> {
    let command = S::Command::decode(&command.0).ok()?;
    let reply = service.execute_shared(&command)?;
    Some(Encoded(reply.encode_to_vec()))
}

impl Service for PsmrService {
    type Command = Encoded;
    type Reply = Encoded;

    /// Encodings alone say nothing about order: every pair is dependent (conservative; the
    /// engine uses C-G, which is the chosen service's).
    fn depends(_: &Encoded, _: &Encoded) -> bool {
        true
    }

    fn group(&self, command: &Encoded, workers: u16) -> Group {
        match self {
            PsmrService::Btree(s) => s.group_of_encoded(&command.0, workers),
            PsmrService::NetFs(s) => s.group_of_encoded(&command.0, workers),
        }
    }

    fn execute(&mut self, command: &Encoded) -> Encoded {
        Encoded(match self {
            PsmrService::Btree(s) => s.execute_encoded(&command.0),
            PsmrService::NetFs(s) => s.execute_encoded(&command.0),
        })
    }

    fn digest(&self) -> Digest {
        match self {
            PsmrService::Btree(s) => s.digest(),
            PsmrService::NetFs(s) => s.digest(),
        }
    }

    /// Never called: every byte string decodes as an [`Encoded`] (the chosen service answers
    /// its own malformed requests).
    fn malformed(_: DecodeError) -> Encoded {
        Encoded(Vec::new())
    }
}

impl ParallelService for PsmrService {
    fn execute_shared(&self, command: &Encoded) -> Option<Encoded> {
        match self {
            PsmrService::Btree(s) => shared_of(s, command),
            PsmrService::NetFs(s) => shared_of(s, command),
        }
    }
}

/// A service the node's psmr runtime runs: [`PsmrService`], or the B⁺-tree service alone
/// (the whole-node simulation's).
pub trait NodeService: ParallelService + Send + Sync + 'static {
    /// Which service it is, for INFO and `/status`.
    fn kind(&self) -> ServiceKind;
}

impl NodeService for PsmrService {
    fn kind(&self) -> ServiceKind {
        PsmrService::kind(self)
    }
}

impl NodeService for KvService {
    fn kind(&self) -> ServiceKind {
        ServiceKind::Btree
    }
}

impl<S: NodeService> crate::psmr_workers::Shared<S> {
    /// The service the workers run.
    pub fn service_kind(&self) -> ServiceKind {
        self.with_service(NodeService::kind)
    }
}

#[cfg(test)]
mod tests {
    use logless_btree::{KvCommand, KvReply};
    use logless_netfs::{FsCommand, FsPath, FsReply};

    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for kind in [ServiceKind::Btree, ServiceKind::NetFs] {
            assert_eq!(kind.to_string().parse(), Ok(kind));
            assert_eq!(kind.start().kind(), kind);
        }
        let error = "redis".parse::<ServiceKind>().unwrap_err().to_string();
        assert!(error.contains("unknown psmr service 'redis'"), "{error}");
        assert!(
            error.contains("btree") && error.contains("netfs"),
            "{error}"
        );
    }

    #[test]
    fn commands_reach_the_chosen_service_as_its_encodings() {
        let mut btree = ServiceKind::Btree.start();
        let insert = KvCommand::Insert {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
        };
        let reply = btree.execute(&Encoded(insert.encode_to_vec()));
        assert_eq!(KvReply::decode(&reply.0), Ok(KvReply::Stored(true)));

        let mut netfs = ServiceKind::NetFs.start();
        let path = FsPath::new("/d").unwrap();
        let mkdir = Encoded(
            FsCommand::Mkdir {
                path: path.clone(),
                mode: logless_netfs::Mode(0o755),
                time: logless_netfs::Time { secs: 1, nanos: 0 },
            }
            .encode_to_vec(),
        );
        assert_eq!(netfs.group(&mkdir, 2), Group::All);
        let reply = netfs.execute(&mkdir);
        assert_eq!(FsReply::decode(&reply.0), Ok(FsReply::Done));
        let lstat = Encoded(FsCommand::Lstat { path }.encode_to_vec());
        assert!(netfs.execute_shared(&lstat).is_some());
        assert_ne!(netfs.digest(), ServiceKind::NetFs.start().digest());
    }
}
