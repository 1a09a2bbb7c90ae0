//! Software RDMA: registrations with keys and bounds, and RDMA read/write carried as
//! request/response messages between two devices (shared by the in-memory and the UDP
//! device).
//!
//! A read or write names `(key, addr, len)` of a region the peer registered. The serving
//! device checks the key (registered, not deregistered) and that `[addr, addr + len)` lies
//! inside the region; anything else is rejected and counted ([`RdmaStats`]) and the data
//! is left untouched. The whole request range is checked on every chunk, so a request is
//! either applied entirely or not at all (unless the region is deregistered while a write
//! is in flight, when the chunks after that are rejected).
//!
//! Message bodies (little-endian; the UDP frame header's `kind` says which):
//!
//! | kind | body |
//! |---|---|
//! | `READ_REQ` (2) | `id` u64, `key` u64, `addr` u64, `len` u64 |
//! | `READ_DATA` (3) | `id` u64, `offset` u64 (from `addr`), data |
//! | `READ_RESP` (4) | `id` u64, `status` u32 (sent after the last `READ_DATA`) |
//! | `WRITE` (5) | `id` u64, `key` u64, `addr` u64, `len` u64 (whole request), `offset` u64 (of this chunk), data |
//! | `WRITE_ACK` (6) | `id` u64, `len` u64 (bytes of the chunk), `status` u32 |
//!
//! `status`: 0 ok, 1 unknown key, 2 out of the region's bounds, 3 the region is gone.

use foldhash::HashMap;
use std::borrow::Cow;

use tagmatch_rdm::{MemHandle, MrKey, RdmaToken, RemoteAddr};
use tagmatch_wire::efa::RawAddr;

use crate::device::MemoryAccess;

/// Frame kind of [`RdmaMsg::ReadReq`].
pub const KIND_READ_REQ: u8 = 2;
/// Frame kind of [`RdmaMsg::ReadData`].
pub const KIND_READ_DATA: u8 = 3;
/// Frame kind of [`RdmaMsg::ReadResp`].
pub const KIND_READ_RESP: u8 = 4;
/// Frame kind of [`RdmaMsg::Write`].
pub const KIND_WRITE: u8 = 5;
/// Frame kind of [`RdmaMsg::WriteAck`].
pub const KIND_WRITE_ACK: u8 = 6;

/// Bytes of the largest RDMA message header (`WRITE`); data chunks are the datagram
/// payload minus this.
pub const MAX_RDMA_HDR: usize = 40;

/// Status of a served request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaStatus {
    /// Served.
    Ok,
    /// No registration with that key (never registered, or deregistered).
    BadKey,
    /// The range is not inside the registered region.
    OutOfBounds,
    /// The registered region no longer exists in the endpoint.
    NoMemory,
}

impl RdmaStatus {
    fn code(self) -> u32 {
        match self {
            RdmaStatus::Ok => 0,
            RdmaStatus::BadKey => 1,
            RdmaStatus::OutOfBounds => 2,
            RdmaStatus::NoMemory => 3,
        }
    }

    fn from_code(c: u32) -> RdmaStatus {
        match c {
            0 => RdmaStatus::Ok,
            1 => RdmaStatus::BadKey,
            2 => RdmaStatus::OutOfBounds,
            _ => RdmaStatus::NoMemory,
        }
    }
}

/// Bytes of a `READ_DATA` message header (`id`, `offset`).
pub const READ_DATA_HDR: usize = 16;
/// Bytes of a `WRITE` message header (`id`, `key`, `addr`, `len`, `offset`).
pub const WRITE_HDR: usize = 40;

