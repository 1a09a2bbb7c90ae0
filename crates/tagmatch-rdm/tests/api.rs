//! The endpoint driven by hand, without the fabric: the device-facing contract.
mod common;
use common::*;
use tagmatch_rdm::{Endpoint, MrKey, OpError, OpKind, SendOpts, SendOutcome, Transmit};
use tagmatch_wire::efa::RawAddr;

fn ep(n: u8) -> Endpoint {
    Endpoint::new(
        small_cfg(),
        RawAddr {
            gid: [n; 16],
            qpn: n as u16,
            qkey: 0x1000 + n as u32,
            next: 0,
        },
    )
}

#[test]
fn send_error_fails_the_operation() {
    let mut a = ep(1);
    let b = ep(2);
    let pb = a.add_peer(b.addr());
    let op = a.send(pb, vec![1; 600], SendOpts::default()).unwrap();
    let mut tokens = Vec::new();
    while let Some(t) = a.poll_transmit() {
        if let Transmit::Send {
            token, peer, dest, ..
        } = t
        {
            assert_eq!((peer, dest), (pb, b.addr()));
            tokens.push(token);
        }
    }
    // 600 bytes in MEDIUM packets of 256 − 24 − 40 (raw address before the handshake).
    assert_eq!(tokens.len(), 4, "four MEDIUM packets");
    assert!(a.poll_completion().is_none());
    a.on_send_done(tokens[0], SendOutcome::Ok);
    a.on_send_done(tokens[1], SendOutcome::Error);
    a.on_send_done(tokens[3], SendOutcome::Ok);
    assert!(
        a.poll_completion().is_none(),
        "one packet still with the device"
    );
    a.on_send_done(tokens[2], SendOutcome::Ok);
    let c = a.poll_completion().unwrap();
    assert_eq!(
        (c.op, c.kind, c.result),
        (op, OpKind::Send, Err(OpError::SendFailed))
    );
    // A second answer for the same token is ignored and counted.
    a.on_send_done(tokens[2], SendOutcome::Ok);
    assert_eq!(a.stats().unknown_tokens, 1);
    assert_eq!(a.in_flight(), (0, 0, 0));
}

#[test]
fn again_requeues_the_same_bytes() {
    let mut a = ep(1);
    let pb = a.add_peer(ep(2).addr());
    let op = a.send(pb, vec![9; 10], SendOpts::default()).unwrap();
    let Some(Transmit::Send { token, bytes, .. }) = a.poll_transmit() else {
        panic!("expected a packet");
    };
    a.on_send_done(token, SendOutcome::Again);
    let Some(Transmit::Send {
        token: t2,
        bytes: b2,
        ..
    }) = a.poll_transmit()
    else {
        panic!("expected the packet again");
    };
    assert_eq!(bytes, b2);
    assert_ne!(token, t2);
    a.on_send_done(t2, SendOutcome::Ok);
    assert_eq!(a.poll_completion().unwrap().op, op);
    assert_eq!(a.stats().tx_again, 1);
    assert_eq!(a.stats().tx_packets, 1);
}

#[test]
fn application_memory_registration_and_release() {
    let mut a = ep(1);
    let h = a.register_memory(vec![5; 100]);
    assert_eq!(
        a.poll_transmit(),
        Some(Transmit::Register {
            mem: h,
            len: 100,
            remote: true
        })
    );
    assert_eq!(a.mem_key(h), None, "pending");
    let k = MrKey {
        addr: 0x1000,
        key: 77,
    };
    a.on_register_done(h, Ok(k));
    assert_eq!(a.mem_key(h), Some(Ok(k)));
    assert_eq!(a.mem_by_key(77), Some((h, 0x1000)));
    a.memory_mut(h).unwrap()[0] = 6;
    assert_eq!(a.release_memory(h).unwrap()[..2], [6, 5]);
    assert_eq!(a.poll_transmit(), Some(Transmit::Deregister { key: 77 }));
    assert_eq!(a.mem_by_key(77), None);
    // A failed registration is reported.
    let h2 = a.register_memory(vec![0; 8]);
    a.poll_transmit();
    a.on_register_done(h2, Err(()));
    assert_eq!(a.mem_key(h2), Some(Err(())));
}

#[test]
fn calls_with_bad_arguments_are_typed_errors() {
    let mut a = ep(1);
    let nobody = tagmatch_rdm::PeerId(7);
    assert_eq!(
        a.send(nobody, vec![], SendOpts::default()),
        Err(tagmatch_rdm::CallError::UnknownPeer)
    );
    assert_eq!(
        a.recv(Some(nobody), 1),
        Err(tagmatch_rdm::CallError::UnknownPeer)
    );
    assert_eq!(
        a.cancel(tagmatch_rdm::OpId(12345)),
        Err(tagmatch_rdm::CallError::UnknownOp)
    );
}

#[test]
fn peer_table_lookups() {
    let mut a = ep(1);
    let b = ep(2);
    let pb = a.add_peer(b.addr());
    assert_eq!(
        a.add_peer(b.addr()),
        pb,
        "adding the same address twice gives the same id"
    );
    // A restarted process on the same GID and QP with a new qkey (connid) is another peer
    // (efa-rdm-protocol-v4 §4.4); the address-handle lookup still answers the first one.
    let restarted = RawAddr {
        qkey: b.addr().qkey + 1,
        ..b.addr()
    };
    let pr = a.add_peer(restarted);
    assert_ne!(pr, pb);
    assert_eq!(a.lookup_peer(&b.addr().gid, b.addr().qpn), Some(pb));
    assert_eq!(
        a.lookup_peer_exact(&restarted.gid, restarted.qpn, restarted.qkey),
        Some(pr)
    );
    assert_eq!(a.lookup_peer_exact(&restarted.gid, restarted.qpn, 7), None);
    assert_eq!(a.lookup_peer(&[9; 16], 2), None);
    assert_eq!(a.peer_addr(pr), Some(restarted));
    assert_eq!(a.peer_addr(tagmatch_rdm::PeerId(99)), None);
}
