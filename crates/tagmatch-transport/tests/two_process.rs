//! Two processes on 127.0.0.1 exchanging every subprotocol through the UDP device: the test
//! re-executes its own binary as the responder (selected by an environment variable).
mod common;

use std::time::Duration;

use common::*;
use tagmatch_transport::UdpAddr;

/// The child side: runs only when re-executed with a role.
#[test]
fn child_entry() {
    child_main();
}

#[test]
fn two_processes_every_subprotocol_over_udp() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    let child = spawn_child(
        None,
        "child_entry",
        &[
            (ROLE_ENV, "responder".into()),
            (BIND_ENV, "127.0.0.1:0".into()),
        ],
    )
    .expect("spawn the responder");
    let mut child = ChildGuard(child);
    let addr = read_line_with(&mut child.0, "ADDR ").expect("the responder printed its address");
    let peer: UdpAddr = addr.parse().expect("printed address parses");
    let mut a = udp_node("127.0.0.1:0", 1500, config());
    let mut b = udp_node("127.0.0.1:0", 1500, config_emulated());
    let res = requester(&mut a, &mut b, peer.to_raw(), 0);
    let st = a.device().stats();
    println!("requester A stats: {st:?}");
    let child_res = wait_child(&mut child.0, Duration::from_secs(30));
    let log = res.expect("requester");
    child_res.expect("responder process");
    println!("{} operations: {}", log.len(), log.join(" "));
    assert!(
        st.sock.send_calls < st.sock.tx_datagrams,
        "sendmmsg batches datagrams"
    );
}