/// A software-RDMA message. See the module documentation for the bytes. Data is borrowed
/// when parsed from a received datagram (so it is copied once, into its destination), owned
/// when built by [`SoftRdma`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaMsg<'a> {
    /// Read `len` bytes at `addr` of the region `key`.
    ReadReq {
        /// Requester's operation id.
        id: u64,
        /// Remote key.
        key: u64,
        /// Remote address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// Bytes of a read at `offset` from the request's `addr`.
    ReadData {
        /// Requester's operation id.
        id: u64,
        /// Offset in the request.
        offset: u64,
        /// The bytes.
        data: Cow<'a, [u8]>,
    },
    /// End (or refusal) of a read.
    ReadResp {
        /// Requester's operation id.
        id: u64,
        /// Outcome.
        status: RdmaStatus,
    },
    /// One chunk of a write of `len` bytes at `addr` of the region `key`.
    Write {
        /// Requester's operation id.
        id: u64,
        /// Remote key.
        key: u64,
        /// Remote address of the whole request.
        addr: u64,
        /// Length of the whole request.
        len: u64,
        /// Offset of this chunk in the request.
        offset: u64,
        /// The chunk.
        data: Cow<'a, [u8]>,
    },
    /// Answer to one write chunk.
    WriteAck {
        /// Requester's operation id.
        id: u64,
        /// Bytes of the chunk.
        len: u64,
        /// Outcome.
        status: RdmaStatus,
    },
}

struct Rd<'a>(&'a [u8]);

impl<'a> Rd<'a> {
    fn u64(&mut self) -> Option<u64> {
        let (h, t) = self.0.split_first_chunk::<8>()?;
        self.0 = t;
        Some(u64::from_le_bytes(*h))
    }
    fn u32(&mut self) -> Option<u32> {
        let (h, t) = self.0.split_first_chunk::<4>()?;
        self.0 = t;
        Some(u32::from_le_bytes(*h))
    }
}

impl<'a> RdmaMsg<'a> {
    /// The frame kind.
    pub fn kind(&self) -> u8 {
        match self {
            RdmaMsg::ReadReq { .. } => KIND_READ_REQ,
            RdmaMsg::ReadData { .. } => KIND_READ_DATA,
            RdmaMsg::ReadResp { .. } => KIND_READ_RESP,
            RdmaMsg::Write { .. } => KIND_WRITE,
            RdmaMsg::WriteAck { .. } => KIND_WRITE_ACK,
        }
    }

    /// Whether this is a request (served by the peer) rather than a response.
    pub fn is_request(&self) -> bool {
        matches!(self, RdmaMsg::ReadReq { .. } | RdmaMsg::Write { .. })
    }

    /// The header of a `READ_DATA` message (its data follows).
    pub fn read_data_header(id: u64, offset: u64) -> [u8; READ_DATA_HDR] {
        let mut h = [0u8; READ_DATA_HDR];
        h[..8].copy_from_slice(&id.to_le_bytes());
        h[8..].copy_from_slice(&offset.to_le_bytes());
        h
    }

