//! One-sided operations: writes, reads, atomics (requester side).

use super::*;

impl Endpoint {
    /// `fi_write` of `data` to the peer's `remote`.
    ///
    /// Errors: [`CallError::UnknownPeer`], [`CallError::RemoteRange`] (the remote range
    /// runs past the end of the address space), [`CallError::TooManyOps`].
    pub fn write(
        &mut self,
        peer: PeerId,
        data: Vec<u8>,
        remote: RemoteAddr,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        check_remote_range(remote, data.len() as u64)?;
        let op = self.new_op();
        let len = data.len() as u64;
        let mem = self.new_region(data, Owner::App);
        let t = TxOp {
            cq_data: opts.cq_data,
            dc: opts.delivery_complete,
            remote: vec![RmaIov::new(remote.addr, len, remote.key)],
            ..TxOp::new(op, TxKind::Write, peer, Protocol::EagerWrite, mem, len)
        };
        let Some(id) = self.tx.insert(t) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Tx(id);
        self.tx_begin(id);
        Ok(op)
    }

    pub(super) fn start_write(&mut self, id: u32) {
        let t = &self.tx[id];
        let peer = t.peer;
        let p = &self.peers[peer.0 as usize];
        if self.cfg.direct_write
            && self.cfg.features.rdma_write
            && p.has(extra::FEATURE_RDMA_WRITE)
            && t.cq_data.is_none()
            && t.len > 0
        {
            let t = &mut self.tx[id];
            t.started = true;
            t.proto = Protocol::DirectWrite;
            let (op, m) = (t.op, t.mem);
            self.note_protocol(op, Protocol::DirectWrite);
            // The source of our own write: local.
            self.register_region(m, false);
            return;
        }
        self.start_write_emulated(id);
    }

    pub(super) fn start_write_emulated(&mut self, id: u32) {
        let t = &self.tx[id];
        let (peer, len, dc, cq) = (t.peer, t.len, t.dc, t.cq_data.is_some());
        let eager_ty = if dc {
            PacketType::DcEagerRtw
        } else {
            PacketType::EagerRtw
        };
        let eager_max = self
            .cfg
            .mtu
            .saturating_sub(self.req_hdr_len(peer, eager_ty, cq, 1)) as u64;
        let proto = if len <= eager_max {
            Protocol::EagerWrite
        } else if self.can_read(peer) && len >= self.cfg.min_read_write_size {
            Protocol::LongReadWrite
        } else {
            Protocol::LongCtsWrite
        };
        let t = &mut self.tx[id];
        t.started = true;
        t.proto = proto;
        let op = t.op;
        self.note_protocol(op, proto);
        match proto {
            Protocol::EagerWrite => {
                let t = &self.tx[id];
                let data = self.mem[t.mem].bytes.clone();
                let remote = t.remote.clone();
                let mut r = self.msg_req(id, eager_ty);
                r.rma_iov = &remote;
                let r = Repr {
                    payload: &data,
                    ..r
                };
                self.emit(peer, &r, PktOwner::Tx(id));
                self.tx_queued_all(id);
                self.tx_check(id);
            }
            Protocol::LongReadWrite => {
                let m = self.tx[id].mem;
                // The responder reads it.
                self.register_region(m, true);
            }
            _ => self.send_longcts_rtm(id, false),
        }
    }

    /// `fi_read` of `len` bytes from the peer's `remote`; the completion carries the data.
    ///
    /// Errors, before anything is allocated or sent: [`CallError::UnknownPeer`],
    /// [`CallError::ReadTooLarge`] (over [`crate::MAX_READ_SIZE`], which a responder
    /// refuses without an answer), [`CallError::RemoteRange`] (the remote range runs past
    /// the end of the address space), then [`CallError::TooManyOps`]. A read the
    /// responder refuses for reasons only it knows (a key it did not issue, a range
    /// outside the region) is not answered either: end it with [`Endpoint::abort`].
    pub fn read(
        &mut self,
        peer: PeerId,
        len: usize,
        remote: RemoteAddr,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        check_read_len(len as u64)?;
        check_remote_range(remote, len as u64)?;
        let op = self.new_op();
        let mem = self.new_region(vec![0; len], Owner::App);
        let direct = self.cfg.direct_read && self.can_read(peer) && len > 0;
        let mut r = RxOp::new(
            op,
            if direct {
                RxKind::DirectRead
            } else {
                RxKind::ReadReq
            },
        );
        r.mem = Some(mem);
        r.buf_len = len as u64;
        r.msg_len = len as u64;
        r.peer = Some(peer);
        r.matched = true;
        r.remote = Some(remote);
        r.proto = RxProto::LongCts;
        let Some(id) = self.rx.insert(r) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Rx(id);
        if direct {
            // efa-rdm-protocol-v4 §4.1: "The direct read subprotocol … does not involve a
            // REQ packet. The workflow is just for the read requester keep using RDMA read
            // on the responder."
            self.note_protocol(op, Protocol::DirectRead);
            // The destination of our own reads: local.
            self.register_region(mem, false);
        } else {
            self.start_emulated_read(id);
        }
        Ok(op)
    }

