//! The responder side of emulated writes, reads and atomics.

use super::*;

impl Endpoint {
    /// A one-sided request (RTW, RTR, RTA) refused: counted (`Stats::rx_requests_refused`,
    /// and `rx_invalid` as before). EFA RDM v4 has no packet to tell the requester
    /// (efa-rdm-protocol-v4 §3.3 and §4.1 define READRSP, CTS, EOR, ATOMRSP and RECEIPT
    /// only as success answers), so nothing is sent.
    fn refuse_request(&mut self) {
        self.stats.rx_invalid += 1;
        self.stats.rx_requests_refused += 1;
    }

    /// efa-rdm-protocol-v4 §3.3: "The emulated eager write protocol is similar to the eager
    /// message protocol, except an EAGER_RTW is used to initiate the communication."
    pub(super) fn on_eager_rtw(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let iov = pkt.rma_iov().to_vec();
        let data = pkt.payload();
        let want: u64 = iov.iter().map(|e| e.len()).fold(0, u64::saturating_add);
        if want != data.len() as u64 || !self.scatter(&iov, 0, data) {
            self.refuse_request();
            return;
        }
        if let Some(cq) = pkt.cq_data() {
            let op = self.new_op();
            self.completions.push_back(Completion {
                op,
                kind: OpKind::RemoteWrite,
                result: Ok(()),
                data: Vec::new(),
                len: data.len() as u64,
                tag: 0,
                src: Some(peer),
                cq_data: Some(cq),
            });
        }
        if pkt.pkt_type() == PacketType::DcEagerRtw {
            let receipt = self
                .ctrl(peer, PacketType::Receipt)
                .with(Field::TxId, pkt.send_id().unwrap_or(0) as u64);
            self.emit(peer, &receipt, PktOwner::None);
        }
    }

    /// efa-rdm-protocol-v4 §3.3: "The workflow of the emulated long-CTS write generally
    /// follows the long-CTS message subprotocol"; §4.1 for LONGREAD_RTW.
    pub(super) fn on_long_rtw(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let ty = pkt.pkt_type();
        let iov = pkt.rma_iov().to_vec();
        let msg_len = pkt.get(Field::MsgLength).unwrap_or(0);
        let want: u64 = iov.iter().map(|e| e.len()).fold(0, u64::saturating_add);
        // efa-rdm-protocol-v4 §3.3: each `rma_iov` entry's `key` is "the memory registration
        // key for the remote buffer, which is provided by the responder": like libfabric
        // (`efa_rdm_rma_verified_copy_iov`), refuse the request now if one names memory
        // this endpoint did not register, rather than create a write target and ask for
        // data that could only be dropped.
        if want < msg_len
            || iov
                .iter()
                .any(|e| self.resolve(e.addr(), e.len(), e.key()).is_none())
        {
            self.refuse_request();
            return;
        }
        let op = self.new_op();
        let mut r = RxOp::new(op, RxKind::WriteTarget);
        r.peer = Some(peer);
        r.matched = true;
        r.iov = iov;
        r.msg_len = msg_len;
        r.send_id = pkt.send_id().unwrap_or(0);
        r.credits = pkt.get(Field::CreditRequest).unwrap_or(0) as u32;
        r.cq_data = pkt.cq_data();
        r.dc = ty == PacketType::DcLongctsRtw;
        if ty == PacketType::LongreadRtw {
            r.proto = RxProto::LongRead;
            match pkt.read_iov() {
                Ok(v) => r.read_iov = v.to_vec(),
                Err(_) => {
                    self.refuse_request();
                    return;
                }
            }
            let total: u64 = r
                .read_iov
                .iter()
                .map(|e| e.len())
                .fold(0, u64::saturating_add);
            if total < msg_len {
                self.refuse_request();
                return;
            }
        } else {
            r.proto = RxProto::LongCts;
        }
        let Some(id) = self.rx.insert(r) else {
            self.refuse_request();
            return;
        };
        if ty != PacketType::LongreadRtw {
            let data = pkt.payload();
            if !self.rx_place(id, 0, data) {
                // (Counted in `rx_invalid` by `rx_place`.)
                self.stats.rx_requests_refused += 1;
                self.rx.remove(id);
                return;
            }
            let r = &mut self.rx[id];
            r.requested = r.got.total();
        }
        self.rx_progress(id);
    }