    /// The header of a `WRITE` message (its chunk follows).
    pub fn write_header(id: u64, key: u64, addr: u64, len: u64, offset: u64) -> [u8; WRITE_HDR] {
        let mut h = [0u8; WRITE_HDR];
        for (i, v) in [id, key, addr, len, offset].into_iter().enumerate() {
            h[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        h
    }

    /// Appends the body bytes to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut put = |v: u64| out.extend_from_slice(&v.to_le_bytes());
        match self {
            RdmaMsg::ReadReq { id, key, addr, len } => {
                put(*id);
                put(*key);
                put(*addr);
                put(*len);
            }
            RdmaMsg::ReadData { id, offset, data } => {
                put(*id);
                put(*offset);
                out.extend_from_slice(data);
            }
            RdmaMsg::ReadResp { id, status } => {
                put(*id);
                out.extend_from_slice(&status.code().to_le_bytes());
            }
            RdmaMsg::Write {
                id,
                key,
                addr,
                len,
                offset,
                data,
            } => {
                put(*id);
                put(*key);
                put(*addr);
                put(*len);
                put(*offset);
                out.extend_from_slice(data);
            }
            RdmaMsg::WriteAck { id, len, status } => {
                put(*id);
                put(*len);
                out.extend_from_slice(&status.code().to_le_bytes());
            }
        }
    }

    /// Parses a body of frame kind `kind`; `None` if it is not an RDMA kind or too short.
    /// Fixed-size bodies must have exactly their size.
    pub fn parse(kind: u8, body: &'a [u8]) -> Option<RdmaMsg<'a>> {
        let mut r = Rd(body);
        let msg = match kind {
            KIND_READ_REQ => RdmaMsg::ReadReq {
                id: r.u64()?,
                key: r.u64()?,
                addr: r.u64()?,
                len: r.u64()?,
            },
            KIND_READ_DATA => {
                let (id, offset) = (r.u64()?, r.u64()?);
                let data = Cow::Borrowed(std::mem::take(&mut r.0));
                RdmaMsg::ReadData { id, offset, data }
            }
            KIND_READ_RESP => RdmaMsg::ReadResp {
                id: r.u64()?,
                status: RdmaStatus::from_code(r.u32()?),
            },
            KIND_WRITE => {
                let (id, key, addr, len, offset) =
                    (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                let data = Cow::Borrowed(std::mem::take(&mut r.0));
                RdmaMsg::Write {
                    id,
                    key,
                    addr,
                    len,
                    offset,
                    data,
                }
            }
            KIND_WRITE_ACK => RdmaMsg::WriteAck {
                id: r.u64()?,
                len: r.u64()?,
                status: RdmaStatus::from_code(r.u32()?),
            },
            _ => return None,
        };
        r.0.is_empty().then_some(msg)
    }
}

/// Software-RDMA counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RdmaStats {
    /// Registrations made.
    pub registered: u64,
    /// Registrations released.
    pub deregistered: u64,
    /// Peer read requests served.
    pub served_reads: u64,
    /// Peer write chunks applied.
    pub served_writes: u64,
    /// Peer requests (read requests or write chunks) rejected: unknown or deregistered key.
    pub rejected_key: u64,
    /// Peer requests rejected: range outside the registered region.
    pub rejected_bounds: u64,
    /// Peer requests rejected: the region is gone from the endpoint.
    pub rejected_memory: u64,
    /// Local RDMA operations that failed (rejected by the peer, dead peer, bad local range).
    pub failed_ops: u64,
    /// Responses that named no pending operation or were inconsistent (dropped).
    pub stray_responses: u64,
    /// Registrations refused because they would have passed the registration limit
    /// ([`SoftRdma::set_registration_limit`]).
    pub refused_registrations: u64,
}

#[derive(Debug, Clone, Copy)]
struct Reg {
    mem: MemHandle,
    addr: u64,
    len: u64,
    /// Peers may use the key (else only this device's own operations use the region).
    remote: bool,
}

#[derive(Debug)]
struct Pending {
    token: RdmaToken,
    peer: RawAddr,
    read: bool,
    local: MemHandle,
    offset: u64,
    len: u64,
    /// Bytes received (reads) or acknowledged (writes).
    done: u64,
    /// Reads: the end of the highest range written into the destination so far (nothing
    /// at or after it has been written: [`SoftRdma::read_next`]).
    high: u64,
    /// Reads: the responder's final status.
    resp: Option<RdmaStatus>,
    failed: bool,
}

impl Pending {
    /// A read (`read`) or write of `len` bytes at `offset` of region `local`, nothing
    /// transferred yet.
    fn new(
        token: RdmaToken,
        peer: RawAddr,
        read: bool,
        local: MemHandle,
        offset: u64,
        len: u64,
    ) -> Pending {
        Pending {
            token,
            peer,
            read,
            local,
            offset,
            len,
            done: 0,
            high: 0,
            resp: None,
            failed: false,
        }
    }
}

/// Registrations and pending operations of one device. See the module documentation.
#[derive(Debug)]
pub struct SoftRdma {
    regs: HashMap<u64, Reg>,
    /// Remote registrations per region: a region in here is open to peers' reads and
    /// writes.
    exposed: HashMap<MemHandle, u32>,
    next_key: u64,
    key_salt: u64,
    next_addr: u64,
    ops: HashMap<u64, Pending>,
    /// Reads among `ops`.
    reads: usize,
    next_id: u64,
    /// Bytes of the registrations alive.
    registered_bytes: u64,
    /// Most bytes registered at once ([`SoftRdma::try_register`]).
    limit: u64,
    /// Counters.
    pub stats: RdmaStats,
}

impl SoftRdma {
    /// A table whose keys carry `salt` in their upper half (so keys of different devices,
    /// or of a restarted process, differ).
    pub fn new(salt: u32) -> SoftRdma {
        SoftRdma {
            regs: HashMap::default(),
            exposed: HashMap::default(),
            next_key: 1,
            key_salt: (salt as u64) << 32,
            next_addr: 1 << 40,
            ops: HashMap::default(),
            reads: 0,
            next_id: 1,
            registered_bytes: 0,
            limit: u64::MAX,
            stats: RdmaStats::default(),
        }
    }

    /// Sets the most bytes registered at once (default unlimited), as a verbs device's
    /// registrations count against the locked-memory limit (`RLIMIT_MEMLOCK`, where
    /// `ibv_reg_mr` fails with `ENOMEM`): [`SoftRdma::try_register`] refuses a
    /// registration that would pass it. Registrations already made stay.
    pub fn set_registration_limit(&mut self, bytes: u64) {
        self.limit = bytes;
    }

    /// Bytes of the registrations alive (local and remote).
    pub fn registered_bytes(&self) -> u64 {
        self.registered_bytes
    }

    /// [`SoftRdma::register`] within the registration limit: `None` (counted in
    /// [`RdmaStats::refused_registrations`]) when the registrations alive and this one
    /// would pass it.
    pub fn try_register(&mut self, mem: MemHandle, len: u64, remote: bool) -> Option<MrKey> {
        if self
            .registered_bytes
            .checked_add(len)
            .is_none_or(|b| b > self.limit)
        {
            self.stats.refused_registrations += 1;
            return None;
        }
        Some(self.register(mem, len, remote))
    }

    /// Registers region `mem` of `len` bytes: a fresh key and a fresh address range.
    /// `remote`: peers may read and write it with that key; otherwise it serves only as
    /// the local side of this device's own operations, and peers' requests naming the key
    /// are rejected as a wrong key (a registration without remote access flags).
    pub fn register(&mut self, mem: MemHandle, len: u64, remote: bool) -> MrKey {
        // The key's lower half counts registrations: after 2^32 of them it wraps, and a
        // region registered long ago may still hold the next number (or 0, which no key
        // has). Skip those: a new key must never replace a live registration.
        let key = loop {
            let low = self.next_key & 0xffff_ffff;
            self.next_key = self.next_key.wrapping_add(1);
            let key = self.key_salt | low;
            if low != 0 && !self.regs.contains_key(&key) {
                break key;
            }
        };
        let addr = self.next_addr;
        // Leave a gap of at least one page so that an off-by-one range never lands in the
        // next region.
        self.next_addr = self
            .next_addr
            .saturating_add(len.saturating_add(8191) & !4095);
        self.regs.insert(
            key,
            Reg {
                mem,
                addr,
                len,
                remote,
            },
        );
        if remote {
            *self.exposed.entry(mem).or_insert(0) += 1;
        }
        self.registered_bytes = self.registered_bytes.saturating_add(len);
        self.stats.registered += 1;
        MrKey { addr, key }
    }

    /// Releases a key; later requests naming it are rejected.
    pub fn deregister(&mut self, key: u64) -> bool {
        let Some(reg) = self.regs.remove(&key) else {
            return false;
        };
        self.registered_bytes = self.registered_bytes.saturating_sub(reg.len);
        if !reg.remote {
            self.stats.deregistered += 1;
            return true;
        }
        if let Some(n) = self.exposed.get_mut(&reg.mem) {
            *n -= 1;
            if *n == 0 {
                self.exposed.remove(&reg.mem);
            }
        }
        self.stats.deregistered += 1;
        true
    }

    /// Whether region `mem` is registered for peers (they may read or write it).
    pub fn exposes(&self, mem: MemHandle) -> bool {
        self.exposed.contains_key(&mem)
    }

    /// Registrations alive.
    pub fn registrations(&self) -> usize {
        self.regs.len()
    }

    /// Operations in flight.
    pub fn pending(&self) -> usize {
        self.ops.len()
    }

    /// RDMA reads of ours in flight.
    pub fn reads_pending(&self) -> usize {
        self.reads
    }

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Starts an RDMA read from `peer`; returns the request to send.
    pub fn start_read(
        &mut self,
        token: RdmaToken,
        peer: RawAddr,
        local: MemHandle,
        offset: u64,
        remote: RemoteAddr,
        len: u64,
    ) -> RdmaMsg<'static> {
        let id = self.new_id();
        self.reads += 1;
        self.ops
            .insert(id, Pending::new(token, peer, true, local, offset, len));
        RdmaMsg::ReadReq {
            id,
            key: remote.key,
            addr: remote.addr,
            len,
        }
    }

    /// Starts an RDMA write to `peer`: the chunks to send (at most `chunk` data bytes each,
    /// at least one message even for zero bytes), or `None` if the local range is invalid
    /// (the operation fails at once).
    #[allow(clippy::too_many_arguments)]
    pub fn start_write(
        &mut self,
        token: RdmaToken,
        peer: RawAddr,
        local: MemHandle,
        offset: u64,
        remote: RemoteAddr,
        len: u64,
        mem: &dyn MemoryAccess,
        chunk: usize,
    ) -> Option<Vec<RdmaMsg<'static>>> {
        let id = self.begin_write(token, peer, local, offset, len, mem)?;
        let src = local_range(mem.region(local)?, offset, len)?;
        let chunk = chunk.max(1);
        let mut out = Vec::with_capacity(src.len() / chunk + 1);
        let mut off = 0usize;
        loop {
            let end = (off + chunk).min(src.len());
            out.push(RdmaMsg::Write {
                id,
                key: remote.key,
                addr: remote.addr,
                len,
                offset: off as u64,
                data: Cow::Owned(src[off..end].to_vec()),
            });
            off = end;
            if off >= src.len() {
                break;
            }
        }
        Some(out)
    }

