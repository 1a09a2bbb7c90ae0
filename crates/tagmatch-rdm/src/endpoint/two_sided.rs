//! Two-sided operations and the sender side of every message subprotocol.

use super::*;

impl Endpoint {
    /// `peer` is in the address book (not removed).
    pub(super) fn check_peer(&self, peer: PeerId) -> Result<(), CallError> {
        match self.live_peer(peer) {
            Some(_) => Ok(()),
            None => Err(CallError::UnknownPeer),
        }
    }

    /// Tagged send (`fi_tsend`).
    pub fn tsend(
        &mut self,
        peer: PeerId,
        tag: u64,
        data: Vec<u8>,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.send_inner(peer, Some(tag), data, opts)
    }

    /// Untagged send (`fi_send`).
    pub fn send(&mut self, peer: PeerId, data: Vec<u8>, opts: SendOpts) -> Result<OpId, CallError> {
        self.send_inner(peer, None, data, opts)
    }

    /// Tagged send of `len` bytes at `offset` of the caller's region `mem` (from
    /// [`Endpoint::register_memory`]), without copying the bytes in and without a
    /// registration per send.
    ///
    /// Long-read and runting-read hand the receiver the region's existing key (offset by
    /// `offset`) to RDMA-read; eager, medium and long-CTS copy the range into packets. The
    /// region stays the caller's: it is neither freed nor deregistered when the send
    /// completes, so N sends from one region cost one registration. While the send is in
    /// flight the region cannot be released ([`Endpoint::try_release_memory`] refuses with
    /// [`CallError::MemInUse`]), and the caller should not change the range (the receiver
    /// may read it at any time until the send completes). If the region's registration is
    /// still pending the long-read waits for it; if it failed, the send falls back to
    /// long-CTS.
    pub fn tsend_from(
        &mut self,
        peer: PeerId,
        tag: u64,
        mem: MemHandle,
        offset: u64,
        len: u64,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.send_from_inner(peer, Some(tag), mem, offset, len, opts)
    }

    /// Untagged send from the caller's registered region; see [`Endpoint::tsend_from`].
    pub fn send_from(
        &mut self,
        peer: PeerId,
        mem: MemHandle,
        offset: u64,
        len: u64,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.send_from_inner(peer, None, mem, offset, len, opts)
    }

    fn send_from_inner(
        &mut self,
        peer: PeerId,
        tag: Option<u64>,
        mem: MemHandle,
        offset: u64,
        len: u64,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        let idx = self.region_range(mem, offset, len)?;
        let op = self.new_op();
        let t = TxOp {
            mem_off: offset,
            borrowed: true,
            tag: tag.unwrap_or(0),
            cq_data: opts.cq_data,
            dc: opts.delivery_complete,
            ..TxOp::new(
                op,
                TxKind::Send {
                    tagged: tag.is_some(),
                },
                peer,
                Protocol::Eager,
                idx,
                len,
            )
        };
        let Some(id) = self.tx.insert(t) else {
            return Err(CallError::TooManyOps);
        };
        self.mem[idx].users += 1;
        self.tx_begin(id);
        Ok(op)
    }

    /// Bytes `start..start + n` of TX op `id`'s message (copied out of its buffer).
    /// Bytes `start..start + n` of send `id`'s data, where they lie (empty if gone).
    pub(super) fn tx_slice(&self, id: u32, start: u64, n: u64) -> &[u8] {
        let Some(t) = self.tx.get(id) else {
            return &[];
        };
        let Some(r) = self.mem.get(t.mem) else {
            return &[];
        };
        let a = (t.mem_off + start) as usize;
        let b = (t.mem_off + start + n) as usize;
        r.bytes.get(a..b).unwrap_or_default()
    }

    pub(super) fn tx_bytes(&self, id: u32, start: u64, n: u64) -> Vec<u8> {
        let Some(t) = self.tx.get(id) else {
            return Vec::new();
        };
        let Some(r) = self.mem.get(t.mem) else {
            return Vec::new();
        };
        let a = (t.mem_off + start) as usize;
        let b = (t.mem_off + start + n) as usize;
        r.bytes.get(a..b).map(<[u8]>::to_vec).unwrap_or_default()
    }