    /// efa-rdm-protocol-v4 §3.3: "in an emulated read communication, the responder is the
    /// sender and the requester is the receiver"; wire-layouts §D.6: READRSP carries
    /// `recv_id`@8, `send_id`@12.
    pub(super) fn on_rtr(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let iov = pkt.rma_iov().to_vec();
        let len = pkt.get(Field::MsgLength).unwrap_or(0);
        let recv_id = pkt.recv_id().unwrap_or(0);
        // efa-rdm-protocol-v4 §3.3 table 3.10: in a SHORT_RTR offset 20 is `padding`
        // (wire-layouts §D.7: libfabric writes total_len there), so the short read's window
        // is the whole length; only LONGCTS_RTR carries one ("serves the same functionality
        // as the first CTS packet").
        let window = match pkt.pkt_type() {
            PacketType::ShortRtr => len,
            _ => pkt.get(Field::RecvLength).unwrap_or(0),
        };
        // efa-rdm-protocol-v4 §3.3: "the requester sends a short RTR packet to the
        // responder and the responder sends a READRSP packet back to the requester" — its
        // only answer, a success: a refused RTR is not answered. The largest read served
        // is `MAX_READ_SIZE`, the rule `Endpoint::read` applies to its requests (a
        // requester of this crate never sends one refused for its length); another's
        // waits until its owner aborts it.
        if check_read_len(len).is_err() || (window == 0 && len > 0) {
            self.refuse_request();
            return;
        }
        let Some(data) = self.gather(&iov, 0, len) else {
            self.refuse_request();
            return;
        };
        let op = self.new_op();
        let mem = self.new_region(data, Owner::App);
        let t = TxOp {
            window_end: window,
            peer_recv_id: recv_id,
            started: true,
            ..TxOp::new(
                op,
                TxKind::ReadResponder,
                peer,
                Protocol::LongCtsRead,
                mem,
                len,
            )
        };
        let Some(id) = self.tx.insert(t) else {
            self.free_region(mem);
            self.refuse_request();
            return;
        };
        self.mem[mem].owner = Owner::Tx(id);
        // The READRSP carries the first segment and tells the requester our id, which its
        // later CTS packets name.
        let n = (self.cfg.mtu.saturating_sub(READRSP_HDR) as u64)
            .min(len)
            .min(window);
        let first = self.mem[mem].bytes[..n as usize].to_vec();
        let r = self
            .ctrl(peer, PacketType::ReadRsp)
            .with(Field::RecvId, recv_id as u64)
            .with(Field::SendId, id as u64)
            .with(Field::SegLength, n);
        let r = Repr {
            payload: &first,
            ..r
        };
        self.emit(peer, &r, PktOwner::Tx(id));
        self.tx[id].next_offset = n;
        self.tx_pump(id);
    }

    /// efa-rdm-protocol-v4 §3.3: "The field `msg_id` … is used to implement ordered atomic
    /// operations" — RTAs reach here in `msg_id` order; FETCH/COMPARE are answered with an
    /// ATOMRSP carrying the old value.
    pub(super) fn process_rta(&mut self, ib_idx: usize) {
        let Some(ib) = self.inbound.try_remove(ib_idx) else {
            return;
        };
        let peer = ib.peer;
        self.peers[peer.0 as usize].msgs.remove(&ib.msg_id);
        let Some(rta) = ib.rta else { return };
        let result = (|| {
            let dt = Datatype::from_wire(rta.datatype)
                .ok_or(atomic::AtomicError::Datatype(rta.datatype))?;
            let op = AtomicOp::from_wire(rta.op).ok_or(atomic::AtomicError::Op(rta.op))?;
            let n = rta.buf.len() as u64;
            let mut target = self
                .gather(&rta.iov, 0, n)
                .ok_or(atomic::AtomicError::Length)?;
            let old = atomic::apply(dt, op, &mut target, &rta.buf, rta.compare.as_deref())?;
            if !self.scatter(&rta.iov, 0, &target) {
                return Err(atomic::AtomicError::Length);
            }
            Ok(old)
        })();
        let old = match result {
            Ok(v) => v,
            Err(e) => {
                // efa-rdm-protocol-v4 §3.3: "that responder will send an ATOMRSP
                // (atomic response) packet back" — its only answer, a success: a refused
                // fetch/compare is not answered, and its requester waits until its owner
                // aborts it (`Endpoint::atomic_fetch` checks what the requester can).
                tracing::debug!(?e, "atomic refused");
                self.refuse_request();
                return;
            }
        };
        match rta.ty {
            PacketType::FetchRta | PacketType::CompareRta => {
                let r = self
                    .ctrl(peer, PacketType::AtomRsp)
                    .with(Field::RecvId, rta.id as u64)
                    .with(Field::SegLength, old.len() as u64);
                let r = Repr { payload: &old, ..r };
                self.emit(peer, &r, PktOwner::None);
            }
            PacketType::DcWriteRta => {
                let r = self
                    .ctrl(peer, PacketType::Receipt)
                    .with(Field::TxId, rta.id as u64)
                    .with(Field::MsgId, ib.msg_id as u64);
                self.emit(peer, &r, PktOwner::None);
            }
            _ => {}
        }
    }
}