    /// Starts an RDMA write to `peer` whose chunks the caller builds itself from the local
    /// range (`WRITE` messages of [`RdmaMsg::write_header`] with this id, then the chunk):
    /// the operation's id, or `None` if the local range is invalid (the operation fails at
    /// once).
    pub fn begin_write(
        &mut self,
        token: RdmaToken,
        peer: RawAddr,
        local: MemHandle,
        offset: u64,
        len: u64,
        mem: &dyn MemoryAccess,
    ) -> Option<u64> {
        local_range(mem.region(local)?, offset, len)?;
        let id = self.new_id();
        self.ops
            .insert(id, Pending::new(token, peer, false, local, offset, len));
        Some(id)
    }

    fn check(
        &mut self,
        key: u64,
        addr: u64,
        len: u64,
        mem: &dyn MemoryAccess,
    ) -> Result<(MemHandle, usize), RdmaStatus> {
        let status = match self.regs.get(&key) {
            None => RdmaStatus::BadKey,
            Some(r) if !r.remote => RdmaStatus::BadKey,
            Some(r) => match addr.checked_sub(r.addr).and_then(|o| {
                let end = o.checked_add(len)?;
                (end <= r.len).then_some(o)
            }) {
                None => RdmaStatus::OutOfBounds,
                Some(o) => match mem.region(r.mem) {
                    Some(b) if (b.len() as u64) >= r.len => {
                        return Ok((r.mem, o as usize));
                    }
                    _ => RdmaStatus::NoMemory,
                },
            },
        };
        match status {
            RdmaStatus::BadKey => self.stats.rejected_key += 1,
            RdmaStatus::OutOfBounds => self.stats.rejected_bounds += 1,
            _ => self.stats.rejected_memory += 1,
        }
        Err(status)
    }

