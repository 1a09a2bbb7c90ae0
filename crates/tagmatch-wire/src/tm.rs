//! rdma-core tag-matching headers (`libibverbs/tm_types.h`): the TMH and RVH that prefix
//! messages sent to a Tag-Matching SRQ. All multi-byte fields are **big-endian**
//! (wire-layouts §B, confirmed by rdma-core's own `tests/test_tag_matching.py`).
//!
//! Message forms (rdma-core-tag-matching "Sending TM messages"):
//! - EAGER: TMH | payload;
//! - RNDV: TMH | RVH | optional data (at most `max_rndv_hdr_size` in all);
//! - FIN: "a copy of the original TMH and RVH of the rendezvous request, apart the opcode";
//! - NO_TAG: TMH | payload, always delivered unexpected and whole.
//!
//! This module requires the full 16-byte TMH for every opcode. UCX's active messages put
//! only a 1-byte opcode before UCX's own header (wire-layouts §C.2); that is not a TMH.

use crate::bytes::{be32, be64, byte, put_be32, put_be64};
use crate::error::{ContentError, Error, Part, Result};

/// `sizeof(struct ibv_tmh)`.
pub const TMH_LEN: usize = 16;
/// `sizeof(struct ibv_rvh)`.
pub const RVH_LEN: usize = 16;

/// `enum ibv_tmh_op` (tm_types.h:43-48). Note the numeric order: EAGER is 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TmOpcode {
    /// `IBV_TMH_NO_TAG`: untagged, always unexpected.
    NoTag = 0,
    /// `IBV_TMH_RNDV`: rendezvous request.
    Rndv = 1,
    /// `IBV_TMH_FIN`: rendezvous completion.
    Fin = 2,
    /// `IBV_TMH_EAGER`: eager tagged message.
    Eager = 3,
}

impl TmOpcode {
    /// Decodes an opcode byte.
    #[inline]
    pub fn from_u8(v: u8) -> Result<TmOpcode> {
        match v {
            0 => Ok(TmOpcode::NoTag),
            1 => Ok(TmOpcode::Rndv),
            2 => Ok(TmOpcode::Fin),
            3 => Ok(TmOpcode::Eager),
            _ => Err(ContentError::UnknownTmOpcode(v).into()),
        }
    }

    /// The name without the `IBV_TMH_` prefix: `"NO_TAG"`, `"RNDV"`, `"FIN"`, `"EAGER"`.
    pub const fn name(self) -> &'static str {
        match self {
            TmOpcode::NoTag => "NO_TAG",
            TmOpcode::Rndv => "RNDV",
            TmOpcode::Fin => "FIN",
            TmOpcode::Eager => "EAGER",
        }
    }

    /// Looks an opcode up by [`TmOpcode::name`].
    pub fn from_name(name: &str) -> Option<TmOpcode> {
        [
            TmOpcode::NoTag,
            TmOpcode::Rndv,
            TmOpcode::Fin,
            TmOpcode::Eager,
        ]
        .into_iter()
        .find(|o| o.name() == name)
    }

    /// Whether messages with this opcode may carry an RVH after the TMH: RNDV always
    /// ([`TmOpcode::requires_rvh`]), FIN in one of its two forms (see
    /// [`TmPacket::new_checked`]).
    pub const fn has_rvh(self) -> bool {
        matches!(self, TmOpcode::Rndv | TmOpcode::Fin)
    }

    /// Whether every message with this opcode carries an RVH (RNDV: "TMH | RHV |
    /// optional meta-data").
    pub const fn requires_rvh(self) -> bool {
        matches!(self, TmOpcode::Rndv)
    }
}

/// `struct ibv_tmh` (tm_types.h:50-55): 0 `opcode` u8; 1 `reserved[3]`; 4 `app_ctx` __be32;
/// 8 `tag` __be64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tmh {
    /// Operation.
    pub opcode: TmOpcode,
    /// "must be zero" per rdma-core, but UCX keeps rendezvous private data here
    /// (wire-layouts §C.2), so the bytes are kept as sent.
    pub reserved: [u8; 3],
    /// Application context (UCX: the rendezvous operation ID).
    pub app_ctx: u32,
    /// The tag the TM-SRQ matches on.
    pub tag: u64,
}