    pub(super) fn send_inner(
        &mut self,
        peer: PeerId,
        tag: Option<u64>,
        data: Vec<u8>,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        let op = self.new_op();
        let len = data.len() as u64;
        let mem = self.new_region(data, Owner::App);
        let t = TxOp {
            tag: tag.unwrap_or(0),
            cq_data: opts.cq_data,
            dc: opts.delivery_complete,
            ..TxOp::new(
                op,
                TxKind::Send {
                    tagged: tag.is_some(),
                },
                peer,
                Protocol::Eager,
                mem,
                len,
            )
        };
        let Some(id) = self.tx.insert(t) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Tx(id);
        self.tx_begin(id);
        Ok(op)
    }

    /// Starts a TX op now, or after the peer's handshake when it needs the peer's features.
    #[inline(always)]
    pub(super) fn tx_begin(&mut self, id: u32) {
        let Some(t) = self.tx.get(id) else { return };
        let peer = t.peer;
        let p = &self.peers[peer.0 as usize];
        // Operations queued behind a handshake keep later ones behind them, so that
        // `msg_id`s follow the application's send order.
        let needs_handshake = t.kind != TxKind::ReadResponder
            && ((t.dc && p.handshake.is_none()) || !p.waiting.is_empty());
        if needs_handshake {
            // efa-rdm-protocol-v4 §2.1: the DC decision needs the peer's features, so wait
            // for its handshake (and provoke one).
            self.peers[peer.0 as usize].waiting.push(Waiting::Tx(id));
            self.trigger_handshake(peer);
            return;
        }
        self.tx_start(id);
    }

    pub(super) fn tx_start(&mut self, id: u32) {
        let Some(t) = self.tx.get(id) else { return };
        if t.started {
            return;
        }
        let peer = t.peer;
        if t.dc && !self.peers[peer.0 as usize].has(extra::FEATURE_DELIVERY_COMPLETE) {
            // efa-rdm-protocol-v4 §2.1 (b): "if application requires delivery complete, but
            // the peer does not support it … the requester need to return an error to the
            // application (section 4.2)".
            if let Some(t) = self.tx.get_mut(id) {
                t.started = true;
                t.error = Some(OpError::DeliveryCompleteUnsupported);
                t.all_queued = true;
            }
            self.tx_check(id);
            return;
        }
        match t.kind {
            TxKind::Send { .. } => self.start_msg(id),
            TxKind::Write => self.start_write(id),
            TxKind::AtomicWrite => self.start_atomic_write(id),
            TxKind::ReadResponder => {}
        }
    }

    pub(super) fn can_read(&self, peer: PeerId) -> bool {
        self.cfg.features.rdma_read && self.peers[peer.0 as usize].has(extra::FEATURE_RDMA_READ)
    }

