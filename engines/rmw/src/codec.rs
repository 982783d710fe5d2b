//! Little-endian encoding of ids and rounds, shared by the wire format and the acceptor's
//! storage record, and a bounds-checked reader that never panics.
use crate::ids::{AttemptId, NodeId, ProposerId, ReqId, Round};

/// Why bytes did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodecError {
    /// The bytes end early.
    Truncated,
    /// A flag byte is neither 0 nor 1.
    BadFlag,
    /// A request id with sequence number 0, which no proposer mints.
    BadRequest,
}

pub(crate) fn put_attempt(out: &mut Vec<u8>, id: AttemptId) {
    out.extend_from_slice(&id.proposer.node.0.to_le_bytes());
    out.extend_from_slice(&id.proposer.incarnation.to_le_bytes());
    out.extend_from_slice(&id.seq.to_le_bytes());
}

pub(crate) fn put_round(out: &mut Vec<u8>, r: Round) {
    out.extend_from_slice(&r.n.to_le_bytes());
    put_attempt(out, r.id);
}

pub(crate) fn put_req_id(out: &mut Vec<u8>, req: ReqId) {
    put_attempt(out, req.attempt());
}

pub(crate) fn put_req(out: &mut Vec<u8>, req: Option<ReqId>) {
    match req {
        None => out.push(0),
        Some(req) => {
            out.push(1);
            put_req_id(out, req);
        }
    }
}

/// Reads from a byte slice front to back.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Everything not read yet.
    pub(crate) fn rest(self) -> &'a [u8] {
        self.bytes
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.bytes.len() < n {
            return Err(CodecError::Truncated);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn flag(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CodecError::BadFlag),
        }
    }

    pub(crate) fn u16(&mut self) -> Result<u16, CodecError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, CodecError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, CodecError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    /// A u32 length, then that many bytes.
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub(crate) fn attempt(&mut self) -> Result<AttemptId, CodecError> {
        let node = NodeId(self.u16()?);
        let incarnation = self.u32()?;
        let seq = self.u64()?;
        Ok(AttemptId {
            proposer: ProposerId { node, incarnation },
            seq,
        })
    }

    pub(crate) fn round(&mut self) -> Result<Round, CodecError> {
        let n = self.u64()?;
        Ok(Round {
            n,
            id: self.attempt()?,
        })
    }

    pub(crate) fn req(&mut self) -> Result<Option<ReqId>, CodecError> {
        Ok(if self.flag()? {
            Some(self.req_id()?)
        } else {
            None
        })
    }

    pub(crate) fn req_id(&mut self) -> Result<ReqId, CodecError> {
        ReqId::new(self.attempt()?).ok_or(CodecError::BadRequest)
    }
}
