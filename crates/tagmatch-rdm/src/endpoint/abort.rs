//! Ending operations the peer does not finish: [`Endpoint::abort`], [`Endpoint::remove_peer`],
//! and dropping a claimed message ([`Endpoint::discard`]).
//!
//! The endpoint has no clock (sans-IO, like quinn-proto): it cannot tell a slow peer from
//! one that stopped answering, and EFA RDM v4 has no packet that refuses an RTR or an RTA,
//! nor one that tells a long-read sender its receiver gave up (PEER_ERROR is not part of
//! v4). The owner, which has a clock, decides that an operation waited long enough and
//! ends it here; every resource the operation held is released, and what the device still
//! does for it (a registration not answered, RDMA operations in flight) is released when
//! the device answers. Late packets for an ended operation name an id that is stale (the
//! slab's generation, `GenSlab`) and are dropped and counted like any packet for a
//! finished operation (`Stats::rx_unknown_op`; a late segment of an ended receive's
//! message is a stale `msg_id`, `Stats::rx_reorder_rejected`).

use super::*;

impl Endpoint {
    /// Ends an operation in flight — a send of any subprotocol, a write, a read, an atomic
    /// or a receive (posted, or matched and still receiving) — with a completion carrying
    /// [`OpError::Aborted`], whatever its state: waiting for the peer's handshake, for a
    /// CTS, an EOR, a RECEIPT, a READRSP or an ATOMRSP, for a registration or an RDMA
    /// operation.
    ///
    /// For operations the peer leaves waiting for ever: a read or a fetch/compare atomic
    /// the responder refused (EFA RDM v4 has no error answer), a long-read towards a
    /// receiver that could not read it and has no READ_NACK, a long-CTS transfer whose
    /// peer stopped answering. The endpoint has no clock: when to give up is the owner's
    /// decision.
    ///
    /// Everything the operation held is released: its slot, its buffer (handed back in
    /// the completion's `data` for a receive or read whose buffer the device no longer
    /// uses; otherwise kept until the device answers, then freed and deregistered), its
    /// use of a caller's region ([`Endpoint::mem_users`]), its posted receive in the
    /// matching engine, its place in the queue of operations waiting for the peer's
    /// handshake. Packets of it already handed to the device are not recalled, and
    /// nothing is sent to the peer (v4 has no cancel packet): what the peer already
    /// received or applied stays, and a peer still sending for the operation has its
    /// packets dropped and counted (`Stats::rx_unknown_op`), never completing anything
    /// twice. A peer that waits for this side (a long-CTS or long-read sender whose
    /// receive was aborted) waits until its own owner ends it.
    ///
    /// Errors: [`CallError::UnknownOp`] if `op` is not in flight (never issued, already
    /// completed or aborted).
    pub fn abort(&mut self, op: OpId) -> Result<(), CallError> {
        // A walk over the operations (abort is rare): no op-to-id map kept up to date on
        // every operation. The responder-side operations (of a peer's read or write)
        // have ids the application never saw: not found here.
        let tx = self
            .tx
            .iter()
            .find_map(|(id, t)| (t.op == op && t.kind != TxKind::ReadResponder).then_some(id));
        if let Some(id) = tx {
            self.abort_tx(id);
            return Ok(());
        }
        let rx = self
            .rx
            .iter()
            .find_map(|(id, r)| (r.op == op && r.kind != RxKind::WriteTarget).then_some(id));
        match rx {
            Some(id) => {
                self.abort_rx(id);
                Ok(())
            }
            None => Err(CallError::UnknownOp),
        }
    }