    pub(super) fn start_emulated_read(&mut self, id: u32) {
        let r = &mut self.rx[id];
        r.kind = RxKind::ReadReq;
        let (peer, len, op) = (r.peer.unwrap_or(PeerId(0)), r.msg_len, r.op);
        let remote = r.remote.unwrap_or(RemoteAddr { addr: 0, key: 0 });
        let short = len as usize <= self.cfg.mtu.saturating_sub(READRSP_HDR);
        let (ty, window, proto) = if short {
            (PacketType::ShortRtr, len, Protocol::ShortRead)
        } else {
            (
                PacketType::LongctsRtr,
                self.cts_window(peer, len, self.cfg.rx_window_packets),
                Protocol::LongCtsRead,
            )
        };
        self.note_protocol(op, proto);
        let r = &mut self.rx[id];
        r.requested = window;
        r.window_left = window;
        let iov = [RmaIov::new(remote.addr, len, remote.key)];
        // wire-layouts §A.6: "For SHORT_RTR, libfabric writes recv_length = total_len; for
        // LONGCTS_RTR it writes recv_length = the window".
        let mut req = self
            .req(peer, ty)
            .with(Field::MsgLength, len)
            .with(Field::RecvId, id as u64)
            .with(Field::RecvLength, window.min(u32::MAX as u64));
        req.rma_iov = &iov;
        self.emit(peer, &req, PktOwner::Rx(id));
    }

    /// Write atomic (`fi_atomic`).
    pub fn atomic_write(
        &mut self,
        peer: PeerId,
        args: AtomicArgs,
        remote: RemoteAddr,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        check_atomic(&args, false)?;
        check_remote_range(remote, args.operand.len() as u64)?;
        self.check_atomic_size(peer, args.operand.len(), PacketType::WriteRta)?;
        let op = self.new_op();
        let len = args.operand.len() as u64;
        let mem = self.new_region(args.operand, Owner::App);
        let t = TxOp {
            dc: opts.delivery_complete,
            remote: vec![RmaIov::new(remote.addr, len, remote.key)],
            atomic: Some((args.datatype, args.op)),
            ..TxOp::new(op, TxKind::AtomicWrite, peer, Protocol::Atomic, mem, len)
        };
        let Some(id) = self.tx.insert(t) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Tx(id);
        self.note_protocol(op, Protocol::Atomic);
        self.tx_begin(id);
        Ok(op)
    }

    pub(super) fn check_atomic_size(
        &self,
        peer: PeerId,
        n: usize,
        ty: PacketType,
    ) -> Result<(), CallError> {
        if self.req_hdr_len(peer, ty, false, 1) + n > self.cfg.mtu || n + ATOMRSP_HDR > self.cfg.mtu
        {
            return Err(CallError::AtomicTooLarge);
        }
        Ok(())
    }

    pub(super) fn start_atomic_write(&mut self, id: u32) {
        let t = &mut self.tx[id];
        t.started = true;
        let peer = t.peer;
        let p = &mut self.peers[peer.0 as usize];
        let msg_id = p.next_msg_id;
        p.next_msg_id = p.next_msg_id.wrapping_add(1);
        let t = &mut self.tx[id];
        t.msg_id = msg_id;
        let (dt, op) = t.atomic.unwrap_or((Datatype::U8, AtomicOp::Write));
        let ty = if t.dc {
            PacketType::DcWriteRta
        } else {
            PacketType::WriteRta
        };
        let remote = t.remote.clone();
        let data = self.mem[t.mem].bytes.clone();
        let mut r = self
            .req(peer, ty)
            .with(Field::MsgId, msg_id as u64)
            .with(Field::AtomicDatatype, dt as u64)
            .with(Field::AtomicOp, op as u64);
        if ty == PacketType::DcWriteRta {
            // wire-layouts §D.8: "For DC_WRITE_RTA (141) that slot holds send_id".
            r = r.with(Field::SendId, id as u64);
        }
        r.rma_iov = &remote;
        let r = Repr {
            payload: &data,
            ..r
        };
        self.emit(peer, &r, PktOwner::Tx(id));
        self.tx_queued_all(id);
        self.tx_check(id);
    }