impl Tmh {
    /// Parses the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Tmh> {
        if b.len() < TMH_LEN {
            return Err(Error::len(Part::Tmh, TMH_LEN, b.len()));
        }
        Ok(Tmh {
            opcode: TmOpcode::from_u8(byte(b, 0))?,
            reserved: [byte(b, 1), byte(b, 2), byte(b, 3)],
            app_ctx: be32(b, 4),
            tag: be64(b, 8),
        })
    }

    /// Writes the 16 bytes at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        if b.len() < TMH_LEN {
            return Err(Error::len(Part::OutputBuffer, TMH_LEN, b.len()));
        }
        b[0] = self.opcode as u8;
        b[1..4].copy_from_slice(&self.reserved);
        put_be32(b, 4, self.app_ctx);
        put_be64(b, 8, self.tag);
        Ok(TMH_LEN)
    }
}

/// `struct ibv_rvh` (tm_types.h:57-61): 0 `va` __be64; 8 `rkey` __be32; 12 `len` __be32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rvh {
    /// Virtual address of the sender's registered buffer.
    pub va: u64,
    /// Remote key of that buffer.
    pub rkey: u32,
    /// Length of the rendezvous payload.
    pub len: u32,
}

impl Rvh {
    /// Parses the first 16 bytes of `b`; `offset` is where `b` starts in the message, for the
    /// length error.
    fn parse_at(b: &[u8], offset: usize) -> Result<Rvh> {
        if b.len() < RVH_LEN {
            return Err(Error::len(Part::Rvh, offset + RVH_LEN, offset + b.len()));
        }
        Ok(Rvh {
            va: be64(b, 0),
            rkey: be32(b, 8),
            len: be32(b, 12),
        })
    }

    /// Parses the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Rvh> {
        Rvh::parse_at(b, 0)
    }

    /// Writes the 16 bytes at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        if b.len() < RVH_LEN {
            return Err(Error::len(Part::OutputBuffer, RVH_LEN, b.len()));
        }
        put_be64(b, 0, self.va);
        put_be32(b, 8, self.rkey);
        put_be32(b, 12, self.len);
        Ok(RVH_LEN)
    }
}

/// A checked view of a whole TM message: TMH, RVH when the opcode has one, and the rest.
#[derive(Debug, Clone)]
pub struct TmPacket<T: AsRef<[u8]>> {
    buffer: T,
    opcode: TmOpcode,
    rvh: bool,
}

impl<T: AsRef<[u8]>> TmPacket<T> {
    /// Checks the TMH, and the RVH of RNDV messages and of FIN messages that carry one.
    ///
    /// A FIN comes in two forms, both accepted: the TMH alone, 16 bytes (rdma-core's
    /// message formats: "Rendezvous response: TMH"; wire-layouts §B: "FIN = a copy of
    /// the original TMH (with opcode FIN)", which UCX sends, §C.2; the §E.2 vector), and
    /// the TMH and RVH of the request (rdma-core-tag-matching, `IBV_TM_OP_FIN`: "a copy of
    /// the original TMH and RVH of the rendezvous request, apart the opcode"). A FIN has
    /// no payload, so one longer than the TMH has an RVH, and one cut inside it is a
    /// length error naming the RVH.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<TmPacket<T>> {
        let b = buffer.as_ref();
        // Only what the accessors rely on: the length, the opcode, whether an RVH follows.
        if b.len() < TMH_LEN {
            return Err(Error::len(Part::Tmh, TMH_LEN, b.len()));
        }
        let opcode = TmOpcode::from_u8(byte(b, 0))?;
        let rvh = opcode.requires_rvh() || (opcode.has_rvh() && b.len() > TMH_LEN);
        if rvh && b.len() < TMH_LEN + RVH_LEN {
            return Err(Error::len(Part::Rvh, TMH_LEN + RVH_LEN, b.len()));
        }
        Ok(TmPacket {
            opcode,
            buffer,
            rvh,
        })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Opcode.
    pub fn opcode(&self) -> TmOpcode {
        self.opcode
    }