    pub(super) fn start_msg(&mut self, id: u32) {
        let t = &self.tx[id];
        let (peer, len, dc, cq) = (t.peer, t.len, t.dc, t.cq_data.is_some());
        let (borrowed, src_mem) = (t.borrowed, t.mem);
        let tagged = matches!(t.kind, TxKind::Send { tagged: true });
        let eager_ty = pick(tagged, dc, EAGER);
        let eager_max = self
            .cfg
            .mtu
            .saturating_sub(self.req_hdr_len(peer, eager_ty, cq, 0)) as u64;
        let p = &mut self.peers[peer.0 as usize];
        let msg_id = p.next_msg_id;
        p.next_msg_id = p.next_msg_id.wrapping_add(1);
        // A local-only application region (Endpoint::register_memory_with) cannot be
        // read by the receiver: its large sends push their data (long-CTS).
        let local_src = borrowed && self.mem.get(src_mem).is_some_and(|r| !r.remote);
        let read_ok = self.can_read(peer) && len >= self.cfg.min_read_msg_size && !local_src;
        let proto = if len <= eager_max {
            Protocol::Eager
        } else if len <= self.cfg.max_medium_size {
            Protocol::Medium
        } else if read_ok
            && self.cfg.runt_size > 0
            && self.cfg.features.runt
            && self.peers[peer.0 as usize].has(extra::FEATURE_RUNT)
            && len > self.cfg.runt_size
        {
            Protocol::RuntRead
        } else if read_ok {
            Protocol::LongRead
        } else {
            Protocol::LongCts
        };
        let t = &mut self.tx[id];
        t.started = true;
        t.msg_id = msg_id;
        t.proto = proto;
        let op = t.op;
        self.note_protocol(op, proto);
        tracing::debug!(?op, ?proto, len, "send");
        match proto {
            Protocol::Eager => {
                // The payload is encoded from where it lies (no copy of it first).
                let h = RtmHeader {
                    msg_id,
                    ..self.rtm_hdr(id, eager_ty)
                };
                let buf = self.spare_buffer();
                if let Some(bytes) = Self::encode_rtm(buf, &h, self.tx_slice(id, 0, len)) {
                    self.emit_encoded(peer, eager_ty, bytes, PktOwner::Tx(id));
                }
                self.tx_queued_all(id);
            }
            Protocol::Medium => {
                // efa-rdm-protocol-v4 §3.2: "the sender split application data into multiple
                // MEDIUM_RTM … packets which the sender will attempt to send all at once";
                // wire-layouts §D.5: the field @8 is the total `msg_length`.
                let ty = pick(tagged, dc, MEDIUM);
                let per = self
                    .cfg
                    .mtu
                    .saturating_sub(self.req_hdr_len(peer, ty, cq, 0))
                    .max(1);
                let borrowed = self.tx[id].borrowed;
                let data = if borrowed {
                    self.tx_bytes(id, 0, len)
                } else {
                    std::mem::take(&mut self.mem[self.tx[id].mem].bytes)
                };
                let h = RtmHeader {
                    msg_id,
                    msg_length: len,
                    ..self.rtm_hdr(id, ty)
                };
                for (i, chunk) in data.chunks(per).enumerate() {
                    let h = RtmHeader {
                        seg_offset: (i * per) as u64,
                        ..h
                    };
                    let buf = self.spare_buffer();
                    if let Some(bytes) = Self::encode_rtm(buf, &h, chunk) {
                        self.emit_encoded(peer, ty, bytes, PktOwner::Tx(id));
                    }
                }
                if !borrowed {
                    let m = self.tx[id].mem;
                    self.mem[m].bytes = data;
                }
                self.tx_queued_all(id);
            }
            Protocol::LongCts => self.send_longcts_rtm(id, false),
            Protocol::LongRead | Protocol::RuntRead => {
                let m = self.tx[id].mem;
                if self.tx[id].borrowed {
                    // The caller's region: use its registration, never register again.
                    match self.mem.get(m).map(|r| r.reg) {
                        Some(RegState::Ok(k)) => self.tx_registered(id, Ok(k)),
                        Some(RegState::Pending) => self.mem[m].reg_waiters.push(id),
                        _ => self.tx_registered(id, Err(())),
                    }
                } else {
                    // The receiver reads it.
                    self.register_region(m, true);
                }
            }
            _ => {}
        }
    }

    /// The eager or medium RTM header of `ty` for TX op `id`, with the fields and optional
    /// headers every RTM of that op carries (those of [`Endpoint::msg_req`]).
    pub(super) fn rtm_hdr(&self, id: u32, ty: PacketType) -> RtmHeader {
        let t = &self.tx[id];
        let (raw_addr, connid) = self.req_opts(t.peer);
        RtmHeader {
            tag: t.tag,
            send_id: id,
            raw_addr,
            cq_data: t.cq_data,
            connid,
            ..RtmHeader::new(ty)
        }
    }

