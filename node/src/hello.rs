//! The peer hello: who is dialling, for which shard of which cluster, proven by
//! challenge–response under the cluster secret. Sans-IO: [`crate::peer`] moves the bytes.
//!
//! ```text
//! dialler → acceptor  hello:     magic "LLPA" | wire version u8 | from u16 LE | shard u16 LE
//!                                | shards u16 LE | cluster id length u8 | cluster id
//!                                | incarnation u32 LE | life u64 LE | dialler's nonce [16]
//! acceptor → dialler  challenge: magic "LLPC" | acceptor's nonce [16] | acceptor's proof [32]
//! dialler → acceptor  answer:    dialler's proof [32]
//! acceptor → dialler  verdict:   magic "LLPW" (welcome) or "LLPL" (lost) | incarnation u32 LE
//! ```
//!
//! The verdict is about the dialler's identity: every node remembers the highest incarnation
//! of each peer it welcomed and the life (a random number drawn at each start) that spoke for
//! it (see [`crate::lives`]). A hello with a lower incarnation, or the same incarnation from
//! another life, comes from a node that lost its data directory, or runs on another's: it is
//! refused with "lost" and the incarnation known, and the dialler must not go on (see
//! `docs/lost-disk.md`).
//!
//! A proof is HMAC-SHA-256 under the cluster secret of a label (`acceptor` or `dialler`, so
//! one side's proof is never the other's) and the transcript: wire version, cluster id, the
//! dialler's and the acceptor's node ids, shard, shard count and both nonces. Each side's
//! fresh nonce makes a recorded proof useless for another connection; the secret itself never
//! crosses the wire. The acceptor checks the hello before it answers (a peer of another
//! cluster, an unknown node id or another shard layout gets no challenge), and delivers nothing
//! from the connection, nor reports the link to the peer broken, until the answer proves the
//! secret. The dialler sends nothing but the answer until the challenge proves the acceptor
//! knows the secret too.
//!
//! What it does not do: the frames after the hello are neither encrypted nor authenticated, so
//! someone on the path between two replicas can still read them, or take over a connection
//! after its hello (TLS is the remedy for that). Without a secret ([`ClusterAuth::secret`]
//! empty) the proofs are made with an empty key and prove nothing but the cluster id.
use hmac::{Hmac, KeyInit, Mac};
use logless_rmw::ids::NodeId;
use logless_rmw::wire::WIRE_VERSION;
use sha2::Sha256;

/// The hello's magic.
pub const HELLO_MAGIC: &[u8; 4] = b"LLPA";
/// The challenge's magic.
pub const CHALLENGE_MAGIC: &[u8; 4] = b"LLPC";
/// Bytes of a nonce.
pub const NONCE_BYTES: usize = 16;
/// Bytes of a proof (HMAC-SHA-256).
pub const PROOF_BYTES: usize = 32;
/// The longest cluster id, in bytes.
pub const CLUSTER_ID_BYTES_MAX: usize = 64;
/// The longest cluster id in a hello: the configured one, and on a ring its digest
/// ([`crate::ring::hello_cluster_id`]).
pub const HELLO_CLUSTER_ID_BYTES_MAX: usize = CLUSTER_ID_BYTES_MAX + crate::ring::RING_TAG_BYTES;
/// The shortest cluster secret accepted, in bytes.
pub const SECRET_BYTES_MIN: usize = 16;
/// Bytes of a hello before the cluster id.
pub const HELLO_HEAD_BYTES: usize = 4 + 1 + 2 + 2 + 2 + 1;
/// Bytes of a challenge.
pub const CHALLENGE_BYTES: usize = 4 + NONCE_BYTES + PROOF_BYTES;
/// Bytes of a verdict.
pub const VERDICT_BYTES: usize = 4 + 4;
/// The magic of a welcoming verdict.
pub const WELCOME_MAGIC: &[u8; 4] = b"LLPW";
/// The magic of a verdict refusing a node that lost its identity.
pub const LOST_MAGIC: &[u8; 4] = b"LLPL";
/// Bytes of the hello's incarnation and life.
const LIFE_BYTES: usize = 4 + 8;

/// A fresh random nonce.
pub type Nonce = [u8; NONCE_BYTES];
/// A proof of the cluster secret.
pub type Proof = [u8; PROOF_BYTES];

