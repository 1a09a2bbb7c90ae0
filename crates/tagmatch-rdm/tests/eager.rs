//! Handshake and eager messages.
mod common;
use common::*;
use tagmatch_rdm::{OpKind, Protocol, SendOpts};
use tagmatch_wire::efa::{flags, PacketType as T};

#[test]
fn eager_tagged_first_message_then_handshake() {
    let (mut fab, a, b, ab, _) = pair(1, small_cfg(), small_cfg(), false);
    let r = fab.ep(b).trecv(None, 7, 0, 64).unwrap();
    let s = fab
        .ep(a)
        .tsend(ab, 7, payload(40, 1), SendOpts::default())
        .unwrap();
    fab.drive();
    assert_eq!(fab.ep(a).protocol_of(s), Some(Protocol::Eager));
    // b answers the first packet with its handshake, and a answers that with its own.
    assert_eq!(
        fab.sequence(),
        vec![(a, T::EagerTagRtm), (b, T::Handshake), (a, T::Handshake)]
    );
    // Before the handshake: raw address, no connid.
    assert_ne!(fab.log[0].flags & flags::REQ_OPT_RAW_ADDR_HDR, 0);
    assert_eq!(fab.log[0].flags & flags::CONNID_HDR, 0);
    let ca = fab.completions(a);
    let cb = fab.completions(b);
    assert_eq!(done(&ca, s).result, Ok(()));
    let c = done(&cb, r);
    assert_eq!(
        (c.kind, c.result, c.tag, c.len),
        (OpKind::Recv, Ok(()), 7, 40)
    );
    assert_eq!(c.data[..40], payload(40, 1)[..]);
    assert!(fab.wire_errors.is_empty(), "{:?}", fab.wire_errors);
}
