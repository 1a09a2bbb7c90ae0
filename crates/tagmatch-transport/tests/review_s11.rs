//! Review (session 11) of `Node::send_now` over the UDP device: completions it moves
//! into the node must keep the next `progress` from blocking, as they did when that
//! `progress` moved them itself.

use std::time::Duration;

use tagmatch_rdm::{Config, SendOpts};
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::Node;

fn node() -> Node<UdpDevice> {
    let u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    Node::new(Config::default(), UdpDevice::bind(u).expect("bind"))
}

fn polls(n: &Node<UdpDevice>) -> u64 {
    n.device().stats().sock.poll_calls
}

/// Progresses both until `f` holds.
fn until(
    a: &mut Node<UdpDevice>,
    b: &mut Node<UdpDevice>,
    mut f: impl FnMut(&mut Node<UdpDevice>) -> bool,
) {
    for _ in 0..200_000 {
        a.progress(Some(Duration::ZERO)).expect("progress");
        b.progress(Some(Duration::ZERO)).expect("progress");
        if f(b) {
            return;
        }
    }
    panic!("never");
}

#[test]
fn completions_moved_by_send_now_keep_the_next_progress_from_blocking() {
    let (mut a, mut b) = (node(), node());
    let ab = a.add_peer(b.addr());
    let ba = b.add_peer(a.addr());
    // b holds a's message as unexpected.
    a.endpoint_mut()
        .tsend(ab, 7, vec![7; 8], SendOpts::default())
        .expect("tsend");
    until(&mut a, &mut b, |b| {
        b.endpoint_mut().tprobe(Some(ba), 7, 0).is_some()
    });
    // Let every frame be acknowledged (the delayed ACKs), both ways.
    for _ in 0..50 {
        a.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        b.progress(Some(Duration::from_millis(1)))
            .expect("progress");
    }
    while a.poll_completion().is_some() {}
    while b.poll_completion().is_some() {}
    // The receive meets it at once; a send follows, and `send_now` (what the facade
    // calls after a send) moves the receive's completion into the node.
    let r = b.endpoint_mut().trecv(Some(ba), 7, 0, 8).expect("trecv");
    b.endpoint_mut()
        .tsend(ba, 8, vec![8; 8], SendOpts::default())
        .expect("tsend");
    b.send_now().expect("send_now");
    let before = polls(&b);
    let ready = b.progress(Some(Duration::from_secs(5))).expect("progress");
    assert!(ready >= 1);
    assert_eq!(
        polls(&b),
        before,
        "a completion was ready: no wait in poll(2)"
    );
    assert_eq!(b.poll_completion().expect("completion").op, r);
}