    /// Fetch atomic (`fi_fetch_atomic`): the completion carries the target's old value.
    ///
    /// Everything the requester can check is checked here, so that the responder does
    /// not refuse it: the peer ([`CallError::UnknownPeer`]), the operation on the
    /// datatype and the operand lengths ([`CallError::Atomic`]), the remote range
    /// ([`CallError::RemoteRange`]), one packet each way ([`CallError::AtomicTooLarge`]).
    /// The responder may still refuse it for what only it knows (a key it did not issue,
    /// a range outside the region, an ATOMRSP over its MTU): EFA RDM v4 has no error
    /// answer, so the operation then waits until [`Endpoint::abort`] ends it.
    pub fn atomic_fetch(
        &mut self,
        peer: PeerId,
        args: AtomicArgs,
        remote: RemoteAddr,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        check_atomic(&args, false)?;
        check_remote_range(remote, args.operand.len() as u64)?;
        self.atomic_req(
            peer,
            args,
            remote,
            PacketType::FetchRta,
            OpKind::AtomicFetch,
        )
    }

    /// Compare atomic (`fi_compare_atomic`): the completion carries the target's old value.
    /// Checked as [`Endpoint::atomic_fetch`] is.
    pub fn atomic_compare(
        &mut self,
        peer: PeerId,
        args: AtomicArgs,
        remote: RemoteAddr,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        check_atomic(&args, true)?;
        check_remote_range(remote, args.operand.len() as u64)?;
        self.atomic_req(
            peer,
            args,
            remote,
            PacketType::CompareRta,
            OpKind::AtomicCompare,
        )
    }

    pub(super) fn atomic_req(
        &mut self,
        peer: PeerId,
        args: AtomicArgs,
        remote: RemoteAddr,
        ty: PacketType,
        kind: OpKind,
    ) -> Result<OpId, CallError> {
        let n = args.operand.len();
        let payload_len = n * if ty == PacketType::CompareRta { 2 } else { 1 };
        self.check_atomic_size(peer, payload_len, ty)?;
        let op = self.new_op();
        let mem = self.new_region(vec![0; n], Owner::App);
        let mut r = RxOp::new(op, RxKind::AtomicResp(kind));
        r.mem = Some(mem);
        r.buf_len = n as u64;
        r.msg_len = n as u64;
        r.peer = Some(peer);
        r.matched = true;
        let Some(id) = self.rx.insert(r) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Rx(id);
        self.note_protocol(op, Protocol::Atomic);
        let mut payload = args.operand;
        if let Some(c) = &args.compare {
            // efa-rdm-protocol-v4 §3.3: "the application data part of a COMPARE_RTA packet
            // contains two segments of data: buf and compare".
            payload.extend_from_slice(c);
        }
        let req = RtaReq {
            ty,
            datatype: args.datatype,
            op: args.op,
            payload,
            remote: RmaIov::new(remote.addr, n as u64, remote.key),
        };
        // efa-rdm-protocol-v4 §3.3: the RTA's `msg_id` "is used to implement ordered atomic
        // operations"; §3.2: "The field `msg_id` records the sending order". Operations
        // queued for the peer's handshake (`tx_begin`) keep this one behind them: it takes
        // its `msg_id` when it starts, in the application's order.
        if !self.peers[peer.0 as usize].waiting.is_empty() {
            self.peers[peer.0 as usize]
                .waiting
                .push(Waiting::Rta(id, req));
            self.trigger_handshake(peer);
        } else {
            self.send_rta(id, req);
        }
        Ok(op)
    }

    /// Sends the FETCH_RTA / COMPARE_RTA of RX op `id` with the peer's next `msg_id`.
    pub(super) fn send_rta(&mut self, id: u32, req: RtaReq) {
        let Some(r) = self.rx.get_mut(id) else { return };
        let Some(peer) = r.peer else { return };
        let p = &mut self.peers[peer.0 as usize];
        let msg_id = p.next_msg_id;
        p.next_msg_id = p.next_msg_id.wrapping_add(1);
        r.msg_id = msg_id;
        let iov = [req.remote];
        let mut pkt = self
            .req(peer, req.ty)
            .with(Field::MsgId, msg_id as u64)
            .with(Field::AtomicDatatype, req.datatype as u64)
            .with(Field::AtomicOp, req.op as u64)
            .with(Field::RecvId, id as u64);
        pkt.rma_iov = &iov;
        let pkt = Repr {
            payload: &req.payload,
            ..pkt
        };
        self.emit(peer, &pkt, PktOwner::Rx(id));
    }
}