    /// Checks a peer's read request: the region and the offset in it to read from, or the
    /// status to answer with (counted). For devices that stream the data themselves
    /// ([`SoftRdma::read_chunk`]) instead of [`SoftRdma::serve`].
    pub fn check_read(
        &mut self,
        key: u64,
        addr: u64,
        len: u64,
        mem: &dyn MemoryAccess,
    ) -> Result<(MemHandle, u64), RdmaStatus> {
        let (h, off) = self.check(key, addr, len, mem)?;
        self.stats.served_reads += 1;
        Ok((h, off as u64))
    }

    /// `len` bytes at `off` of the region registered under `key` as `h`, for a streamed read
    /// (`None`, counted: the key was deregistered meanwhile — the handle may name another
    /// region by now — or the region shrank). Borrowed: the device sends them from there.
    pub fn read_chunk<'m>(
        &mut self,
        key: u64,
        h: MemHandle,
        off: u64,
        len: u64,
        mem: &'m dyn MemoryAccess,
    ) -> Option<&'m [u8]> {
        if self.regs.get(&key).is_none_or(|r| r.mem != h || !r.remote) {
            self.stats.rejected_key += 1;
            return None;
        }
        match mem.region(h).and_then(|b| local_range(b, off, len)) {
            Some(b) => Some(b),
            None => {
                self.stats.rejected_memory += 1;
                None
            }
        }
    }

    /// Serves a peer's request against the local memory; returns the responses to send
    /// back (reads: data chunks of at most `chunk` bytes, then the status).
    pub fn serve(
        &mut self,
        msg: RdmaMsg<'_>,
        mem: &mut dyn MemoryAccess,
        chunk: usize,
    ) -> Vec<RdmaMsg<'static>> {
        match msg {
            RdmaMsg::ReadReq { id, key, addr, len } => {
                let (h, off) = match self.check(key, addr, len, mem) {
                    Ok(x) => x,
                    Err(status) => return vec![RdmaMsg::ReadResp { id, status }],
                };
                self.stats.served_reads += 1;
                let Some(src) = mem.region(h).and_then(|b| local_range(b, off as u64, len)) else {
                    return vec![RdmaMsg::ReadResp {
                        id,
                        status: RdmaStatus::NoMemory,
                    }];
                };
                let chunk = chunk.max(1);
                let mut out = Vec::with_capacity(src.len() / chunk + 2);
                for (i, c) in src.chunks(chunk).enumerate() {
                    out.push(RdmaMsg::ReadData {
                        id,
                        offset: (i * chunk) as u64,
                        data: Cow::Owned(c.to_vec()),
                    });
                }
                out.push(RdmaMsg::ReadResp {
                    id,
                    status: RdmaStatus::Ok,
                });
                out
            }
            RdmaMsg::Write {
                id,
                key,
                addr,
                len,
                offset,
                data,
            } => {
                let clen = data.len() as u64;
                let ack = |status| {
                    vec![RdmaMsg::WriteAck {
                        id,
                        len: clen,
                        status,
                    }]
                };
                let inside = offset.checked_add(clen).is_some_and(|e| e <= len);
                if !inside {
                    self.stats.rejected_bounds += 1;
                    return ack(RdmaStatus::OutOfBounds);
                }
                let (h, off) = match self.check(key, addr, len, mem) {
                    Ok(x) => x,
                    Err(s) => return ack(s),
                };
                let dst = mem.region_mut(h).and_then(|b| {
                    let s = off.checked_add(offset as usize)?;
                    b.get_mut(s..s.checked_add(data.len())?)
                });
                match dst {
                    Some(d) => {
                        d.copy_from_slice(&data);
                        self.stats.served_writes += 1;
                        ack(RdmaStatus::Ok)
                    }
                    None => {
                        self.stats.rejected_memory += 1;
                        ack(RdmaStatus::NoMemory)
                    }
                }
            }
            _ => Vec::new(),
        }
    }

    /// Applies a response from `peer`; returns the finished operation, if any.
    pub fn on_response(
        &mut self,
        peer: &RawAddr,
        msg: RdmaMsg<'_>,
        mem: &mut dyn MemoryAccess,
    ) -> Option<(RdmaToken, bool)> {
        let id = match &msg {
            RdmaMsg::ReadData { id, .. }
            | RdmaMsg::ReadResp { id, .. }
            | RdmaMsg::WriteAck { id, .. } => *id,
            _ => return None,
        };
        let Some(p) = self.ops.get_mut(&id) else {
            self.stats.stray_responses += 1;
            return None;
        };
        if !same_peer(&p.peer, peer) {
            self.stats.stray_responses += 1;
            return None;
        }
        match msg {
            RdmaMsg::ReadData { offset, data, .. } if p.read => {
                let end = offset.checked_add(data.len() as u64);
                if end.is_none_or(|e| e > p.len) {
                    self.stats.stray_responses += 1;
                    return None;
                }
                let dst = mem.region_mut(p.local).and_then(|b| {
                    let s = usize::try_from(p.offset.checked_add(offset)?).ok()?;
                    b.get_mut(s..s.checked_add(data.len())?)
                });
                match dst {
                    Some(d) => {
                        d.copy_from_slice(&data);
                        p.done += data.len() as u64;
                        p.high = p.high.max(offset + data.len() as u64);
                    }
                    None => p.failed = true,
                }
            }
            RdmaMsg::ReadResp { status, .. } if p.read => {
                p.resp = Some(status);
                if status != RdmaStatus::Ok {
                    p.failed = true;
                }
            }
            RdmaMsg::WriteAck { len, status, .. } if !p.read => {
                if status != RdmaStatus::Ok {
                    p.failed = true;
                }
                p.done = p.done.saturating_add(len);
            }
            _ => {
                self.stats.stray_responses += 1;
                return None;
            }
        }
        self.finish(id)
    }

    /// Where the data of a `READ_DATA` response from `peer` (operation `id`, `len` bytes at
    /// `offset`) belongs: the local region and the byte offset in it, if the operation is
    /// a pending read of `peer` and the range lies inside it and inside the region's
    /// bytes. A device that receives the data straight there reports it with
    /// [`SoftRdma::on_read_placed`].
    pub fn read_dest(
        &self,
        peer: &RawAddr,
        id: u64,
        offset: u64,
        len: u64,
        mem: &dyn MemoryAccess,
    ) -> Option<(MemHandle, usize)> {
        let p = self.ops.get(&id)?;
        if !p.read || p.failed || !same_peer(&p.peer, peer) {
            return None;
        }
        if offset.checked_add(len)? > p.len {
            return None;
        }
        let start = usize::try_from(p.offset.checked_add(offset)?).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        (end <= mem.region(p.local)?.len()).then_some((p.local, start))
    }

    /// `len` bytes of read `id` were received into the place [`SoftRdma::read_dest`]
    /// named (a `READ_DATA` response applied without a copy); returns the finished
    /// operation, if any.
    pub fn on_read_placed(
        &mut self,
        peer: &RawAddr,
        id: u64,
        offset: u64,
        len: u64,
    ) -> Option<(RdmaToken, bool)> {
        let p = self.ops.get_mut(&id)?;
        if !p.read || !same_peer(&p.peer, peer) {
            self.stats.stray_responses += 1;
            return None;
        }
        p.done += len;
        p.high = p.high.max(offset.saturating_add(len));
        self.finish(id)
    }

    /// Whether read `id` of ours has all its data and waits for the server's status.
    pub fn read_awaits_status(&self, id: u64) -> bool {
        self.ops
            .get(&id)
            .is_some_and(|p| p.read && !p.failed && p.resp.is_none() && p.done >= p.len)
    }

    /// Where the next data of read `id` from `peer` is expected if it arrives in order:
    /// the offset just past the highest range written so far and the bytes left after
    /// it. `None` if `id` is not a pending, unfailed read of `peer`, nothing is left past
    /// that point, or the read's destination is a registered region. No data of the read
    /// has been written at or after the offset, so a device may receive a datagram there
    /// before knowing what it holds (it is overwritten by the read's own data later) —
    /// but not in a registered region: peers may read it meanwhile (an RDMA read served
    /// from it), and would see bytes nobody wrote there (two requesters writing the
    /// same data to one responder's region, one reading it back while the other's
    /// write, an emulated write the responder carries out as a read, was in flight:
    /// `tests/netns.rs::three_hosts_on_a_bridge_two_requesters_share_a_responder`, about
    /// one run in 40 under load).
    pub fn read_next(&self, peer: &RawAddr, id: u64) -> Option<(u64, u64)> {
        let p = self.ops.get(&id)?;
        (p.read
            && !p.failed
            && same_peer(&p.peer, peer)
            && p.high < p.len
            && !self.exposes(p.local))
        .then(|| (p.high, p.len - p.high))
    }

    /// Removes operation `id` if it has finished; returns it.
    fn finish(&mut self, id: u64) -> Option<(RdmaToken, bool)> {
        let p = self.ops.get(&id)?;
        let finished = if p.read {
            p.failed || (p.resp == Some(RdmaStatus::Ok) && p.done >= p.len)
        } else {
            // Every chunk is answered once; a failure waits for the rest so that no late
            // ack finds a reused id.
            p.done >= p.len && (p.len > 0 || p.done == 0)
        };
        if !finished {
            return None;
        }
        let p = self.ops.remove(&id)?;
        self.reads -= usize::from(p.read);
        if p.failed {
            self.stats.failed_ops += 1;
        }
        Some((p.token, !p.failed))
    }

    /// Fails every operation towards `peer` (its device stopped answering).
    pub fn fail_peer(&mut self, peer: &RawAddr) -> Vec<RdmaToken> {
        let ids: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, p)| same_peer(&p.peer, peer))
            .map(|(id, _)| *id)
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(p) = self.ops.remove(&id) {
                self.reads -= usize::from(p.read);
                self.stats.failed_ops += 1;
                out.push(p.token);
            }
        }
        out
    }
}

