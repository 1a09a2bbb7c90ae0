//! Building and emitting packets: REQ optional headers, connid, handshake, device send completions.

use super::*;

/// How many answered sends' copy buffers [`Endpoint::push_send`] keeps for reuse.
const SPARE_COPIES: usize = 64;

impl Endpoint {
    /// efa-rdm-protocol-v4 §2.2: "After the endpoint received the HANDSHAKE packet from the
    /// peer, it will stop including its raw address in the header (see section 4.3 for an
    /// exception)"; §4.3: "The easiest way to do so is to keep including the raw address
    /// header"; wire-layouts §A.6: "Raw address and connid are mutually exclusive … The
    /// connid header is sent only once the peer's handshake has arrived".
    pub(super) fn req_opts(&self, peer: PeerId) -> (Option<RawAddrHdr>, Option<u32>) {
        let p = &self.peers[peer.0 as usize];
        let raw = p.handshake.is_none() || p.has(extra::REQUEST_CONSTANT_HEADER_LENGTH);
        if raw {
            (Some(RawAddrHdr::new(self.addr)), None)
        } else if p.has(extra::REQUEST_CONNID_HEADER) {
            (None, Some(self.addr.qkey))
        } else {
            (None, None)
        }
    }

    pub(super) fn req_hdr_len(
        &self,
        peer: PeerId,
        ty: PacketType,
        cq: bool,
        n_iov: usize,
    ) -> usize {
        let (raw, connid) = self.req_opts(peer);
        ty.layout().size as usize
            + n_iov * RMA_IOV_LEN
            + raw.map_or(0, |r| r.wire_len())
            + if cq { 8 } else { 0 }
            + if connid.is_some() { 4 } else { 0 }
    }