    /// A REQ of `ty` for TX op `id` with the fields every RTM of that op carries.
    pub(super) fn msg_req(&self, id: u32, ty: PacketType) -> Repr<'static> {
        let t = &self.tx[id];
        let mut r = self.req(t.peer, ty);
        r.cq_data = t.cq_data;
        if ty.layout().has(Field::Tag) {
            r = r.with(Field::Tag, t.tag);
        }
        if ty.layout().has(Field::SendId) {
            r = r.with(Field::SendId, id as u64);
        }
        r
    }

    pub(super) fn tx_queued_all(&mut self, id: u32) {
        if let Some(t) = self.tx.get_mut(id) {
            t.all_queued = true;
            t.await_receipt = t.dc;
        }
    }

    /// LONGCTS_RTM (or, after a READ_NACK, the header-only fallback REQ).
    pub(super) fn send_longcts_rtm(&mut self, id: u32, nack: bool) {
        let t = &self.tx[id];
        let (peer, len, dc, cq) = (t.peer, t.len, t.dc, t.cq_data.is_some());
        let tagged = matches!(t.kind, TxKind::Send { tagged: true });
        let ty = match t.kind {
            TxKind::Write => {
                if dc {
                    PacketType::DcLongctsRtw
                } else {
                    PacketType::LongctsRtw
                }
            }
            _ => pick(tagged, dc, LONGCTS),
        };
        let n_iov = t.remote.len();
        let hdr = self.req_hdr_len(peer, ty, cq, n_iov);
        let room = self.cfg.mtu.saturating_sub(hdr) as u64;
        let mut r = self
            .msg_req(id, ty)
            .with(Field::MsgLength, len)
            .with(Field::CreditRequest, self.cfg.tx_min_credits as u64);
        if ty.layout().has(Field::MsgId) {
            r = r.with(Field::MsgId, t.msg_id as u64);
        }
        let remote = t.remote.clone();
        r.rma_iov = &remote;
        // efa-rdm-protocol-v4 §4.7: "The LONGCTS_RTM packet sent in the nack protocol does
        // not contain any application data"; wire-layouts §A.3 REQ_READ_NACK.
        let (start, n) = if nack {
            r.flags |= flags::REQ_READ_NACK;
            (t.next_offset, 0)
        } else {
            (0, room.min(len))
        };
        let data = self.tx_bytes(id, start, n);
        let r = Repr {
            payload: &data,
            ..r
        };
        self.emit(peer, &r, PktOwner::Tx(id));
        if let Some(t) = self.tx.get_mut(id) {
            t.next_offset = start + n;
            t.window_end = t.next_offset;
            let proto = match t.kind {
                TxKind::Write => Protocol::LongCtsWrite,
                _ => Protocol::LongCts,
            };
            t.proto = proto;
            // After a READ_NACK or a failed registration of the send buffer this replaces
            // the long-read the operation chose: its completion reports the fallback, as
            // the emulated read and write fallbacks do.
            let op = t.op;
            self.note_protocol(op, proto);
        }
        self.tx_check(id);
    }

    pub(super) fn tx_registered(&mut self, id: u32, result: Result<MrKey, ()>) {
        let Some(t) = self.tx.get(id) else { return };
        let (peer, proto) = (t.peer, t.proto);
        let key = match result {
            Ok(k) => k,
            Err(()) => {
                // The send buffer could not be registered: libfabric falls back to long-CTS
                // (and to emulated protocols for direct RMA).
                match proto {
                    Protocol::DirectWrite => {
                        self.tx[id].started = false;
                        self.start_write_emulated(id);
                    }
                    _ => self.send_longcts_rtm(id, false),
                }
                return;
            }
        };
        match proto {
            Protocol::LongRead | Protocol::RuntRead => {
                let t = &self.tx[id];
                let (len, cq) = (t.len, t.cq_data.is_some());
                let tagged = matches!(t.kind, TxKind::Send { tagged: true });
                // efa-rdm-protocol-v4 §4.1: "the sender needs to make sure that the send
                // buffer is registered with the EFA device and fills in the registration key
                // in `read_iov`". Long-read is inherently delivery complete: the sender
                // completes on EOR, after the receiver's reads.
                let read_iov = [RmaIov::new(key.addr.wrapping_add(t.mem_off), len, key.key)];
                let iov_bytes = RmaIov::slice_as_bytes(&read_iov).to_vec();
                if proto == Protocol::LongRead {
                    // efa-rdm-protocol-v4 §4.1: "The `read_iov` is used as the application
                    // data in the LONGREAD_RTM packet."
                    let ty = if tagged {
                        PacketType::LongreadTagRtm
                    } else {
                        PacketType::LongreadMsgRtm
                    };
                    let r = self
                        .msg_req(id, ty)
                        .with(Field::MsgId, t.msg_id as u64)
                        .with(Field::MsgLength, len)
                        .with(Field::ReadIovCount, 1);
                    let r = Repr {
                        payload: &iov_bytes,
                        ..r
                    };
                    self.emit(peer, &r, PktOwner::Tx(id));
                } else {
                    // efa-rdm-protocol-v4 §4.5: "the LONGREAD_RTM packet was replaced by
                    // multiple RUNTREAD_RTM packets, with each RUNTREAD_RTM carry some
                    // application data"; the payload is read_iov[] then the runt data.
                    let ty = if tagged {
                        PacketType::RuntreadTagRtm
                    } else {
                        PacketType::RuntreadMsgRtm
                    };
                    let runt = self.cfg.runt_size.min(len);
                    let per = self
                        .cfg
                        .mtu
                        .saturating_sub(self.req_hdr_len(peer, ty, cq, 0) + RMA_IOV_LEN)
                        .max(1) as u64;
                    let msg_id = t.msg_id;
                    let mut off = 0u64;
                    while off < runt {
                        let n = per.min(runt - off);
                        let mut payload = iov_bytes.clone();
                        payload.extend_from_slice(&self.tx_bytes(id, off, n));
                        let r = self
                            .msg_req(id, ty)
                            .with(Field::MsgId, msg_id as u64)
                            .with(Field::MsgLength, len)
                            .with(Field::ReadIovCount, 1)
                            .with(Field::SegOffset, off)
                            .with(Field::RuntLength, runt);
                        let r = Repr {
                            payload: &payload,
                            ..r
                        };
                        self.emit(peer, &r, PktOwner::Tx(id));
                        off += n;
                    }
                    self.tx[id].runt_len = runt;
                    self.tx[id].next_offset = runt;
                }
                let t = &mut self.tx[id];
                t.await_eor = true;
                t.all_queued = true;
            }
            Protocol::LongReadWrite => {
                let t = &self.tx[id];
                let read_iov = [RmaIov::new(key.addr, t.len, key.key)];
                let iov_bytes = RmaIov::slice_as_bytes(&read_iov).to_vec();
                let remote = t.remote.clone();
                let mut r = self
                    .msg_req(id, PacketType::LongreadRtw)
                    .with(Field::MsgLength, t.len)
                    .with(Field::ReadIovCount, 1);
                r.rma_iov = &remote;
                let r = Repr {
                    payload: &iov_bytes,
                    ..r
                };
                self.emit(peer, &r, PktOwner::Tx(id));
                let t = &mut self.tx[id];
                t.await_eor = true;
                t.all_queued = true;
            }
            Protocol::DirectWrite => {
                let t = &self.tx[id];
                let dest = self.peers[peer.0 as usize].addr;
                let (mem, len) = (t.mem, t.len);
                let remote = t.remote.first().copied().unwrap_or_default();
                let token = self.token();
                self.rdmas.insert(token, RdmaOwner::Tx(id));
                // efa-rdm-protocol-v4 §4.6: "The workflow is just for the writer to keep
                // using RDMA write on the responder."
                self.out.push_back(Transmit::RdmaWrite {
                    token: RdmaToken(token),
                    peer,
                    dest,
                    local: MemHandle(mem as u32),
                    offset: 0,
                    remote: RemoteAddr {
                        addr: remote.addr(),
                        key: remote.key(),
                    },
                    len,
                });
                let t = &mut self.tx[id];
                t.rdma_left = 1;
                t.all_queued = true;
            }
            _ => {}
        }
        self.tx_check(id);
    }

    /// Queues CTSDATA packets up to the window the receiver granted.
    ///
    /// efa-rdm-protocol-v4 §3.2: "Upon receiving the CTS packet, the sender will send
    /// multiple CTSDATA packets according to the information in the CTS packet";
    /// wire-layouts §D.13: `seg_offset` is the offset in the message.
    pub(super) fn tx_pump(&mut self, id: u32) {
        let Some(t) = self.tx.get(id) else { return };
        let peer = t.peer;
        let per = self.ctsdata_payload(peer) as u64;
        loop {
            let t = &self.tx[id];
            let end = t.window_end.min(t.len);
            if t.next_offset >= end {
                break;
            }
            let off = t.next_offset;
            let n = per.min(end - off);
            let data = self.tx_bytes(id, off, n);
            let r = self
                .ctrl(peer, PacketType::CtsData)
                .with(Field::RecvId, t.peer_recv_id as u64)
                .with(Field::SegLength, n)
                .with(Field::SegOffset, off);
            let r = Repr {
                payload: &data,
                ..r
            };
            self.emit(peer, &r, PktOwner::Tx(id));
            self.tx[id].next_offset = off + n;
        }
        let t = &mut self.tx[id];
        if t.next_offset >= t.len {
            t.all_queued = true;
            t.await_receipt = t.dc;
        }
        self.tx_check(id);
    }

    /// Completes a TX op when nothing is outstanding.
    /// (Always inlined: called on every send completion, and its record is then
    /// dropped in its slot with only the fields the completion needs read, see
    /// `GenSlab::discard`.)
    #[inline(always)]
    pub(super) fn tx_check(&mut self, id: u32) {
        let Some(t) = self.tx.get(id) else { return };
        if !t.all_queued || t.inflight > 0 || t.await_receipt || t.await_eor || t.rdma_left > 0 {
            return;
        }
        // What the completion needs, read in place: the record itself is dropped where
        // it lies (not moved out whole).
        let (op, tx_kind, error, len, tag, borrowed, mem) =
            (t.op, t.kind, t.error, t.len, t.tag, t.borrowed, t.mem);
        if !self.tx.discard(id) {
            return;
        }
        if borrowed {
            // The caller's region stays registered and theirs.
            if let Some(r) = self.mem.get_mut(mem) {
                r.users = r.users.saturating_sub(1);
            }
        } else {
            self.free_region(mem);
        }
        let kind = match tx_kind {
            TxKind::Send { .. } => OpKind::Send,
            TxKind::Write => OpKind::Write,
            TxKind::AtomicWrite => OpKind::AtomicWrite,
            TxKind::ReadResponder => return,
        };
        self.completions.push_back(Completion {
            op,
            kind,
            result: error.map_or(Ok(()), Err),
            data: Vec::new(),
            len,
            tag,
            src: None,
            cq_data: None,
        });
    }

    /// Tagged receive (`fi_trecv`): matches tags `t` with `t & !ignore == tag & !ignore`,
    /// from `src` or any peer, into a buffer of `len` bytes.
    pub fn trecv(
        &mut self,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        len: usize,
    ) -> Result<OpId, CallError> {
        self.recv_inner(COMM_TAG, src, Self::tag_sel(tag, ignore), vec![0; len])
    }

    /// [`Endpoint::trecv`] into the caller's buffer `buf` (its length is the buffer's):
    /// the message lands in it (a large one straight from the RDMA read or write), and it
    /// comes back as the completion's `data` — no allocation, zeroing or copy per receive.
    /// Bytes beyond the message keep what `buf` held.
    pub fn trecv_into(
        &mut self,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        buf: Vec<u8>,
    ) -> Result<OpId, CallError> {
        self.recv_inner(COMM_TAG, src, Self::tag_sel(tag, ignore), buf)
    }

    /// [`Endpoint::trecv`] into bytes `offset..offset + len` of the caller's registered
    /// region `mem` (`fi_trecv` with a memory descriptor, `ucp_tag_recv_nbx` with a
    /// `memh`): the message lands there (a large one straight from the RDMA read), the
    /// region stays registered and the caller's, and the completion's `data` is empty
    /// (its `len` is the message's). Several receives may name the same bytes, as
    /// `ucx_perftest` and the fabtests receive every message of a window into one
    /// buffer; what such bytes hold then is whichever message wrote them last. The
    /// region cannot be released while the receive is pending
    /// ([`Endpoint::try_release_memory`] refuses with [`CallError::MemInUse`]).
    ///
    /// Errors: [`CallError::UnknownMem`] (no such application region),
    /// [`CallError::MemRange`] (the range is not inside it), and those of
    /// [`Endpoint::trecv`].
    pub fn trecv_region(
        &mut self,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        mem: MemHandle,
        offset: u64,
        len: u64,
    ) -> Result<OpId, CallError> {
        let tag = Self::tag_sel(tag, ignore);
        self.recv_region_inner(COMM_TAG, src, tag, mem, offset, len)
    }

    /// Untagged [`Endpoint::trecv_region`].
    pub fn recv_region(
        &mut self,
        src: Option<PeerId>,
        mem: MemHandle,
        offset: u64,
        len: u64,
    ) -> Result<OpId, CallError> {
        self.recv_region_inner(COMM_MSG, src, TagSel::Any, mem, offset, len)
    }

    /// The region index of `mem` if it is an application region holding
    /// `offset..offset + len`.
    fn region_range(&self, mem: MemHandle, offset: u64, len: u64) -> Result<usize, CallError> {
        let idx = mem.0 as usize;
        let region_len = match self.mem.get(idx) {
            Some(r) if r.owner == Owner::App => r.bytes.len() as u64,
            _ => return Err(CallError::UnknownMem),
        };
        match offset.checked_add(len) {
            Some(end) if end <= region_len => Ok(idx),
            _ => Err(CallError::MemRange),
        }
    }

    /// A receive op into `len` bytes at `offset` of application region `idx`.
    fn region_rx(&mut self, idx: usize, offset: u64, len: u64) -> RxOp {
        let mut r = RxOp::new(self.new_op(), RxKind::Recv);
        r.mem = Some(idx);
        r.buf_len = len;
        r.borrowed = true;
        r.base = offset;
        r
    }

    fn recv_region_inner(
        &mut self,
        comm: u32,
        src: Option<PeerId>,
        tag: TagSel,
        mem: MemHandle,
        offset: u64,
        len: u64,
    ) -> Result<OpId, CallError> {
        if let Some(p) = src {
            self.check_peer(p)?;
        }
        let idx = self.region_range(mem, offset, len)?;
        let r = self.region_rx(idx, offset, len);
        let op = r.op;
        let Some(id) = self.rx.insert(r) else {
            return Err(CallError::TooManyOps);
        };
        self.mem[idx].users += 1;
        if self.post_rx(comm, src, tag, id).is_err() {
            self.rx.remove(id);
            self.mem[idx].users -= 1;
            return Err(CallError::TooManyReceives);
        }
        Ok(op)
    }

    /// [`Endpoint::mrecv`] into bytes `offset..offset + len` of the caller's registered
    /// region `mem` (see [`Endpoint::trecv_region`]). The range is checked before the
    /// claim is taken: on an error the claim stays valid.
    pub fn mrecv_region(
        &mut self,
        claim: Claim,
        mem: MemHandle,
        offset: u64,
        len: u64,
    ) -> Result<OpId, CallError> {
        let idx = self.region_range(mem, offset, len)?;
        let m = self
            .engine
            .mrecv(claim.0)
            .map_err(|_| CallError::UnknownOp)?;
        self.admission += 1;
        let r = self.region_rx(idx, offset, len);
        let op = r.op;
        let Some(id) = self.rx.insert(r) else {
            // The claimed message can go nowhere else: drop it with its data, as
            // `mrecv_into` does.
            self.inbound.try_remove(m.msg as usize);
            return Err(CallError::TooManyOps);
        };
        self.mem[idx].users += 1;
        self.on_match(id, m.msg as usize);
        Ok(op)
    }

    /// Untagged receive (`fi_recv`) into a buffer of `len` bytes.
    pub fn recv(&mut self, src: Option<PeerId>, len: usize) -> Result<OpId, CallError> {
        self.recv_inner(COMM_MSG, src, TagSel::Any, vec![0; len])
    }

    /// Untagged [`Endpoint::trecv_into`].
    pub fn recv_into(&mut self, src: Option<PeerId>, buf: Vec<u8>) -> Result<OpId, CallError> {
        self.recv_inner(COMM_MSG, src, TagSel::Any, buf)
    }

    pub(super) fn recv_inner(
        &mut self,
        comm: u32,
        src: Option<PeerId>,
        tag: TagSel,
        buf: Vec<u8>,
    ) -> Result<OpId, CallError> {
        if let Some(p) = src {
            self.check_peer(p)?;
        }
        let op = self.new_op();
        let len = buf.len();
        let mem = self.new_region(buf, Owner::App);
        let mut r = RxOp::new(op, RxKind::Recv);
        r.mem = Some(mem);
        r.buf_len = len as u64;
        let Some(id) = self.rx.insert(r) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Rx(id);
        if self.post_rx(comm, src, tag, id).is_err() {
            self.rx.remove(id);
            self.free_region(mem);
            return Err(CallError::TooManyReceives);
        }
        Ok(op)
    }

    /// Posts receive op `id` to the matching engine: it matches an unexpected message now
    /// or waits. `Err`: the engine's receive limit refused it (the caller undoes the op).
    #[inline(always)]
    fn post_rx(&mut self, comm: u32, src: Option<PeerId>, tag: TagSel, id: u32) -> Result<(), ()> {
        // A refused message may match this receive, or the unexpected message it takes
        // frees budget.
        self.admission += 1;
        match self.engine.post(Self::spec(comm, src, tag), id) {
            Ok(Posted::Matched(m)) => self.on_match(id, m.msg as usize),
            Ok(Posted::Pending(h)) => self.rx[id].posted = Some(h),
            Err(_) => return Err(()),
        }
        Ok(())
    }

    pub(super) fn spec(comm: u32, src: Option<PeerId>, tag: TagSel) -> RecvSpec {
        RecvSpec {
            comm,
            src: src.map_or(Source::Any, |p| Source::Rank(p.0)),
            tag,
        }
    }

    pub(super) fn tag_sel(tag: u64, ignore: u64) -> TagSel {
        match !ignore {
            u64::MAX => TagSel::Exact(tag),
            0 => TagSel::Any,
            mask => TagSel::Masked { want: tag, mask },
        }
    }

    pub(super) fn probe_info(&self, env: &Envelope, ib: u32) -> Option<ProbeInfo> {
        let ib = self.inbound.get(ib as usize)?;
        Some(ProbeInfo {
            src: PeerId(env.src),
            tag: ib.tag,
            len: ib.msg_len,
            cq_data: ib.cq_data,
            buffered: ib.data.len() as u64,
        })
    }

    /// Peeks at the earliest unexpected tagged message matching (`fi_trecv` with
    /// `FI_PEEK`); it stays queued.
    pub fn tprobe(&mut self, src: Option<PeerId>, tag: u64, ignore: u64) -> Option<ProbeInfo> {
        let spec = Self::spec(COMM_TAG, src, Self::tag_sel(tag, ignore));
        let (env, ib) = self.engine.probe(&spec).map(|p| (p.env, *p.msg))?;
        self.probe_info(&env, ib)
    }

    /// Peeks at the earliest unexpected untagged message (`fi_recv` with `FI_PEEK`).
    pub fn probe(&mut self, src: Option<PeerId>) -> Option<ProbeInfo> {
        let spec = Self::spec(COMM_MSG, src, TagSel::Any);
        let (env, ib) = self.engine.probe(&spec).map(|p| (p.env, *p.msg))?;
        self.probe_info(&env, ib)
    }

    /// Claims the earliest unexpected tagged message matching (`FI_PEEK | FI_CLAIM`): no
    /// receive can take it any more; [`Endpoint::mrecv`] receives it.
    pub fn tmprobe(
        &mut self,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
    ) -> Option<(Claim, ProbeInfo)> {
        let spec = Self::spec(COMM_TAG, src, Self::tag_sel(tag, ignore));
        self.claim(&spec)
    }

    /// Claims the earliest unexpected untagged message.
    pub fn mprobe(&mut self, src: Option<PeerId>) -> Option<(Claim, ProbeInfo)> {
        let spec = Self::spec(COMM_MSG, src, TagSel::Any);
        self.claim(&spec)
    }

    pub(super) fn claim(&mut self, spec: &RecvSpec) -> Option<(Claim, ProbeInfo)> {
        let c = self.engine.mprobe(spec)?;
        if !self.cfg.claims_count {
            // Config::claims_count: the claim left the budget.
            self.admission += 1;
        }
        let ib = *self.engine.claimed(c.handle).ok()?;
        let info = self.probe_info(&c.env, ib)?;
        Some((Claim(c.handle), info))
    }

    /// Receives a claimed message into a buffer of `len` bytes (`FI_CLAIM`).
    pub fn mrecv(&mut self, claim: Claim, len: usize) -> Result<OpId, CallError> {
        self.mrecv_into(claim, vec![0; len])
    }

    /// [`Endpoint::mrecv`] into the caller's buffer (see [`Endpoint::trecv_into`]).
    pub fn mrecv_into(&mut self, claim: Claim, buf: Vec<u8>) -> Result<OpId, CallError> {
        let m = self
            .engine
            .mrecv(claim.0)
            .map_err(|_| CallError::UnknownOp)?;
        // Its budget is freed.
        self.admission += 1;
        let op = self.new_op();
        let len = buf.len();
        let mem = self.new_region(buf, Owner::App);
        let mut r = RxOp::new(op, RxKind::Recv);
        r.mem = Some(mem);
        r.buf_len = len as u64;
        let Some(id) = self.rx.insert(r) else {
            // The claimed message can go nowhere else: drop it with its data.
            self.free_region(mem);
            self.inbound.try_remove(m.msg as usize);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Rx(id);
        self.on_match(id, m.msg as usize);
        Ok(op)
    }

    /// Cancels a posted receive that has not matched yet; it completes with
    /// [`OpError::Canceled`].
    pub fn cancel(&mut self, op: OpId) -> Result<(), CallError> {
        // A walk over the receive ops (cancel is rare): no op-to-id map kept up to date
        // on every receive.
        let (id, h) = self
            .rx
            .iter()
            .find_map(|(id, r)| Some((id, r.posted.filter(|_| r.op == op)?)))
            .ok_or(CallError::UnknownOp)?;
        self.engine.cancel(h).map_err(|_| CallError::UnknownOp)?;
        if let Some(r) = self.rx.get_mut(id) {
            r.error = Some(OpError::Canceled);
        }
        self.rx_finish(id);
        Ok(())
    }
}