/// What a replica proves, and asks its peers to prove, in the hello.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterAuth {
    /// The cluster's name: two clusters with different ids refuse each other.
    pub cluster_id: String,
    /// The shared secret (empty: none configured, the proofs prove nothing).
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for ClusterAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret, not even in a debug line.
        f.debug_struct("ClusterAuth")
            .field("cluster_id", &self.cluster_id)
            .field("secret_bytes", &self.secret.len())
            .finish()
    }
}

/// The fields of a hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The dialling node.
    pub from: NodeId,
    /// The shard it dials for (the same shard on both sides).
    pub shard: u16,
    /// Its shard count.
    pub shards: u16,
    /// Its cluster id.
    pub cluster_id: Vec<u8>,
    /// Its incarnation.
    pub incarnation: u32,
    /// Its life: a random number drawn at its start.
    pub life: u64,
    /// Its nonce.
    pub nonce: Nonce,
}

impl Hello {
    /// The bytes on the wire. The cluster id must be at most [`CLUSTER_ID_BYTES_MAX`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.cluster_id.len() <= HELLO_CLUSTER_ID_BYTES_MAX);
        let mut h =
            Vec::with_capacity(HELLO_HEAD_BYTES + self.cluster_id.len() + LIFE_BYTES + NONCE_BYTES);
        h.extend_from_slice(HELLO_MAGIC);
        h.push(WIRE_VERSION);
        h.extend_from_slice(&self.from.0.to_le_bytes());
        h.extend_from_slice(&self.shard.to_le_bytes());
        h.extend_from_slice(&self.shards.to_le_bytes());
        h.push(self.cluster_id.len() as u8);
        h.extend_from_slice(&self.cluster_id);
        h.extend_from_slice(&self.incarnation.to_le_bytes());
        h.extend_from_slice(&self.life.to_le_bytes());
        h.extend_from_slice(&self.nonce);
        h
    }

    /// Reads the fixed head: checks magic and version and returns how many bytes follow it
    /// (cluster id, incarnation, life and nonce).
    pub fn rest_bytes(head: &[u8; HELLO_HEAD_BYTES]) -> Result<usize, String> {
        if &head[..4] != HELLO_MAGIC {
            return Err("not a logless peer hello (bad magic)".into());
        }
        if head[4] != WIRE_VERSION {
            return Err(format!(
                "peer speaks wire version {}, this node {WIRE_VERSION}",
                head[4]
            ));
        }
        let id_bytes = usize::from(head[11]);
        if id_bytes > HELLO_CLUSTER_ID_BYTES_MAX {
            return Err(format!("cluster id of {id_bytes} bytes"));
        }
        Ok(id_bytes + LIFE_BYTES + NONCE_BYTES)
    }

    /// Decodes a head checked by [`Hello::rest_bytes`] and the bytes that follow it.
    pub fn decode(head: &[u8; HELLO_HEAD_BYTES], rest: &[u8]) -> Hello {
        let id_bytes = usize::from(head[11]);
        assert_eq!(rest.len(), id_bytes + LIFE_BYTES + NONCE_BYTES);
        let life_at = id_bytes + 4;
        Hello {
            from: NodeId(u16::from_le_bytes([head[5], head[6]])),
            shard: u16::from_le_bytes([head[7], head[8]]),
            shards: u16::from_le_bytes([head[9], head[10]]),
            cluster_id: rest[..id_bytes].to_vec(),
            incarnation: u32::from_le_bytes(rest[id_bytes..life_at].try_into().expect("4 bytes")),
            life: u64::from_le_bytes(rest[life_at..life_at + 8].try_into().expect("8 bytes")),
            nonce: rest[life_at + 8..].try_into().expect("nonce bytes"),
        }
    }

    /// Checks a hello received by `me` (with `peers` the other nodes, `shards` its shard
    /// count) before any challenge is sent.
    pub fn check(
        &self,
        auth: &ClusterAuth,
        me: NodeId,
        peers: &[NodeId],
        shards: u16,
    ) -> Result<(), String> {
        if self.cluster_id != auth.cluster_id.as_bytes() {
            let theirs = String::from_utf8_lossy(&self.cluster_id);
            let (their_id, their_ring) = split_ring(&theirs);
            let (own_id, own_ring) = split_ring(&auth.cluster_id);
            if their_id != own_id {
                return Err(format!(
                    "node {} belongs to cluster {:?}, this node to {:?}",
                    self.from.0,
                    String::from_utf8_lossy(&self.cluster_id),
                    auth.cluster_id
                ));
            }
            // A rolling change of the peer list: lists one node apart may talk.
            let ours: Vec<u16> = peers.iter().chain([&me]).map(|n| n.0).collect();
            let tag = |ring: Option<&str>| ring.and_then(crate::ring::RingTag::parse);
            let one_apart = match (tag(own_ring), tag(their_ring)) {
                (Some(own), Some(theirs)) => {
                    crate::ring::one_node_apart(&own, &ours, &theirs).is_some()
                }
                _ => false,
            };
            if !one_apart {
                let shown = |ring: Option<&str>| {
                    ring.map_or("none (as many replicas as nodes)".to_owned(), |d| {
                        format!("digest {d}")
                    })
                };
                return Err(format!(
                    "node {} runs another ring ({}) than this node ({}): every node must be \
                     given the same peer ids and replication (while the nodes restart one by \
                     one with a new list, lists one node apart may talk: docs/ring.md §4 \
                     \"Operating\")",
                    self.from.0,
                    shown(their_ring),
                    shown(own_ring)
                ));
            }
        }
        if self.from == me || !peers.contains(&self.from) {
            return Err(format!(
                "node {} is not a peer of this cluster",
                self.from.0
            ));
        }
        if self.shards != shards || self.shard >= self.shards {
            return Err(format!(
                "node {} runs {} shards (shard {}), this node {shards}",
                self.from.0, self.shards, self.shard
            ));
        }
        Ok(())
    }
}