fn local_range(b: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
    let s = usize::try_from(offset).ok()?;
    let l = usize::try_from(len).ok()?;
    b.get(s..s.checked_add(l)?)
}

/// Same device: GID, QP and connid.
pub fn same_peer(a: &RawAddr, b: &RawAddr) -> bool {
    a.gid == b.gid && a.qpn == b.qpn && a.qkey == b.qkey
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After 2^32 registrations the key counter wraps: a key still registered is skipped,
    /// not replaced (its region would otherwise be lost and its bytes counted for ever).
    #[test]
    fn keys_stay_unique_when_the_counter_wraps() {
        let mut r = SoftRdma::new(7);
        let a = r.register(MemHandle(1), 100, true);
        let b = r.register(MemHandle(2), 50, true);
        assert_ne!(a.key, b.key);
        // As if 2^32 registrations had come and gone since `a`.
        r.next_key = (1 << 32) | (a.key & 0xffff_ffff);
        let c = r.register(MemHandle(3), 10, true);
        assert_ne!(c.key, a.key);
        assert_ne!(c.key, b.key);
        assert_eq!(r.registrations(), 3);
        assert_eq!(r.registered_bytes(), 160);
        // The lower half 0 is never a key.
        r.next_key = 1 << 33;
        let d = r.register(MemHandle(4), 1, false);
        assert_ne!(d.key & 0xffff_ffff, 0);
        assert!(r.deregister(a.key) && r.deregister(b.key) && r.deregister(c.key));
        assert!(r.deregister(d.key));
        assert_eq!(r.registered_bytes(), 0);
    }

    quickcheck::quickcheck! {
        fn parse_arbitrary_never_panics(kind: u8, body: Vec<u8>) -> bool {
            if let Some(m) = RdmaMsg::parse(kind, &body) {
                let mut again = Vec::new();
                m.emit(&mut again);
                // Status codes above 3 collapse to NoMemory; everything else round-trips.
                RdmaMsg::parse(kind, &again) == Some(m)
            } else {
                true
            }
        }
    }
}