    /// Removes `peer` from the address book (`fi_av_remove`): every operation with it
    /// ends as [`Endpoint::abort`] ends one — sends, writes, reads and atomics to it,
    /// receives matched to its messages, receives posted for it alone (`src` = `peer`),
    /// and the responder side of its reads and writes here — its unexpected and
    /// out-of-order messages leave the matching engine (their buffered bytes freed), and
    /// the peer is forgotten: [`Endpoint::peer_addr`] answers `None`, operations naming it
    /// are refused with [`CallError::UnknownPeer`], packets to it that the device has not
    /// posted yet ([`SendOutcome::Again`]) are not posted again.
    ///
    /// A message of the peer already claimed ([`Endpoint::mprobe`]) keeps its claim; its
    /// receive ([`Endpoint::mrecv`]) completes with [`OpError::Aborted`].
    ///
    /// Its id is not given to another peer: inserting the same address again
    /// ([`Endpoint::add_peer`], or a REQ carrying it, efa-rdm-protocol-v4 §2.2) makes a new
    /// peer, with a fresh `msg_id` sequence. A later packet from the address is handled
    /// like one from any unknown address, also when the owner still reports the removed
    /// id (the address is looked up again): a REQ with the raw-address header inserts it
    /// again (within [`Config::max_peers`]), anything else is dropped and counted
    /// (`Stats::rx_unknown_sender`).
    ///
    /// Returns how many application operations ended with [`OpError::Aborted`] (the
    /// responder-side operations end silently: they have no completion).
    pub fn remove_peer(&mut self, peer: PeerId) -> Result<usize, CallError> {
        self.check_peer(peer)?;
        let mut ended = 0;
        let tx: Vec<(u32, bool)> = self
            .tx
            .iter()
            .filter(|(_, t)| t.peer == peer)
            .map(|(id, t)| (id, t.kind != TxKind::ReadResponder))
            .collect();
        for (id, app) in tx {
            ended += usize::from(app);
            self.abort_tx(id);
        }
        let rx: Vec<(u32, bool)> = self
            .rx
            .iter()
            .filter(|(_, r)| r.peer == Some(peer))
            .map(|(id, r)| (id, r.kind != RxKind::WriteTarget))
            .collect();
        for (id, app) in rx {
            ended += usize::from(app);
            self.abort_rx(id);
        }
        // The posted receives naming it, its unexpected messages, its messages held out
        // of order, and its sequence state.
        let mut purged = Vec::new();
        self.engine.purge_peer(peer.0, |p| purged.push(p));
        for p in purged {
            match p {
                tagmatch_engine::Purged::Recv(_, id) => {
                    if let Some(r) = self.rx.get_mut(id) {
                        // Already out of the engine.
                        r.posted = None;
                        ended += 1;
                        self.abort_rx(id);
                    }
                }
                tagmatch_engine::Purged::Unexpected(m) | tagmatch_engine::Purged::Held(m) => {
                    self.inbound.try_remove(m.msg as usize);
                }
            }
        }
        // Budget freed, and the receives that named it gone.
        self.admission += 1;
        // Its messages claimed and not received yet: received as aborted.
        for (_, ib) in self.inbound.iter_mut() {
            if ib.peer == peer {
                ib.aborted = true;
                ib.data = Vec::new();
            }
        }
        // Packets to it the device has not answered: not posted again on `Again`.
        for (_, s) in self.sends.iter_mut() {
            if s.peer == peer {
                s.owner = PktOwner::Aborted;
            }
        }
        let addr = self.peers[peer.0 as usize].addr;
        self.peers[peer.0 as usize] = Peer {
            removed: true,
            ..Peer::new(addr, self.cfg.initial_msg_id)
        };
        self.live_peers = self.live_peers.saturating_sub(1);
        self.by_addr.remove(&(addr.gid, addr.qpn, addr.qkey));
        let ah = (addr.gid, addr.qpn);
        if self.by_ah.get(&ah) == Some(&peer) {
            // The device's look-up now finds the next live peer on this GID and QPN (a
            // QP another process reused, efa-rdm-protocol-v4 §4.4), if there is one.
            match self
                .peers
                .iter()
                .position(|p| !p.removed && (p.addr.gid, p.addr.qpn) == ah)
            {
                Some(i) => self.by_ah.insert(ah, PeerId(i as u32)),
                None => self.by_ah.remove(&ah),
            };
        }
        self.stats.peers_removed += 1;
        tracing::debug!(peer = peer.0, ended, "peer removed");
        Ok(ended)
    }

    /// Drops a claimed message ([`Endpoint::tmprobe`], [`Endpoint::mprobe`]) without
    /// receiving it (libfabric's `FI_CLAIM | FI_DISCARD`): its buffered bytes are freed
    /// and its budget returned. Later packets of it are dropped and counted. The sender is
    /// not told: a long-CTS or long-read sender then waits for a CTS or an EOR until its
    /// owner ends it.
    ///
    /// Errors: [`CallError::UnknownOp`] if the claim is stale (already received or
    /// discarded).
    pub fn discard(&mut self, claim: Claim) -> Result<(), CallError> {
        let m = self
            .engine
            .mrecv(claim.0)
            .map_err(|_| CallError::UnknownOp)?;
        self.admission += 1;
        let idx = m.msg as usize;
        if let Some(ib) = self.inbound.try_remove(idx) {
            if let Some(p) = self.peers.get_mut(ib.peer.0 as usize) {
                if p.msgs.get(&ib.msg_id) == Some(&Slot::Pending(idx)) {
                    p.msgs.remove(&ib.msg_id);
                }
            }
        }
        Ok(())
    }

    /// Ends TX op `id` (see [`Endpoint::abort`]); an application operation completes with
    /// [`OpError::Aborted`].
    pub(super) fn abort_tx(&mut self, id: u32) {
        let Some(t) = self.tx.remove(id) else { return };
        if let Some(p) = self.peers.get_mut(t.peer.0 as usize) {
            p.waiting
                .retain(|w| !matches!(w, Waiting::Tx(x) if *x == id));
        }
        if let Some(r) = self.mem.get_mut(t.mem) {
            // A send from a caller's region waiting for its registration.
            r.reg_waiters.retain(|&x| x != id);
        }
        self.detach_packets(PktOwner::Tx(id));
        let uses = self.detach_rdmas(RdmaOwner::Tx(id), Some(t.mem));
        let _ = self.release_region(t.mem, t.borrowed, uses);
        let kind = match t.kind {
            TxKind::Send { .. } => OpKind::Send,
            TxKind::Write => OpKind::Write,
            TxKind::AtomicWrite => OpKind::AtomicWrite,
            TxKind::ReadResponder => return,
        };
        self.stats.aborted += 1;
        tracing::debug!(op = t.op.0, ?kind, "aborted");
        self.completions.push_back(Completion {
            op: t.op,
            kind,
            result: Err(OpError::Aborted),
            data: Vec::new(),
            len: t.len,
            tag: t.tag,
            src: None,
            cq_data: None,
        });
    }