    pub(super) fn req(&self, peer: PeerId, ty: PacketType) -> Repr<'static> {
        let (raw, connid) = self.req_opts(peer);
        let mut r = Repr::new(ty);
        r.raw_addr = raw;
        r.connid = connid;
        r
    }

    /// A non-REQ packet. wire-layouts §A.5: CTS, READRSP, EOR, ATOMRSP, RECEIPT and
    /// READ_NACK are "always sent with CONNID_HDR" (in a padding field); CTSDATA "only after
    /// the peer's handshake has been received", and only to a peer that asked for it:
    /// its 8-byte header "was introduced with the extra request 'connid header'"
    /// (efa-rdm-protocol-v4 §3.2, §4.4; libfabric `efa_rdm_peer_need_connid`), and a peer
    /// that predates it reads those bytes as data.
    pub(super) fn ctrl(&self, peer: PeerId, ty: PacketType) -> Repr<'static> {
        let mut r = Repr::new(ty);
        r.connid = match ty {
            PacketType::CtsData => self.ctsdata_connid(peer).then_some(self.addr.qkey),
            _ => Some(self.addr.qkey),
        };
        r
    }

    /// Whether CTSDATA packets to `peer` carry the connid header (see `ctrl`).
    fn ctsdata_connid(&self, peer: PeerId) -> bool {
        self.peers[peer.0 as usize].has(extra::REQUEST_CONNID_HEADER)
    }

    pub(super) fn ctsdata_payload(&self, peer: PeerId) -> usize {
        let connid = self.ctsdata_connid(peer);
        self.cfg
            .mtu
            .saturating_sub(CTSDATA_HDR + if connid { CTSDATA_CONNID } else { 0 })
            .max(1)
    }

    pub(super) fn emit(&mut self, peer: PeerId, repr: &Repr<'_>, owner: PktOwner) {
        if let Some(bytes) = Self::encode(repr) {
            self.emit_encoded(peer, repr.pkt_type, bytes, owner);
        }
    }

    /// The packet's bytes (`None`, logged: it cannot be emitted). Needs no `&mut self`, so
    /// a payload can be borrowed from the endpoint's regions while the packet is built.
    pub(super) fn encode(repr: &Repr<'_>) -> Option<Vec<u8>> {
        let mut bytes = vec![0u8; repr.buffer_len()];
        match repr.emit(&mut bytes) {
            Ok(_) => Some(bytes),
            Err(e) => {
                tracing::error!(?e, ty = %repr.pkt_type, "cannot emit packet");
                None
            }
        }
    }

    /// An eager or medium RTM: `h` then `payload` (`None`, logged: it cannot be emitted).
    /// The packet [`Endpoint::encode`] builds from the same values, without the walk over
    /// the type's layout.
    /// `bytes`: a buffer to build it in (its contents are discarded; a spare one from
    /// [`Endpoint::spare_buffer`] saves an allocation).
    pub(super) fn encode_rtm(mut bytes: Vec<u8>, h: &RtmHeader, payload: &[u8]) -> Option<Vec<u8>> {
        // The headers are written on the stack and copied once (no zero-fill of the
        // vector, no second length computation).
        let mut head = [0u8; RtmHeader::MAX_LEN];
        match h.emit(&mut head) {
            Ok(hl) => {
                bytes.clear();
                bytes.reserve(hl + payload.len());
                bytes.extend_from_slice(&head[..hl]);
                bytes.extend_from_slice(payload);
                Some(bytes)
            }
            Err(e) => {
                tracing::error!(?e, ty = %h.pkt_type, "cannot emit packet");
                None
            }
        }
    }

    /// Queues the packet `bytes` (of type `ty`) that [`Endpoint::encode`] built.
    pub(super) fn emit_encoded(
        &mut self,
        peer: PeerId,
        ty: PacketType,
        bytes: Vec<u8>,
        owner: PktOwner,
    ) {
        if bytes.len() > self.cfg.mtu {
            // Only an ATOMRSP echoing a peer's larger operand can get here; the device will
            // refuse it and the requester's operation fails.
            tracing::warn!(%ty, len = bytes.len(), "packet exceeds the MTU");
            self.stats.tx_oversize += 1;
        }
        if let PktOwner::Tx(id) = owner {
            if let Some(t) = self.tx.get_mut(id) {
                t.inflight += 1;
            }
        }
        self.push_send(peer, bytes, owner);
    }

    /// A buffer for a packet: one kept by [`Endpoint::recycle`] or `on_send_done`, or a
    /// new empty one.
    #[inline]
    pub(super) fn spare_buffer(&mut self) -> Vec<u8> {
        self.spare_copies.pop().unwrap_or_default()
    }

    /// Hands back a buffer the owner no longer needs (a received packet's bytes once
    /// [`Endpoint::handle_packet`] has taken them): it is reused for a later packet, so a
    /// ping-pong allocates nothing per message for its packets. At most
    /// 64 are kept, none larger than the MTU; others are dropped.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare_copies.len() < SPARE_COPIES && buf.capacity() <= self.cfg.mtu {
            self.spare_copies.push(buf);
        }
    }

    pub(super) fn push_send(&mut self, peer: PeerId, bytes: Vec<u8>, owner: PktOwner) {
        if bytes.first().is_some_and(|&t| t >= 64) {
            self.peers[peer.0 as usize].req_sent = true;
        }
        let entry = self.sends.vacant_entry();
        let token = entry.key() as u64 & 0xffff_ffff | self.next_token << 32;
        self.next_token += 1;
        let dest = self.peers[peer.0 as usize].addr;
        self.stats.tx_packets += 1;
        // The copy kept for a device that answers `Again`, in a buffer of an earlier send
        // (no allocation once a few are in circulation).
        let mut copy = self.spare_copies.pop().unwrap_or_default();
        copy.clear();
        copy.extend_from_slice(&bytes);
        entry.insert(PendingSend {
            token,
            peer,
            bytes: copy,
            owner,
        });
        self.out.push_back(Transmit::Send {
            token: SendToken(token),
            peer,
            dest,
            bytes,
        });
    }

    /// The device finished (or refused) a packet.
    pub fn on_send_done(&mut self, token: SendToken, outcome: SendOutcome) {
        let slot = (token.0 & 0xffff_ffff) as usize;
        let mut p = match self.sends.get(slot) {
            Some(p) if p.token == token.0 => self.sends.remove(slot),
            _ => {
                self.stats.unknown_tokens += 1;
                return;
            }
        };
        if matches!(outcome, SendOutcome::Error)
            && p.owner != PktOwner::Trigger
            && p.bytes.first().is_some_and(|&t| t >= 64)
        {
            self.req_lost(p.peer);
        }
        // A packet of an aborted operation (or to a removed peer) is not posted again.
        let resend = outcome == SendOutcome::Again && p.owner != PktOwner::Aborted;
        if !resend && self.spare_copies.len() < SPARE_COPIES && p.bytes.capacity() <= self.cfg.mtu {
            // The copy is no longer needed: its buffer serves a later packet.
            self.spare_copies.push(std::mem::take(&mut p.bytes));
        }
        match outcome {
            SendOutcome::Again if resend => {
                // efa-rdm-protocol-v4 §3.2 (medium): "it is possible … for some packets to be
                // sent successfully and others to not be sent due to temporarily being out
                // of resources. Implementation needs to be able to handle this case."
                self.stats.tx_again += 1;
                self.stats.tx_packets -= 1;
                self.push_send(p.peer, p.bytes, p.owner);
            }
            SendOutcome::Again => {
                // Not sent, and not to be: its operation is gone.
                self.stats.tx_again += 1;
                self.stats.tx_packets -= 1;
            }
            SendOutcome::Ok => {
                if let PktOwner::Tx(id) = p.owner {
                    if let Some(t) = self.tx.get_mut(id) {
                        t.inflight = t.inflight.saturating_sub(1);
                    }
                    self.tx_check(id);
                }
            }
            SendOutcome::Error => match p.owner {
                // efa-rdm-protocol-v4 §2.3: "it is normal that a HANDSHAKE packet encounters
                // a send error" — the application never waits for it.
                PktOwner::Handshake => {
                    self.stats.handshake_send_errors += 1;
                    // Send it again with the next packet from the peer.
                    if let Some(peer) = self.peers.get_mut(p.peer.0 as usize) {
                        peer.handshake_sent = false;
                    }
                }
                PktOwner::None | PktOwner::Aborted => {}
                PktOwner::Trigger => {
                    // efa-rdm-protocol-v4 §2.3: a send error happens "because the peer has
                    // already been closed" — then no handshake will come.
                    // The peer cannot be reached (e.g. its endpoint is gone): the operations
                    // waiting for its handshake fail as a send to it does, instead of
                    // waiting for ever; a later operation provokes the handshake again.
                    let Some(peer) = self.peers.get_mut(p.peer.0 as usize) else {
                        return;
                    };
                    if peer.handshake.is_some() {
                        return;
                    }
                    // The REQ that stood for "a REQ was sent" did not arrive either.
                    peer.handshake_triggered = false;
                    peer.req_sent = false;
                    for w in std::mem::take(&mut peer.waiting) {
                        match w {
                            Waiting::Tx(id) => {
                                if let Some(t) = self.tx.get_mut(id) {
                                    t.error.get_or_insert(OpError::SendFailed);
                                    t.all_queued = true;
                                    t.await_eor = false;
                                    t.await_receipt = false;
                                    t.rdma_left = 0;
                                }
                                self.tx_check(id);
                            }
                            // A fetch/compare atomic that never went out: its ATOMRSP
                            // will not come either.
                            Waiting::Rta(id, _) => {
                                if let Some(r) = self.rx.get_mut(id) {
                                    r.error.get_or_insert(OpError::SendFailed);
                                }
                                self.rx_fail(id);
                            }
                        }
                    }
                }
                PktOwner::Tx(id) => {
                    if let Some(t) = self.tx.get_mut(id) {
                        t.inflight = t.inflight.saturating_sub(1);
                        t.error.get_or_insert(OpError::SendFailed);
                        t.await_eor = false;
                        t.await_receipt = false;
                        t.all_queued = true;
                        t.rdma_left = 0;
                    }
                    self.tx_check(id);
                }
                PktOwner::Rx(id) => {
                    if let Some(r) = self.rx.get_mut(id) {
                        r.error.get_or_insert(OpError::SendFailed);
                    }
                    self.rx_fail(id);
                }
            },
        }
    }

    /// A REQ to `peer` failed. Before the peer's handshake, operations waiting for it may
    /// rely on that REQ (`req_sent`: the peer would answer it with a handshake) and have
    /// triggered none: provoke the handshake now, so that they start when it comes, or
    /// fail with the trigger, instead of waiting for ever.
    fn req_lost(&mut self, peer: PeerId) {
        let Some(p) = self.peers.get_mut(peer.0 as usize) else {
            return;
        };
        if p.handshake.is_some() || p.removed {
            return;
        }
        p.req_sent = false;
        if !p.waiting.is_empty() {
            self.trigger_handshake(peer);
        }
    }

    pub(super) fn send_handshake(&mut self, peer: PeerId) {
        // efa-rdm-protocol-v4 §2.1: "Upon receiving the 1st packet from a peer, an endpoint
        // must send back a handshake packet"; wire-layouts §A.5: "HEAD always sends CONNID,
        // DEVICE_VERSION and HMEM_P2P, plus HOST_ID when it is nonzero" and "Always send
        // [DEVICE_VERSION]".
        let mut r = Repr::new(PacketType::Handshake);
        let mut ei = ExtraInfo::with_words(1);
        ei.set_word(0, self.cfg.features.word());
        r.handshake = HandshakeExt {
            extra_info: ei,
            host_id: (self.cfg.host_id != 0).then_some(self.cfg.host_id),
            device_version: Some(self.cfg.device_version),
            user_recv_qp: None,
            hmem_p2p: self.cfg.send_hmem_p2p.then_some(0),
        };
        r.connid = Some(self.addr.qkey);
        self.stats.handshakes_sent += 1;
        self.peers[peer.0 as usize].handshake_sent = true;
        self.emit(peer, &r, PktOwner::Handshake);
    }

    /// Makes the peer send its HANDSHAKE: like libfabric's `efa_rdm_ep_trigger_handshake`,
    /// a zero-length EAGER_RTW, which every v4 peer handles and answers with a handshake.
    pub(super) fn trigger_handshake(&mut self, peer: PeerId) {
        let p = &mut self.peers[peer.0 as usize];
        // libfabric `efa_rdm_ep_trigger_handshake`: nothing to do once a REQ has been sent
        // (the peer answers it with a handshake).
        if p.handshake.is_some() || p.handshake_triggered || p.req_sent {
            return;
        }
        p.handshake_triggered = true;
        let r = self.req(peer, PacketType::EagerRtw);
        self.emit(peer, &r, PktOwner::Trigger);
    }
}
