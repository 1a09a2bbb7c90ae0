//! The EFA raw address (`struct efa_ep_addr`, `prov/efa/src/efa_av.h:18-24`, 32 bytes) and
//! the REQ raw-address optional header that carries it (wire-layouts §A.6).

use crate::bytes::{le16, le32, le64, put_le16, put_le32, put_le64};

/// An EFA endpoint address: GID, QP number and qkey (which the protocol uses as connid).
///
/// efa-rdm-protocol-v4 §1.4 and wire-layouts §A.6: `raw` (GID) 16 bytes @0, `qpn` u16 @16,
/// `pad` u16 @18, `qkey` u32 @20, `next` @24 (an in-memory pointer copied verbatim, kept
/// here so that decode/encode reproduces the bytes; 0 in practice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RawAddr {
    /// The 16-byte GID.
    pub gid: [u8; 16],
    /// QP number.
    pub qpn: u16,
    /// QP key; also the endpoint's connid (efa-rdm-protocol-v4 §4.4).
    pub qkey: u32,
    /// The `next` pointer bytes as sent.
    pub next: u64,
}

impl RawAddr {
    /// `EFA_EP_ADDR_LEN`.
    pub const LEN: usize = 32;

    /// Parses the first 32 bytes of `b`; `None` if shorter.
    pub fn from_bytes(b: &[u8]) -> Option<RawAddr> {
        let b = b.get(..Self::LEN)?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[..16]);
        Some(RawAddr {
            gid,
            qpn: le16(b, 16),
            qkey: le32(b, 20),
            next: le64(b, 24),
        })
    }

    /// The 32 wire bytes (padding zero).
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..16].copy_from_slice(&self.gid);
        put_le16(&mut b, 16, self.qpn);
        put_le32(&mut b, 20, self.qkey);
        put_le64(&mut b, 24, self.next);
        b
    }
}

/// The REQ raw-address optional header: u32 `addr_len`, then `addr_len` bytes of which the
/// first 32 are the [`RawAddr`] (wire-layouts §A.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawAddrHdr {
    /// `addr_len` as on the wire: 36 from current libfabric, 32 from libfabric 1.10.
    pub addr_len: u32,
    /// The address.
    pub addr: RawAddr,
}

impl RawAddrHdr {
    /// What current libfabric sends (`EFA_RDM_REQ_OPT_RAW_ADDR_HDR_SIZE` 40 − 4).
    pub const DEFAULT_ADDR_LEN: u32 = 36;
    /// Smallest accepted `addr_len`: the address must fit.
    pub const MIN_ADDR_LEN: u32 = RawAddr::LEN as u32;
    /// Largest accepted `addr_len`. No libfabric version sent more than 36; the bound keeps a
    /// corrupt length from being read as a huge header.
    pub const MAX_ADDR_LEN: u32 = 64;

    /// A header as current libfabric sends it.
    pub const fn new(addr: RawAddr) -> Self {
        RawAddrHdr {
            addr_len: Self::DEFAULT_ADDR_LEN,
            addr,
        }
    }

    /// Bytes on the wire: `4 + addr_len`.
    pub const fn wire_len(&self) -> usize {
        4 + self.addr_len as usize
    }
}