    /// Ends RX op `id` (see [`Endpoint::abort`]); an application operation completes with
    /// [`OpError::Aborted`].
    pub(super) fn abort_rx(&mut self, id: u32) {
        let Some(r) = self.rx.remove(id) else { return };
        if let Some(h) = r.posted {
            // Not matched: out of the matching engine.
            let _ = self.engine.cancel(h);
        }
        if let Some(p) = r.peer.and_then(|p| self.peers.get_mut(p.0 as usize)) {
            // Later segments of its message find no receive: dropped as stale.
            if p.msgs.get(&r.msg_id) == Some(&Slot::Matched(id)) {
                p.msgs.remove(&r.msg_id);
            }
            // A fetch/compare atomic waiting for the peer's handshake.
            p.waiting
                .retain(|w| !matches!(w, Waiting::Rta(x, _) if *x == id));
        }
        self.detach_packets(PktOwner::Rx(id));
        // A write target's RDMA reads land in application regions it does not hold.
        let local = r.mem.filter(|_| r.kind != RxKind::WriteTarget);
        let uses = self.detach_rdmas(RdmaOwner::Rx(id), local);
        let data = match r.mem {
            Some(m) => {
                if let Some(g) = self.mem.get_mut(m) {
                    // A receive into a caller's region waiting for its registration.
                    g.rx_waiters.retain(|&x| x != id);
                }
                self.release_region(m, r.borrowed, uses)
            }
            None => Vec::new(),
        };
        let kind = match r.kind {
            RxKind::Recv => OpKind::Recv,
            RxKind::ReadReq | RxKind::DirectRead => OpKind::Read,
            RxKind::AtomicResp(k) => k,
            RxKind::WriteTarget => return,
        };
        self.stats.aborted += 1;
        tracing::debug!(op = r.op.0, ?kind, "aborted");
        self.completions.push_back(Completion {
            op: r.op,
            kind,
            result: Err(OpError::Aborted),
            data,
            len: r.msg_len,
            tag: r.tag,
            src: r.peer,
            cq_data: r.cq_data,
        });
    }

    /// Packets of `owner` the device has not answered yet: theirs no more (their answers
    /// are ignored, an `Again` is not posted again).
    fn detach_packets(&mut self, owner: PktOwner) {
        for (_, s) in self.sends.iter_mut() {
            if s.owner == owner {
                s.owner = PktOwner::Aborted;
            }
        }
    }

    /// RDMA operations of `owner` in flight: each keeps a use of region `local` (the
    /// operation's buffer) until the device answers it. Returns how many there are.
    fn detach_rdmas(&mut self, owner: RdmaOwner, local: Option<usize>) -> u32 {
        let mut n = 0;
        for o in self.rdmas.values_mut() {
            if *o == owner {
                *o = RdmaOwner::Detached(local);
                n += 1;
            }
        }
        n
    }

    /// Releases an ended operation's buffer, region `idx`. `borrowed`: the caller's
    /// region, of which the operation held one use; its `uses` RDMA operations in flight
    /// each keep one until answered. Otherwise the operation's own buffer: freed
    /// (deregistered) and its bytes returned, unless the device still uses it (a
    /// registration not answered, RDMA operations in flight): then it is an orphan,
    /// emptied now and freed when the device is done with it.
    fn release_region(&mut self, idx: usize, borrowed: bool, uses: u32) -> Vec<u8> {
        let Some(r) = self.mem.get_mut(idx) else {
            return Vec::new();
        };
        if borrowed {
            r.users = r.users.saturating_sub(1).saturating_add(uses);
            return Vec::new();
        }
        if r.reg == RegState::Pending || uses > 0 {
            r.owner = Owner::Orphan;
            r.users = uses;
            r.bytes = Vec::new();
            return Vec::new();
        }
        self.free_region(idx)
    }

    /// An RDMA operation of an ended operation finished: one use of region `idx` less.
    pub(super) fn release_use(&mut self, idx: usize) {
        if let Some(r) = self.mem.get_mut(idx) {
            r.users = r.users.saturating_sub(1);
        }
        self.reap(idx);
    }

    /// Frees orphan region `idx` once the device no longer uses it.
    pub(super) fn reap(&mut self, idx: usize) {
        let done = self.mem.get(idx).is_some_and(|r| {
            r.owner == Owner::Orphan && r.users == 0 && r.reg != RegState::Pending
        });
        if done {
            self.free_region(idx);
        }
    }
}