/// A hello's cluster id as the configured id and the ring's digest, if it has one.
fn split_ring(id: &str) -> (&str, Option<&str>) {
    match id.rsplit_once(crate::ring::RING_TAG) {
        Some((id, digest)) => (id, Some(digest)),
        None => (id, None),
    }
}

/// Which side a proof comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The node that accepted the connection.
    Acceptor,
    /// The node that dialled it.
    Dialler,
}

/// The HMAC of `side`'s proof for the connection that `hello` opened to `acceptor`, with the
/// acceptor's nonce.
fn mac(
    auth: &ClusterAuth,
    side: Side,
    hello: &Hello,
    acceptor: NodeId,
    nonce: &Nonce,
) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&auth.secret)
        .expect("HMAC takes a key of any length");
    mac.update(match side {
        Side::Acceptor => b"logless peer hello: acceptor",
        Side::Dialler => b"logless peer hello: dialler ",
    });
    mac.update(&[WIRE_VERSION, hello.cluster_id.len() as u8]);
    mac.update(&hello.cluster_id);
    mac.update(&hello.from.0.to_le_bytes());
    mac.update(&acceptor.0.to_le_bytes());
    mac.update(&hello.shard.to_le_bytes());
    mac.update(&hello.shards.to_le_bytes());
    mac.update(&hello.incarnation.to_le_bytes());
    mac.update(&hello.life.to_le_bytes());
    mac.update(&hello.nonce);
    mac.update(nonce);
    mac
}

