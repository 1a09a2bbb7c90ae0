//! What the endpoint emits is byte-identical to the wire-layouts §E vectors (libfabric's
//! structs, padding zeroed).
mod common;
use common::*;
use tagmatch_rdm::testing::Fabric;
use tagmatch_rdm::{Config, SendOpts};
use tagmatch_wire::efa::{PacketType as T, RawAddr};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const CONNID: u32 = 0xA1B2_C3D4;

fn addr(last: u8, qkey: u32) -> RawAddr {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[15] = last;
    RawAddr {
        gid,
        qpn: 16,
        qkey,
        next: 0,
    }
}

/// `a` has connid 0xA1B2C3D4 (the §E common value); `b` answers with a handshake.
fn setup(ca: Config, cb: Config) -> (Fabric, usize, usize, tagmatch_rdm::PeerId) {
    let mut fab = Fabric::new(1);
    fab.reorder = false;
    fab.record_bytes = true;
    let a = fab.add_with_addr(ca, addr(1, CONNID));
    let b = fab.add_with_addr(cb, addr(2, CONNID ^ 0xffff));
    let ab = fab.connect(a, b);
    (fab, a, b, ab)
}

fn last_from(fab: &Fabric, from: usize, ty: T) -> Vec<u8> {
    fab.log
        .iter()
        .rev()
        .find(|r| r.from == from && r.pkt_type == ty)
        .unwrap()
        .bytes
        .clone()
}

#[test]
fn handshake_is_v43() {
    // V43: f = CONNID|HOST_ID|DEVVER, extra_info[0] = 0x5b, host_id, devver 0xEFA1.
    let mut ca = Config {
        host_id: 0x0123_4567_89ab_cdef,
        device_version: 0xEFA1,
        ..Config::default()
    };
    ca.features.rdma_write = false;
    assert_eq!(ca.features.word(), 0x5b);
    let (mut fab, a, b, _) = setup(ca, Config::default());
    let ba = fab.connect(b, a);
    fab.ep(b).send(ba, vec![], SendOpts::default()).unwrap();
    fab.drive();
    assert_eq!(
        last_from(&fab, a, T::Handshake),
        hex("0904038004000000 5b00000000000000 d4c3b2a100000000 efcdab8967452301 a1ef000000000000")
    );
}

#[test]
fn eager_rtm_is_v04_v05_and_v01() {
    let ca = Config {
        initial_msg_id: 1,
        ..Config::default()
    };
    let (mut fab, a, b, ab) = setup(ca, Config::default());
    // Get b's handshake (it requests the connid header) with a first message, msg_id 1.
    let ba = fab.connect(b, a);
    let _ = ba;
    fab.ep(a)
        .tsend(ab, 0x1122_3344_5566_7788, vec![], SendOpts::default())
        .unwrap();
    fab.drive();
    // That first one carried the raw address instead (no handshake yet): 8 + 8 + 40 bytes.
    let first = last_from(&fab, a, T::EagerTagRtm);
    assert_eq!(first.len(), 16 + 40);
    assert_eq!(&first[16..20], &36u32.to_le_bytes());
    assert_eq!(&first[20..52], &addr(1, CONNID).to_bytes());
    // V04 is msg_id 1 with CQ data and connid: restart the numbering on a fresh pair whose
    // handshake arrived through a first untagged message.
    let ca = Config {
        initial_msg_id: 0,
        ..Config::default()
    };
    let (mut fab, a, b, ab) = setup(ca, Config::default());
    fab.ep(b).recv(None, 8).unwrap();
    fab.ep(a).send(ab, vec![], SendOpts::default()).unwrap(); // msg_id 0
    fab.drive();
    let opts = SendOpts {
        cq_data: Some(0xCAFE_BABE_1234_5678),
        ..SendOpts::default()
    };
    fab.ep(a)
        .tsend(ab, 0x1122_3344_5566_7788, vec![], opts)
        .unwrap(); // msg_id 1
    fab.drive();
    assert_eq!(
        last_from(&fab, a, T::EagerTagRtm),
        hex("41040e8001000000 8877665544332211 78563412bebafeca d4c3b2a1")
    );
    fab.ep(a).send(ab, vec![], SendOpts::default()).unwrap(); // msg_id 2
    fab.drive();
    assert_eq!(
        last_from(&fab, a, T::EagerMsgRtm),
        hex("4004048002000000 d4c3b2a1")
    );
    let _ = b;

    // V01: a peer that does not request connid gets neither header after its handshake.
    let cb = feats(|f| f.request_connid_header = false);
    let ca = Config {
        initial_msg_id: 0,
        ..Config::default()
    };
    let (mut fab, a, b, ab) = setup(ca, cb);
    fab.ep(b).recv(None, 8).unwrap();
    fab.ep(a).send(ab, vec![], SendOpts::default()).unwrap(); // msg_id 0, raw address
    fab.drive();
    fab.ep(a).send(ab, vec![], SendOpts::default()).unwrap(); // msg_id 1
    fab.drive();
    assert_eq!(last_from(&fab, a, T::EagerMsgRtm), hex("4004040001000000"));
}