    /// The three reserved bytes.
    pub fn reserved(&self) -> [u8; 3] {
        let b = self.buffer.as_ref();
        [byte(b, 1), byte(b, 2), byte(b, 3)]
    }

    /// `app_ctx`.
    pub fn app_ctx(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }

    /// `tag`.
    pub fn tag(&self) -> u64 {
        be64(self.buffer.as_ref(), 8)
    }

    /// The TMH.
    pub fn tmh(&self) -> Tmh {
        Tmh {
            opcode: self.opcode,
            reserved: self.reserved(),
            app_ctx: self.app_ctx(),
            tag: self.tag(),
        }
    }

    /// The RVH of RNDV messages and of FIN messages of the TMH+RVH form.
    pub fn rvh(&self) -> Option<Rvh> {
        let b = self.buffer.as_ref().get(TMH_LEN..)?;
        self.rvh.then(|| Rvh {
            va: be64(b, 0),
            rkey: be32(b, 8),
            len: be32(b, 12),
        })
    }

    /// TMH plus RVH when present.
    pub fn header_len(&self) -> usize {
        TMH_LEN + if self.rvh { RVH_LEN } else { 0 }
    }

    /// Eager data, rendezvous meta-data, or the body of a NO_TAG message after its TMH.
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }
}

/// A TM message as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TmRepr<'a> {
    /// The TMH.
    pub tmh: Tmh,
    /// The RVH: present for RNDV, optional for FIN (see [`TmPacket::new_checked`]),
    /// absent otherwise.
    pub rvh: Option<Rvh>,
    /// What follows the headers.
    pub payload: &'a [u8],
}

impl<'a> TmRepr<'a> {
    /// Reads a checked message.
    pub fn parse(packet: &TmPacket<&'a [u8]>) -> TmRepr<'a> {
        let b: &'a [u8] = packet.buffer;
        TmRepr {
            tmh: packet.tmh(),
            rvh: packet.rvh(),
            payload: b.get(packet.header_len()..).unwrap_or(&[]),
        }
    }

    /// Checks and reads in one step.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<TmRepr<'a>> {
        Ok(TmRepr::parse(&TmPacket::new_checked(bytes)?))
    }

    /// The FIN for a rendezvous request: the same TMH and RVH with opcode FIN.
    pub fn fin_for(rndv: &TmRepr<'_>) -> TmRepr<'static> {
        TmRepr {
            tmh: Tmh {
                opcode: TmOpcode::Fin,
                ..rndv.tmh
            },
            rvh: rndv.rvh,
            payload: &[],
        }
    }

    /// Exact number of bytes [`TmRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        TMH_LEN + self.rvh.map_or(0, |_| RVH_LEN) + self.payload.len()
    }

    /// Writes the message; the RVH must be present for RNDV, may be for FIN (which then
    /// has no payload), and must not be otherwise.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        let op = self.tmh.opcode;
        let fin_payload = op == TmOpcode::Fin && self.rvh.is_none() && !self.payload.is_empty();
        if (self.rvh.is_some() && !op.has_rvh())
            || (self.rvh.is_none() && op.requires_rvh())
            || fin_payload
        {
            return Err(ContentError::NotApplicable {
                what: if fin_payload {
                    // It would read back as an RVH.
                    "a payload without an RVH"
                } else if self.rvh.is_some() {
                    "an RVH"
                } else {
                    "no RVH"
                },
                packet: self.tmh.opcode.name(),
            }
            .into());
        }
        let total = self.buffer_len();
        if b.len() < total {
            return Err(Error::len(Part::OutputBuffer, total, b.len()));
        }
        let mut pos = self.tmh.emit(b)?;
        if let Some(rvh) = self.rvh {
            pos += rvh.emit(&mut b[pos..])?;
        }
        b[pos..total].copy_from_slice(self.payload);
        Ok(total)
    }
}