/// `side`'s proof of the secret for the connection `hello` opened to `acceptor`, whose nonce
/// is `nonce`.
pub fn prove(
    auth: &ClusterAuth,
    side: Side,
    hello: &Hello,
    acceptor: NodeId,
    nonce: &Nonce,
) -> Proof {
    mac(auth, side, hello, acceptor, nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `proof` is `side`'s proof for that connection (compared in constant time).
pub fn verify(
    auth: &ClusterAuth,
    side: Side,
    hello: &Hello,
    acceptor: NodeId,
    nonce: &Nonce,
    proof: &Proof,
) -> bool {
    mac(auth, side, hello, acceptor, nonce)
        .verify_slice(proof)
        .is_ok()
}

/// The challenge the acceptor sends: its nonce and its proof.
pub fn encode_challenge(nonce: &Nonce, proof: &Proof) -> [u8; CHALLENGE_BYTES] {
    let mut c = [0; CHALLENGE_BYTES];
    c[..4].copy_from_slice(CHALLENGE_MAGIC);
    c[4..4 + NONCE_BYTES].copy_from_slice(nonce);
    c[4 + NONCE_BYTES..].copy_from_slice(proof);
    c
}

/// The acceptor's nonce and proof from a challenge.
pub fn decode_challenge(c: &[u8; CHALLENGE_BYTES]) -> Result<(Nonce, Proof), String> {
    if &c[..4] != CHALLENGE_MAGIC {
        return Err("not a logless peer challenge (bad magic)".into());
    }
    Ok((
        c[4..4 + NONCE_BYTES].try_into().expect("nonce bytes"),
        c[4 + NONCE_BYTES..].try_into().expect("proof bytes"),
    ))
}

/// The acceptor's verdict on the dialler's identity, sent after the dialler proved the secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Frames may follow.
    Welcome,
    /// The dialler's identity is lost: the acceptor knows its node from incarnation `known`
    /// (or from another life of that incarnation).
    Lost {
        /// The highest incarnation of the dialler's node the acceptor welcomed.
        known: u32,
    },
}

impl Verdict {
    /// The bytes on the wire.
    pub fn encode(&self) -> [u8; VERDICT_BYTES] {
        let (magic, known) = match self {
            Verdict::Welcome => (WELCOME_MAGIC, 0),
            Verdict::Lost { known } => (LOST_MAGIC, *known),
        };
        let mut v = [0; VERDICT_BYTES];
        v[..4].copy_from_slice(magic);
        v[4..].copy_from_slice(&known.to_le_bytes());
        v
    }

    /// Decodes a verdict.
    pub fn decode(v: &[u8; VERDICT_BYTES]) -> Result<Verdict, String> {
        let known = u32::from_le_bytes(v[4..].try_into().expect("4 bytes"));
        match &v[..4] {
            m if m == WELCOME_MAGIC => Ok(Verdict::Welcome),
            m if m == LOST_MAGIC => Ok(Verdict::Lost { known }),
            _ => Err("not a logless peer verdict (bad magic)".into()),
        }
    }
}

/// A fresh nonce from the operating system's generator.
pub fn nonce() -> Nonce {
    let mut n = [0; NONCE_BYTES];
    getrandom::fill(&mut n).expect("the operating system's random generator");
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(id: &str, secret: &[u8]) -> ClusterAuth {
        ClusterAuth {
            cluster_id: id.into(),
            secret: secret.to_vec(),
        }
    }

    fn hello_from(from: u16, id: &str) -> Hello {
        Hello {
            from: NodeId(from),
            shard: 1,
            shards: 2,
            cluster_id: id.as_bytes().to_vec(),
            incarnation: 3,
            life: 0x0123_4567_89ab_cdef,
            nonce: [7; NONCE_BYTES],
        }
    }

    #[test]
    fn a_hello_round_trips_and_is_checked() {
        let a = auth("prod", b"0123456789abcdef");
        let h = hello_from(2, "prod");
        let bytes = h.encode();
        let head: [u8; HELLO_HEAD_BYTES] = bytes[..HELLO_HEAD_BYTES].try_into().unwrap();
        assert_eq!(Hello::rest_bytes(&head), Ok(4 + LIFE_BYTES + NONCE_BYTES));
        assert_eq!(Hello::decode(&head, &bytes[HELLO_HEAD_BYTES..]), h);
        let me = NodeId(1);
        let peers = [NodeId(2), NodeId(3)];
        assert_eq!(h.check(&a, me, &peers, 2), Ok(()));
        assert!(hello_from(2, "test").check(&a, me, &peers, 2).is_err());
        assert!(hello_from(9, "prod").check(&a, me, &peers, 2).is_err());
        assert!(hello_from(1, "prod").check(&a, me, &peers, 2).is_err());
        assert!(h.check(&a, me, &peers, 4).is_err());
        let mut bad = head;
        bad[4] = WIRE_VERSION + 1;
        assert!(Hello::rest_bytes(&bad).is_err());
        bad = head;
        bad[0] = b'X';
        assert!(Hello::rest_bytes(&bad).is_err());
        bad = head;
        bad[11] = (HELLO_CLUSTER_ID_BYTES_MAX + 1) as u8;
        assert!(Hello::rest_bytes(&bad).is_err());
    }

    #[test]
    fn a_peer_on_another_ring_is_refused_naming_both() {
        let me = NodeId(1);
        let peers = [NodeId(2), NodeId(3)];
        let ring = auth("prod#ring=00000000000000aa", b"");
        let other = hello_from(2, "prod#ring=00000000000000bb");
        let refusal = other.check(&ring, me, &peers, 2).unwrap_err();
        assert!(refusal.contains("another ring"), "{refusal}");
        assert!(refusal.contains("00000000000000bb") && refusal.contains("00000000000000aa"));
        let plain = hello_from(2, "prod")
            .check(&ring, me, &peers, 2)
            .unwrap_err();
        assert!(plain.contains("as many replicas as nodes"), "{plain}");
        let same = hello_from(2, "prod#ring=00000000000000aa");
        assert_eq!(same.check(&ring, me, &peers, 2), Ok(()));
        assert_eq!(
            Hello::decode(
                &same.encode()[..HELLO_HEAD_BYTES].try_into().unwrap(),
                &same.encode()[HELLO_HEAD_BYTES..]
            ),
            same
        );
    }

    #[test]
    fn a_peer_whose_list_is_one_node_apart_is_welcome_during_a_rolling_change() {
        let tagged = |ids: &[u16]| {
            let tag = crate::ring::RingTag::of(ids, 3).unwrap().encode();
            format!("prod{}{tag}", crate::ring::RING_TAG)
        };
        let me = NodeId(1);
        let peers = [NodeId(2), NodeId(3), NodeId(4)];
        let ring = auth(&tagged(&[1, 2, 3, 4]), b"");
        // Node 2 restarted with node 5 added, then with node 4 removed: welcome.
        for list in [&[1, 2, 3, 4, 5][..], &[1, 2, 3]] {
            let hello = hello_from(2, &tagged(list));
            assert!(hello.cluster_id.len() <= HELLO_CLUSTER_ID_BYTES_MAX);
            assert_eq!(hello.check(&ring, me, &peers, 2), Ok(()), "{list:?}");
        }
        // Two nodes apart, or from a node this one does not know: refused.
        let two = hello_from(2, &tagged(&[1, 2, 3, 5, 6]));
        let refusal = two.check(&ring, me, &peers, 2).unwrap_err();
        assert!(refusal.contains("another ring"), "{refusal}");
        let stranger = hello_from(5, &tagged(&[1, 2, 3, 4, 5]));
        let refusal = stranger.check(&ring, me, &peers, 2).unwrap_err();
        assert!(refusal.contains("not a peer"), "{refusal}");
    }

    #[test]
    fn proofs_need_the_secret_and_are_bound_to_the_connection() {
        let a = auth("prod", b"0123456789abcdef");
        let h = hello_from(2, "prod");
        let n = [9; NONCE_BYTES];
        let me = NodeId(1);
        let p = prove(&a, Side::Dialler, &h, me, &n);
        assert!(verify(&a, Side::Dialler, &h, me, &n, &p));
        // The other side's proof, another secret, another nonce, another acceptor.
        assert!(!verify(&a, Side::Acceptor, &h, me, &n, &p));
        assert!(!verify(
            &auth("prod", b"0123456789abcdeX"),
            Side::Dialler,
            &h,
            me,
            &n,
            &p
        ));
        assert!(!verify(&a, Side::Dialler, &h, me, &[8; NONCE_BYTES], &p));
        assert!(!verify(&a, Side::Dialler, &h, NodeId(3), &n, &p));
        let other = Hello {
            nonce: [6; NONCE_BYTES],
            ..h.clone()
        };
        assert!(!verify(&a, Side::Dialler, &other, me, &n, &p));
        let other_life = Hello {
            life: 1,
            ..h.clone()
        };
        assert!(!verify(&a, Side::Dialler, &other_life, me, &n, &p));
        let (nonce, proof) = decode_challenge(&encode_challenge(&n, &p)).unwrap();
        assert_eq!((nonce, proof), (n, p));
        assert_ne!(super::nonce(), super::nonce());
    }

    #[test]
    fn verdicts_round_trip() {
        for verdict in [Verdict::Welcome, Verdict::Lost { known: 9 }] {
            assert_eq!(Verdict::decode(&verdict.encode()), Ok(verdict));
        }
        assert!(Verdict::decode(b"LLPXabcd").is_err());
    }

    #[test]
    fn the_secret_is_not_in_debug_output() {
        let text = format!("{:?}", auth("prod", b"very-secret-words"));
        assert!(!text.contains("very-secret"), "{text}");
    }
}
