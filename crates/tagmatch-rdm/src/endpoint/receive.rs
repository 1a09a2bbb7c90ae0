//! The receive path: dispatch, reordering, matching, CTS flow control, RDMA reads.

use super::*;

impl Endpoint {
    /// Processes one received packet. `src` is the peer the device reported (its address
    /// handle), `None` when the sender is not in the device's address book; then only a
    /// REQ carrying the raw-address header can be processed. Every malformed or
    /// unexpected packet is dropped and counted in [`Stats`]; nothing here panics.
    ///
    /// Returns [`Rx::Refused`] when a new message does not fit the unexpected-message budget
    /// or lies beyond the reorder window: the endpoint kept nothing of it, and the owner
    /// should hand the same bytes in again later ("receiver not ready", as an EFA device
    /// retries a send that met RNR) — [`crate::Endpoint`] never drops such a message
    /// itself. Everything else is [`Rx::Consumed`].
    pub fn handle_packet(&mut self, src: Option<PeerId>, bytes: &[u8]) -> Rx {
        self.stats.rx_packets += 1;
        let pkt = match Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(%e, "dropping unparsable packet");
                self.stats.rx_parse_errors += 1;
                return Rx::Consumed;
            }
        };
        let mut peer = match src.filter(|&p| self.live_peer(p).is_some()) {
            Some(p) => p,
            None => {
                // A removed peer's id (the owner looked the address handle up before the
                // removal): looked up again by its address, as the device would now —
                // nothing (an unknown address), or another live peer on the same GID and
                // QPN (the connid check below then applies).
                let again = src
                    .and_then(|p| self.peers.get(p.0 as usize))
                    .and_then(|p| self.lookup_peer(&p.addr.gid, p.addr.qpn));
                match again {
                    Some(p) => p,
                    None => match pkt.raw_addr() {
                        // efa-rdm-protocol-v4 §2.2: "the peer can get the endpoint's raw
                        // address from REQ packet header, then insert the raw address to
                        // its address book." (Within `Config::max_peers`.)
                        Some(r) => match self.admit_peer(r.addr) {
                            Some(p) => p,
                            None => return Rx::Consumed,
                        },
                        None => {
                            self.stats.rx_unknown_sender += 1;
                            return Rx::Consumed;
                        }
                    },
                }
            }
        };
        // efa-rdm-protocol-v4 §4.4: "it is possible for an endpoint to receive packets from a
        // destroyed QP, which was used by a previous process that used the same QPN" — a
        // connid that is not the peer's means another endpoint on the same (GID, QPN): the
        // one added with that connid ("the receiver needs to know the full address of the
        // sender … the only unknown part is CONNID"), or, for a REQ with a raw address, a new
        // one to insert (§2.2). Otherwise drop it.
        if let Some(c) = pkt.sender_connid() {
            let a = self.peers[peer.0 as usize].addr;
            if c != a.qkey {
                match self.lookup_peer_exact(&a.gid, a.qpn, c) {
                    Some(p) => peer = p,
                    None => match pkt.raw_addr() {
                        // efa-rdm-protocol-v4 §4.4: "the EFA device will report the … AHN
                        // and QPN of a received packet … the only unknown part is CONNID":
                        // a raw address naming another GID or QPN than the device reported
                        // is not the sender's, and is not inserted.
                        Some(r) if (r.addr.gid, r.addr.qpn) == (a.gid, a.qpn) => {
                            match self.admit_peer(r.addr) {
                                Some(p) => peer = p,
                                None => return Rx::Consumed,
                            }
                        }
                        _ => {
                            tracing::debug!(peer = peer.0, connid = c, "connid mismatch, dropping");
                            self.stats.rx_connid_mismatch += 1;
                            return Rx::Consumed;
                        }
                    },
                }
            }
        }
        // efa-rdm-protocol-v4 §2.1: "Upon receiving the 1st packet from a peer, an endpoint
        // must send back a handshake packet". libfabric does this for any packet type
        // (`efa_rdm_ep_post_handshake_or_queue` on every receive), so a HANDSHAKE is answered
        // by one too and both sides learn each other's features after one exchange.
        if !self.peers[peer.0 as usize].handshake_sent {
            self.send_handshake(peer);
        }
        use PacketType as T;
        match pkt.pkt_type() {
            T::Handshake => self.on_handshake(peer, &pkt),
            T::Cts => self.on_cts(peer, &pkt),
            T::CtsData => self.on_ctsdata(peer, &pkt),
            T::ReadRsp => self.on_readrsp(peer, &pkt),
            T::Eor => self.on_eor(peer, &pkt),
            T::AtomRsp => self.on_atomrsp(peer, &pkt),
            T::Receipt => self.on_receipt(peer, &pkt),
            T::ReadNack => self.on_read_nack(peer, &pkt),
            T::PeerError => self.stats.rx_invalid += 1,
            T::EagerRtw | T::DcEagerRtw => self.on_eager_rtw(peer, &pkt),
            T::LongctsRtw | T::DcLongctsRtw | T::LongreadRtw => self.on_long_rtw(peer, &pkt),
            T::ShortRtr | T::LongctsRtr => self.on_rtr(peer, &pkt),
            _ => return self.on_sequenced(peer, &pkt),
        }
        Rx::Consumed
    }

    pub(super) fn on_handshake(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let hs = PeerHandshake {
            extra_info: pkt.extra_info().unwrap_or_default(),
            host_id: pkt.host_id(),
            device_version: pkt.device_version(),
        };
        let p = &mut self.peers[peer.0 as usize];
        p.handshake = Some(hs);
        let waiting = std::mem::take(&mut p.waiting);
        for w in waiting {
            match w {
                Waiting::Tx(id) => self.tx_start(id),
                Waiting::Rta(id, req) => self.send_rta(id, req),
            }
        }
    }

    pub(super) fn find_tx(&mut self, peer: PeerId, send_id: Option<u32>) -> Option<u32> {
        let id = send_id?;
        match self.tx.get(id) {
            Some(t) if t.peer == peer => Some(id),
            _ => {
                self.stats.rx_unknown_op += 1;
                None
            }
        }
    }

    pub(super) fn find_rx(&mut self, peer: PeerId, recv_id: Option<u32>) -> Option<u32> {
        let id = recv_id?;
        match self.rx.get(id) {
            Some(r) if r.peer == Some(peer) && r.matched => Some(id),
            _ => {
                self.stats.rx_unknown_op += 1;
                None
            }
        }
    }

    pub(super) fn on_cts(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_tx(peer, pkt.send_id()) else {
            return;
        };
        let len = pkt.get(Field::RecvLength).unwrap_or(0);
        // efa-rdm-protocol-v4 §3.2: "the receiver must allow the sender to send at least 1
        // CTSDATA packet" — a zero window would loop forever.
        if len == 0 {
            self.stats.rx_invalid += 1;
            return;
        }
        let t = &mut self.tx[id];
        if !matches!(
            t.proto,
            Protocol::LongCts | Protocol::LongCtsWrite | Protocol::LongCtsRead
        ) {
            self.stats.rx_invalid += 1;
            return;
        }
        t.peer_recv_id = pkt.recv_id().unwrap_or(0);
        t.window_end = t.next_offset.saturating_add(len);
        self.tx_pump(id);
    }

    /// efa-rdm-protocol-v4 §3.2: "The sender should include `recv_id` in the CTSDATA
    /// packet."
    pub(super) fn on_ctsdata(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_rx(peer, pkt.recv_id()) else {
            return;
        };
        let off = pkt.get(Field::SegOffset).unwrap_or(0);
        let seg = pkt.get(Field::SegLength).unwrap_or(0);
        let data = pkt.payload();
        if seg != data.len() as u64 {
            self.stats.rx_invalid += 1;
            return;
        }
        if !self.rx_place(id, off, data) {
            return;
        }
        let r = &mut self.rx[id];
        r.window_left = r.window_left.saturating_sub(seg);
        self.rx_progress(id);
    }

    pub(super) fn on_readrsp(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_rx(peer, pkt.recv_id()) else {
            return;
        };
        if self.rx[id].kind != RxKind::ReadReq {
            self.stats.rx_invalid += 1;
            return;
        }
        let seg = pkt.get(Field::SegLength).unwrap_or(0);
        let data = pkt.payload();
        if seg != data.len() as u64 {
            self.stats.rx_invalid += 1;
            return;
        }
        if !self.rx_place(id, 0, data) {
            return;
        }
        let r = &mut self.rx[id];
        r.send_id = pkt.send_id().unwrap_or(0);
        r.window_left = r.window_left.saturating_sub(seg);
        self.rx_progress(id);
    }

    pub(super) fn on_atomrsp(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_rx(peer, pkt.recv_id()) else {
            return;
        };
        if !matches!(self.rx[id].kind, RxKind::AtomicResp(_)) {
            self.stats.rx_invalid += 1;
            return;
        }
        let data = pkt.payload();
        if pkt.get(Field::SegLength) != Some(data.len() as u64) {
            self.stats.rx_invalid += 1;
            return;
        }
        if !self.rx_place(id, 0, data) {
            return;
        }
        self.rx_progress(id);
    }

    /// efa-rdm-protocol-v4 §4.1: "After all reads are finished, the receiver will send an
    /// EOR packet to the requester to notify it that the work has completed."
    pub(super) fn on_eor(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_tx(peer, pkt.send_id()) else {
            return;
        };
        let t = &mut self.tx[id];
        if !t.await_eor {
            self.stats.rx_invalid += 1;
            return;
        }
        t.await_eor = false;
        self.tx_check(id);
    }

    pub(super) fn on_receipt(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_tx(peer, pkt.get(Field::TxId).map(|v| v as u32)) else {
            return;
        };
        let t = &mut self.tx[id];
        if !t.dc {
            self.stats.rx_invalid += 1;
            return;
        }
        // efa-rdm-protocol-v4 §4.2: "the sender/responder will not write a completion until
        // it receives the RECEIPT packet."
        t.await_receipt = false;
        self.tx_check(id);
    }

    pub(super) fn on_read_nack(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_tx(peer, pkt.send_id()) else {
            return;
        };
        let t = &mut self.tx[id];
        if !t.await_eor {
            self.stats.rx_invalid += 1;
            return;
        }
        // efa-rdm-protocol-v4 §4.7: "The sender then switches to the long CTS protocol and
        // sends a LONGCTS_RTM packet".
        self.stats.read_nacks += 1;
        t.await_eor = false;
        t.all_queued = false;
        t.peer_recv_id = pkt.recv_id().unwrap_or(0);
        t.next_offset = t.runt_len;
        self.send_longcts_rtm(id, true);
    }

    /// RTM and RTA packets: in `msg_id` order through the engine's reorder buffer.
    pub(super) fn on_sequenced(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) -> Rx {
        use PacketType as T;
        let ty = pkt.pkt_type();
        let Some(msg_id) = pkt.msg_id() else {
            self.stats.rx_invalid += 1;
            return Rx::Consumed;
        };
        let proto = match ty {
            T::EagerMsgRtm | T::EagerTagRtm | T::DcEagerMsgRtm | T::DcEagerTagRtm => RxProto::Eager,
            T::MediumMsgRtm | T::MediumTagRtm | T::DcMediumMsgRtm | T::DcMediumTagRtm => {
                RxProto::Medium
            }
            T::LongctsMsgRtm | T::LongctsTagRtm | T::DcLongctsMsgRtm | T::DcLongctsTagRtm => {
                RxProto::LongCts
            }
            T::LongreadMsgRtm | T::LongreadTagRtm => RxProto::LongRead,
            T::RuntreadMsgRtm | T::RuntreadTagRtm => RxProto::RuntRead,
            T::WriteRta | T::FetchRta | T::CompareRta | T::DcWriteRta => RxProto::Eager,
            _ => {
                self.stats.rx_invalid += 1;
                return Rx::Consumed;
            }
        };
        let is_rta = matches!(
            ty,
            T::WriteRta | T::FetchRta | T::CompareRta | T::DcWriteRta
        );
        let nack = pkt.flags() & flags::REQ_READ_NACK != 0 && proto == RxProto::LongCts;
        let slot = self.peers[peer.0 as usize].msgs.get(&msg_id).copied();
        if nack {
            // wire-layouts §A.3: for the READ_NACK resend "the receiver skips reorder".
            match slot {
                Some(Slot::Matched(id)) if self.rx.get(id).is_some_and(|r| r.rdma_failed) => {
                    let r = &mut self.rx[id];
                    r.dc = matches!(ty, T::DcLongctsMsgRtm | T::DcLongctsTagRtm);
                    r.credits = pkt.get(Field::CreditRequest).unwrap_or(0) as u32;
                    r.proto = RxProto::LongCts;
                    r.requested = r.got.total();
                    r.window_left = 0;
                    self.rx_progress(id);
                }
                _ => self.stats.rx_unknown_op += 1,
            }
            return Rx::Consumed;
        }
        match slot {
            Some(Slot::Pending(ib)) => {
                self.inbound_segment(ib, proto, pkt);
                return Rx::Consumed;
            }
            Some(Slot::Matched(id)) => {
                self.rx_segment(id, proto, pkt);
                return Rx::Consumed;
            }
            None => {}
        }
        let Some(ib) = self.new_inbound(peer, msg_id, proto, pkt) else {
            self.stats.rx_invalid += 1;
            return Rx::Consumed;
        };
        let tagged = ty.is_tagged();
        let ibm = &self.inbound[ib];
        let env = Envelope {
            comm: if is_rta {
                COMM_RTA
            } else if tagged {
                COMM_TAG
            } else {
                COMM_MSG
            },
            src: peer.0,
            tag: if is_rta { ib as u64 } else { ibm.tag },
        };
        // An eager payload is not copied yet: when a posted receive matches it now, it goes
        // straight from the packet into the receive buffer; otherwise it is buffered below.
        let direct = proto == RxProto::Eager && !is_rta;
        // The engine's budget counts what is buffered here, not the message length (long
        // protocols leave the data at the sender until matched).
        let len = if direct {
            ibm.msg_len as usize
        } else {
            ibm.data.len()
        };
        // The arrivals go into a vector kept across calls (no allocation per message).
        let mut arrived = std::mem::take(&mut self.arrived);
        arrived.clear();
        match self
            .engine
            .deliver(env, msg_id, len, ib as u32, |a| arrived.push(a))
        {
            Ok(0) => {}
            Ok(_) => {
                // Processed in order: the peer's reorder window moved (a message refused
                // as too far ahead may fit now).
                self.admission += 1;
            }
            Err(rej) => {
                self.arrived = arrived;
                self.inbound.try_remove(ib);
                return match rej.reason {
                    // Not now: the budget is full or the message is too far ahead. Nothing
                    // of it was kept; the owner redelivers it later.
                    RejectReason::Backpressure | RejectReason::WindowOverflow => {
                        tracing::debug!(reason = %rej.reason, msg_id, "receiver not ready");
                        self.stats.rx_refused += 1;
                        Rx::Refused
                    }
                    RejectReason::Stale | RejectReason::Duplicate => {
                        tracing::debug!(reason = %rej.reason, msg_id, "reorder buffer refused");
                        self.stats.rx_reorder_rejected += 1;
                        Rx::Consumed
                    }
                };
            }
        }
        let now = arrived
            .iter()
            .any(|a| matches!(a, Arrived::Matched(m) if m.msg as usize == ib));
        if !now {
            // Unexpected, or held for an earlier message: later packets of the message
            // find it here (a message matched now is entered by `on_match_with`).
            self.peers[peer.0 as usize]
                .msgs
                .insert(msg_id, Slot::Pending(ib));
        }
        let mut payload = None;
        if direct {
            if now {
                payload = Some(pkt.payload());
            } else if let Some(ibm) = self.inbound.get_mut(ib) {
                // Buffered until matched.
                ibm.data = pkt.payload().to_vec();
            }
        }
        for a in arrived.drain(..) {
            match a {
                Arrived::Matched(m) => {
                    let data = payload.filter(|_| m.msg as usize == ib);
                    self.on_match_with(m.recv, m.msg as usize, data)
                }
                Arrived::Unexpected(env) if env.comm == COMM_RTA => {
                    let spec = RecvSpec::exact(COMM_RTA, env.src, env.tag);
                    if let Some(c) = self.engine.mprobe(&spec) {
                        if let Ok(m) = self.engine.mrecv(c.handle) {
                            self.process_rta(m.msg as usize);
                        }
                    }
                }
                Arrived::Unexpected(_) => {}
            }
        }
        self.arrived = arrived;
        Rx::Consumed
    }

    pub(super) fn new_inbound(
        &mut self,
        peer: PeerId,
        msg_id: u32,
        proto: RxProto,
        pkt: &Packet<&[u8]>,
    ) -> Option<usize> {
        use PacketType as T;
        let ty = pkt.pkt_type();
        let mut ib = Inbound {
            peer,
            msg_id,
            proto,
            tag: pkt.tag().unwrap_or(0),
            msg_len: pkt.get(Field::MsgLength).unwrap_or(0),
            cq_data: pkt.cq_data(),
            send_id: pkt.send_id().unwrap_or(0),
            credit_request: pkt.get(Field::CreditRequest).unwrap_or(0) as u32,
            dc: matches!(
                ty,
                T::DcEagerMsgRtm
                    | T::DcEagerTagRtm
                    | T::DcMediumMsgRtm
                    | T::DcMediumTagRtm
                    | T::DcLongctsMsgRtm
                    | T::DcLongctsTagRtm
                    | T::DcWriteRta
            ),
            data: Vec::new(),
            got: Coverage::default(),
            read_iov: Vec::new(),
            runt_len: 0,
            rta: None,
            aborted: false,
        };
        match ty {
            T::WriteRta | T::FetchRta | T::CompareRta | T::DcWriteRta => {
                let (buf, compare) = if ty == T::CompareRta {
                    let (a, b) = pkt.compare_operands()?;
                    (a.to_vec(), Some(b.to_vec()))
                } else {
                    (pkt.payload().to_vec(), None)
                };
                let id = match ty {
                    T::DcWriteRta => pkt.send_id(),
                    T::FetchRta | T::CompareRta => pkt.recv_id(),
                    _ => Some(0),
                }
                .unwrap_or(0);
                ib.send_id = id;
                ib.rta = Some(Rta {
                    ty,
                    datatype: pkt.get(Field::AtomicDatatype).unwrap_or(0) as u32,
                    op: pkt.get(Field::AtomicOp).unwrap_or(0) as u32,
                    iov: pkt.rma_iov().to_vec(),
                    id,
                    buf,
                    compare,
                });
                return Some(self.inbound.insert(ib));
            }
            _ => {}
        }
        match proto {
            RxProto::Eager => {
                // The payload is copied by `on_sequenced` (into the matching receive's
                // buffer, or kept here when none matches yet).
                ib.msg_len = pkt.payload().len() as u64;
                ib.got.add(0, ib.msg_len, ib.msg_len);
            }
            RxProto::Medium => {
                // efa-rdm-protocol-v4 §3.2: "the medium message subprotocol can be used on
                // messages of any size … The exact size threshold … is up to the
                // implementation to decide" — the sender's threshold, not ours. What a peer
                // can make us allocate is bounded by the unexpected-message byte budget
                // (a message held unmatched counts against it in full), or the 1 MiB this
                // bound always allowed.
                let cap = (self.cfg.max_unexpected_bytes as u64)
                    .max(self.cfg.max_medium_size)
                    .max(1 << 20);
                if ib.msg_len > cap {
                    return None;
                }
                ib.data = vec![0; ib.msg_len as usize];
            }
            RxProto::LongCts => {
                ib.data = pkt.payload().to_vec();
                if ib.data.len() as u64 > ib.msg_len {
                    return None;
                }
                ib.got.add(0, ib.data.len() as u64, ib.msg_len);
            }
            RxProto::LongRead | RxProto::RuntRead => {
                ib.read_iov = pkt.read_iov().ok()?.to_vec();
                let total: u64 = ib
                    .read_iov
                    .iter()
                    .map(|e| e.len())
                    .fold(0, u64::saturating_add);
                if total < ib.msg_len {
                    return None;
                }
                if proto == RxProto::RuntRead {
                    ib.runt_len = pkt.get(Field::RuntLength).unwrap_or(0);
                    if ib.runt_len > ib.msg_len || ib.runt_len > (1 << 24) {
                        return None;
                    }
                    ib.data = vec![0; ib.runt_len as usize];
                }
            }
        }
        let idx = self.inbound.insert(ib);
        if matches!(proto, RxProto::Medium | RxProto::RuntRead) {
            self.inbound_segment(idx, proto, pkt);
        }
        Some(idx)
    }

    /// `(offset, data)` of a medium or runt segment, validated against the message.
    pub(super) fn segment_of<'p>(
        proto: RxProto,
        msg_len: u64,
        runt_len: u64,
        pkt: &'p Packet<&[u8]>,
    ) -> Option<(u64, &'p [u8])> {
        let off = pkt.get(Field::SegOffset)?;
        let data = match proto {
            RxProto::Medium if pkt.get(Field::MsgLength) == Some(msg_len) => pkt.payload(),
            RxProto::RuntRead if pkt.get(Field::RuntLength) == Some(runt_len) => pkt.data().ok()?,
            _ => return None,
        };
        let limit = if proto == RxProto::RuntRead {
            runt_len
        } else {
            msg_len
        };
        (off.checked_add(data.len() as u64)? <= limit).then_some((off, data))
    }

    pub(super) fn inbound_segment(&mut self, idx: usize, proto: RxProto, pkt: &Packet<&[u8]>) {
        let Some(ib) = self.inbound.get_mut(idx) else {
            return;
        };
        if ib.proto != proto {
            self.stats.rx_invalid += 1;
            return;
        }
        let Some((off, data)) = Self::segment_of(proto, ib.msg_len, ib.runt_len, pkt) else {
            self.stats.rx_invalid += 1;
            return;
        };
        // efa-rdm-protocol-v4 §3.2 (medium): `seg_offset` puts "the data in the correct
        // location"; a segment whose bytes are already here (delivered twice) is not
        // counted again, so the message is complete only with every byte.
        match ib.got.add(off, data.len() as u64, ib.msg_len) {
            Added::Yes => {}
            Added::Overlap => {
                self.stats.rx_duplicate_data += 1;
                return;
            }
            Added::TooFragmented => {
                self.stats.rx_invalid += 1;
                return;
            }
        }
        ib.data[off as usize..off as usize + data.len()].copy_from_slice(data);
    }

    pub(super) fn rx_segment(&mut self, id: u32, proto: RxProto, pkt: &Packet<&[u8]>) {
        let Some(r) = self.rx.get(id) else {
            self.stats.rx_unknown_op += 1;
            return;
        };
        if r.proto != proto {
            self.stats.rx_invalid += 1;
            return;
        }
        let Some((off, data)) = Self::segment_of(proto, r.msg_len, r.runt_len, pkt) else {
            self.stats.rx_invalid += 1;
            return;
        };
        if self.rx_place(id, off, data) {
            self.rx_progress(id);
        }
    }

    /// Copies message bytes at `off` into the receive buffer (truncating) or the write
    /// target. Returns false (and counts) when the range is invalid or its bytes were
    /// already received (a segment delivered twice: efa-rdm-protocol-v4 §3.2, each
    /// segment's bytes go at its `seg_offset`, and the receive completes only once every
    /// byte is in place).
    pub(super) fn rx_place(&mut self, id: u32, off: u64, data: &[u8]) -> bool {
        let Some(r) = self.rx.get_mut(id) else {
            return false;
        };
        let Some(end) = off.checked_add(data.len() as u64) else {
            self.stats.rx_invalid += 1;
            return false;
        };
        if end > r.msg_len {
            self.stats.rx_invalid += 1;
            return false;
        }
        match r.got.add(off, data.len() as u64, r.msg_len) {
            Added::Yes => {}
            Added::Overlap => {
                self.stats.rx_duplicate_data += 1;
                return false;
            }
            Added::TooFragmented => {
                self.stats.rx_invalid += 1;
                return false;
            }
        }
        let r = &self.rx[id];
        if r.kind == RxKind::WriteTarget {
            let iov = r.iov.clone();
            if !self.scatter(&iov, off, data) {
                self.stats.rx_invalid += 1;
                if let Some(r) = self.rx.get_mut(id) {
                    r.error.get_or_insert(OpError::RdmaFailed);
                }
            }
        } else if let Some(m) = r.mem {
            // The receive's bytes: its own buffer, or `buf_len` bytes at `base` of the
            // caller's region (truncating either way).
            let (base, cap) = (r.base as usize, r.buf_len as usize);
            let buf = &mut self.mem[m].bytes;
            let cap = cap.min(buf.len().saturating_sub(base));
            if (off as usize) < cap {
                let n = (cap - off as usize).min(data.len());
                let at = base + off as usize;
                buf[at..at + n].copy_from_slice(&data[..n]);
            }
        }
        true
    }

    /// A posted receive `rx` and an inbound message `ib` met.
    pub(super) fn on_match(&mut self, id: u32, ib_idx: usize) {
        self.on_match_with(id, ib_idx, None);
    }

    /// [`Endpoint::on_match`]; `direct` is the eager payload of `ib` when it was not
    /// buffered (the packet being handled).
    pub(super) fn on_match_with(&mut self, id: u32, ib_idx: usize, direct: Option<&[u8]>) {
        let Some(ib) = self.inbound.try_remove(ib_idx) else {
            return;
        };
        let Some(r) = self.rx.get_mut(id) else { return };
        r.posted = None;
        r.matched = true;
        r.peer = Some(ib.peer);
        r.proto = ib.proto;
        r.tag = ib.tag;
        r.msg_len = ib.msg_len;
        r.cq_data = ib.cq_data;
        r.send_id = ib.send_id;
        r.msg_id = ib.msg_id;
        r.credits = ib.credit_request;
        r.dc = ib.dc;
        r.read_iov = ib.read_iov;
        r.runt_len = ib.runt_len;
        if ib.aborted {
            // Claimed from a peer since removed: its data went with the peer.
            r.error = Some(OpError::Aborted);
            self.stats.aborted += 1;
            self.rx_finish(id);
            return;
        }
        if direct.is_none() {
            self.peers[ib.peer.0 as usize]
                .msgs
                .insert(ib.msg_id, Slot::Matched(id));
        }
        // Buffered bytes: the eager payload, the medium/runt segments so far (at their
        // offsets, zeros elsewhere), or the LONGCTS_RTM payload at offset 0.
        let r = &self.rx[id];
        if let Some(m) = r.mem {
            let (base, cap) = (r.base as usize, r.buf_len as usize);
            let data = direct.unwrap_or(&ib.data);
            let buf = &mut self.mem[m].bytes;
            let n = cap.min(buf.len().saturating_sub(base)).min(data.len());
            buf[base..base + n].copy_from_slice(&data[..n]);
        }
        let r = &mut self.rx[id];
        r.got = ib.got;
        r.requested = r.got.total();
        self.rx_progress(id);
        // A message matched on arrival had no entry; one that completed at once needs
        // none (nothing more of it comes).
        if direct.is_some() && self.rx.get(id).is_some() {
            self.peers[ib.peer.0 as usize]
                .msgs
                .insert(ib.msg_id, Slot::Matched(id));
        }
    }

    /// CTS window for `left` bytes still to come.
    pub(super) fn cts_window(&self, peer: PeerId, left: u64, credits: u32) -> u64 {
        let credits = credits.clamp(1, self.cfg.rx_window_packets.max(1)) as u64;
        left.min(credits.saturating_mul(self.ctsdata_payload(peer) as u64))
            .max(1)
    }

    /// Moves a receive-side op forward: CTS, RDMA read, completion.
    pub(super) fn rx_progress(&mut self, id: u32) {
        let Some(r) = self.rx.get(id) else { return };
        let peer = r.peer.unwrap_or(PeerId(0));
        match r.proto {
            RxProto::Eager | RxProto::Medium => {
                if r.got.total() >= r.msg_len {
                    self.rx_finish(id);
                }
            }
            RxProto::LongCts => {
                if r.got.total() >= r.msg_len {
                    self.rx_finish(id);
                } else if r.window_left == 0 && r.requested < r.msg_len {
                    // efa-rdm-protocol-v4 §3.2: "After receiving all the CTSDATA packets it
                    // was expecting, the receiver will recalculate how many bytes it can
                    // handle and send another CTS packet to the sender."
                    let left = r.msg_len - r.requested;
                    // efa-rdm-protocol-v4 §3.2: "The receiver will try to honor the request,
                    // but it is not obligated to. However, the receiver must allow the sender
                    // to send at least 1 CTSDATA packet".
                    let credits = if r.kind == RxKind::ReadReq {
                        self.cfg.rx_window_packets
                    } else {
                        r.credits
                    };
                    let window = self.cts_window(peer, left, credits);
                    let (send_id, read) = (r.send_id, r.kind == RxKind::ReadReq);
                    let r = &mut self.rx[id];
                    r.requested += window;
                    r.window_left = window;
                    let mut cts = self
                        .ctrl(peer, PacketType::Cts)
                        .with(Field::SendId, send_id as u64)
                        .with(Field::RecvId, id as u64)
                        .with(Field::RecvLength, window);
                    if read {
                        // efa-rdm-protocol-v4 §3.2: "This flag indicates the CTS packet is
                        // used by the long-CTS emulated read protocol."
                        cts.flags |= flags::CTS_READ_REQ;
                    }
                    self.emit(peer, &cts, PktOwner::Rx(id));
                }
            }
            RxProto::LongRead | RxProto::RuntRead => {
                if r.rdma_failed {
                    return;
                }
                if !r.read_started && r.got.total() >= r.runt_len {
                    let r = &mut self.rx[id];
                    r.read_started = true;
                    let reads = r.msg_len > r.runt_len
                        && (r.kind == RxKind::WriteTarget || r.buf_len > r.runt_len);
                    if reads && !self.cfg.features.rdma_read {
                        // efa-rdm-protocol-v4 §4.1: RDMA read is an extra feature with "a set
                        // of requirements … to be met before an endpoint can use the RDMA
                        // read capability": one that did not advertise it reads nothing, and
                        // answers a peer that used long-read anyway as §4.7 answers a
                        // receiver "unable to register a memory region for the RDMA read
                        // operation" (READ_NACK, then long-CTS).
                        self.rx_read_failed(id);
                    } else if r.kind == RxKind::WriteTarget {
                        self.rx_start_reads(id);
                    } else if let Some(m) = r.mem {
                        if r.buf_len == 0 || r.msg_len == r.runt_len {
                            self.rx_start_reads(id);
                        } else if r.borrowed {
                            // The caller's region: its own registration serves.
                            match self.mem.get(m).map(|g| g.reg) {
                                Some(RegState::Ok(_)) => self.rx_start_reads(id),
                                Some(RegState::Pending) => self.mem[m].rx_waiters.push(id),
                                _ => self.rx_read_failed(id),
                            }
                        } else {
                            // The destination of our own reads: local.
                            self.register_region(m, false);
                        }
                    }
                } else if r.reads_issued && r.rdma_left == 0 {
                    // efa-rdm-protocol-v4 §4.1: "After all reads are finished, the receiver
                    // will send an EOR packet to the requester".
                    let eor = self
                        .ctrl(peer, PacketType::Eor)
                        .with(Field::SendId, r.send_id as u64)
                        .with(Field::RecvId, id as u64);
                    self.emit(peer, &eor, PktOwner::None);
                    self.rx_finish(id);
                }
            }
        }
    }

    pub(super) fn rx_registered(&mut self, id: u32, result: Result<MrKey, ()>) {
        let Some(r) = self.rx.get(id) else { return };
        match (r.kind, result) {
            (RxKind::DirectRead, Ok(_)) => {
                let peer = r.peer.unwrap_or(PeerId(0));
                let remote = r.remote.unwrap_or(RemoteAddr { addr: 0, key: 0 });
                let (len, m) = (r.msg_len, r.mem.unwrap_or(0));
                let dest = self.peers[peer.0 as usize].addr;
                let mut off = 0;
                let mut n_ops = 0;
                while off < len {
                    let n = self.cfg.max_rdma_size.max(1).min(len - off);
                    let token = self.token();
                    self.rdmas.insert(token, RdmaOwner::Rx(id));
                    self.out.push_back(Transmit::RdmaRead {
                        token: RdmaToken(token),
                        peer,
                        dest,
                        local: MemHandle(m as u32),
                        offset: off,
                        remote: RemoteAddr {
                            addr: remote.addr.wrapping_add(off),
                            key: remote.key,
                        },
                        len: n,
                    });
                    off += n;
                    n_ops += 1;
                }
                self.rx[id].rdma_left = n_ops;
            }
            (RxKind::DirectRead, Err(())) => {
                // Fall back to the emulated read.
                self.start_emulated_read(id);
            }
            (_, Ok(_)) => self.rx_start_reads(id),
            (_, Err(())) => self.rx_read_failed(id),
        }
    }

    /// Issues the RDMA reads of a long-read or runting-read message.
    pub(super) fn rx_start_reads(&mut self, id: u32) {
        let Some(r) = self.rx.get(id) else { return };
        let peer = r.peer.unwrap_or(PeerId(0));
        let dest = self.peers[peer.0 as usize].addr;
        // Destination pieces: (region, offset, len) covering message bytes
        // [runt_len, min(msg_len, buf_len)) (or the whole message for write targets).
        let mut dst: Vec<(usize, u64, u64)> = Vec::new();
        let start = r.runt_len;
        if r.kind == RxKind::WriteTarget {
            let mut moff = 0u64;
            for e in &r.iov {
                let (lo, hi) = (moff, moff.saturating_add(e.len()));
                moff = hi;
                let (a, b) = (lo.max(start), hi.min(r.msg_len));
                if a >= b {
                    continue;
                }
                match self.resolve(e.addr().wrapping_add(a - lo), b - a, e.key()) {
                    Some((idx, o)) => dst.push((idx, o as u64, b - a)),
                    None => {
                        self.stats.rx_invalid += 1;
                        self.rx_read_failed(id);
                        return;
                    }
                }
            }
        } else if let Some(m) = r.mem {
            let end = r.msg_len.min(r.buf_len);
            if end > start {
                dst.push((m, r.base + start, end - start));
            }
        }
        // Source: read_iov from message offset `start`.
        let mut reads = Vec::new();
        let mut src_off = start;
        for (idx, mut o, mut n) in dst {
            while n > 0 {
                // Locate src_off in read_iov.
                let mut acc = 0u64;
                let mut found = None;
                for e in &r.read_iov {
                    if src_off < acc + e.len() {
                        found = Some((*e, src_off - acc));
                        break;
                    }
                    acc += e.len();
                }
                let Some((e, eo)) = found else {
                    self.stats.rx_invalid += 1;
                    self.rx_read_failed(id);
                    return;
                };
                let k = n.min(e.len() - eo).min(self.cfg.max_rdma_size.max(1));
                reads.push((
                    idx,
                    o,
                    RemoteAddr {
                        addr: e.addr().wrapping_add(eo),
                        key: e.key(),
                    },
                    k,
                ));
                o += k;
                n -= k;
                src_off += k;
            }
        }
        let n_reads = reads.len() as u32;
        for (idx, o, remote, k) in reads {
            let token = self.token();
            self.rdmas.insert(token, RdmaOwner::Rx(id));
            self.out.push_back(Transmit::RdmaRead {
                token: RdmaToken(token),
                peer,
                dest,
                local: MemHandle(idx as u32),
                offset: o,
                remote,
                len: k,
            });
        }
        let r = &mut self.rx[id];
        r.rdma_left = n_reads;
        r.reads_issued = true;
        self.rx_progress(id);
    }

    /// Registration or RDMA read failed on the receiver of a long-read/runting-read.
    pub(super) fn rx_read_failed(&mut self, id: u32) {
        let Some(r) = self.rx.get_mut(id) else { return };
        if r.rdma_failed {
            return;
        }
        r.rdma_failed = true;
        let peer = r.peer.unwrap_or(PeerId(0));
        let (kind, send_id) = (r.kind, r.send_id);
        if kind == RxKind::DirectRead {
            r.rdma_failed = false;
            r.rdma_left = 0;
            self.start_emulated_read(id);
            return;
        }
        if self.cfg.features.read_nack && self.peers[peer.0 as usize].has(extra::FEATURE_READ_NACK)
        {
            // efa-rdm-protocol-v4 §4.7: "After all RTM packets have been processed, the
            // receiver sends a READ_NACK packet to the sender".
            self.stats.read_nacks += 1;
            let nack = self
                .ctrl(peer, PacketType::ReadNack)
                .with(Field::SendId, send_id as u64)
                .with(Field::RecvId, id as u64);
            self.emit(peer, &nack, PktOwner::Rx(id));
            if kind == RxKind::WriteTarget {
                // The sender resends a LONGCTS_RTW (REQ_READ_NACK), which has no msg_id to
                // find this op by: it starts a fresh write target.
                self.rx.remove(id);
            }
        } else {
            if let Some(r) = self.rx.get_mut(id) {
                r.error.get_or_insert(OpError::RdmaFailed);
            }
            self.rx_fail(id);
        }
    }

    /// The device finished an RDMA read or write.
    pub fn on_rdma_done(&mut self, token: RdmaToken, ok: bool) {
        let Some(owner) = self.rdmas.remove(&token.0) else {
            self.stats.unknown_tokens += 1;
            return;
        };
        match owner {
            // Of an aborted operation: only the region it used is released.
            RdmaOwner::Detached(mem) => {
                if let Some(idx) = mem {
                    self.release_use(idx);
                }
            }
            RdmaOwner::Tx(id) => {
                if let Some(t) = self.tx.get_mut(id) {
                    t.rdma_left = t.rdma_left.saturating_sub(1);
                    if !ok {
                        if t.proto == Protocol::DirectWrite {
                            // Retry as an emulated write.
                            t.started = false;
                            t.all_queued = false;
                            self.start_write_emulated(id);
                            return;
                        }
                        t.error.get_or_insert(OpError::RdmaFailed);
                    }
                }
                self.tx_check(id);
            }
            RdmaOwner::Rx(id) => {
                let Some(r) = self.rx.get_mut(id) else { return };
                r.rdma_left = r.rdma_left.saturating_sub(1);
                if !ok {
                    if r.rdma_left == 0 {
                        self.rx_read_failed(id);
                    } else {
                        r.rdma_failed = true;
                    }
                    return;
                }
                if r.rdma_failed {
                    if r.rdma_left == 0 {
                        r.rdma_failed = false;
                        self.rx_read_failed(id);
                    }
                    return;
                }
                if r.kind == RxKind::DirectRead {
                    if r.rdma_left == 0 {
                        self.rx_finish(id);
                    }
                } else {
                    self.rx_progress(id);
                }
            }
        }
    }

    pub(super) fn rx_fail(&mut self, id: u32) {
        self.rx_finish(id);
    }

    /// Completes a receive-side op: application completion, RECEIPT for DC.
    #[inline(always)]
    pub(super) fn rx_finish(&mut self, id: u32) {
        let Some(r) = self.rx.remove(id) else { return };
        if let Some(peer) = r.peer {
            let p = &mut self.peers[peer.0 as usize];
            if r.kind == RxKind::Recv && p.msgs.get(&r.msg_id) == Some(&Slot::Matched(id)) {
                p.msgs.remove(&r.msg_id);
            }
            if r.dc && r.error.is_none() {
                // efa-rdm-protocol-v4 §4.2: "after data is delivered to the application
                // buffer, the receiver/responder will send a RECEIPT packet back".
                let receipt = self
                    .ctrl(peer, PacketType::Receipt)
                    .with(Field::TxId, r.send_id as u64)
                    .with(Field::MsgId, r.msg_id as u64);
                self.emit(peer, &receipt, PktOwner::None);
            }
        }
        let data = match r.mem {
            Some(m) if r.borrowed => {
                // The caller's region stays registered and theirs.
                if let Some(g) = self.mem.get_mut(m) {
                    g.users = g.users.saturating_sub(1);
                }
                Vec::new()
            }
            Some(m) => self.free_region(m),
            None => Vec::new(),
        };
        let mut result = r.error.map_or(Ok(()), Err);
        let kind = match r.kind {
            RxKind::Recv => OpKind::Recv,
            RxKind::ReadReq | RxKind::DirectRead => OpKind::Read,
            RxKind::AtomicResp(k) => k,
            RxKind::WriteTarget => {
                if let (Some(cq), None) = (r.cq_data, r.error) {
                    let op = self.new_op();
                    self.completions.push_back(Completion {
                        op,
                        kind: OpKind::RemoteWrite,
                        result: Ok(()),
                        data: Vec::new(),
                        len: r.msg_len,
                        tag: 0,
                        src: r.peer,
                        cq_data: Some(cq),
                    });
                }
                return;
            }
        };
        if result.is_ok() && r.kind == RxKind::Recv && r.msg_len > r.buf_len {
            result = Err(OpError::Truncated {
                msg_len: r.msg_len,
                buf_len: r.buf_len,
            });
        }
        self.completions.push_back(Completion {
            op: r.op,
            kind,
            result,
            data,
            len: r.msg_len,
            tag: r.tag,
            src: r.peer,
            cq_data: r.cq_data,
        });
    }
}
