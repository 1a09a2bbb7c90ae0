//! Two processes on 127.0.0.1 exchanging every subprotocol through the UDP device: the test
//! re-executes its own binary as the responder (selected by an environment variable).
mod common;

use std::time::Duration;

use common::*;
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::{Node, UdpAddr};

fn udp_node(bind: &str, cfg: tagmatch_rdm::Config) -> Node<UdpDevice> {
    let dev = UdpDevice::bind(UdpConfig::new(bind.parse().expect("bind address"))).expect("bind");
    Node::new(cfg, dev)
}

/// The child side: runs only when re-executed with a role.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let bind = std::env::var(BIND_ENV).unwrap_or_else(|_| "127.0.0.1:0".into());
    match role.as_str() {
        "responder" => {
            let mut n = udp_node(&bind, config());
            println!("ADDR {}", n.device().udp_addr());
            let summary = responder(&mut n, 2).expect("responder");
            println!("RESPONDER {summary} {:?}", n.device().stats());
        }
        "requester" => {
            let peer: UdpAddr = std::env::var(PEER_ENV)
                .expect("peer")
                .parse()
                .expect("peer address");
            let mut a = udp_node(&bind, config());
            let mut b = udp_node(&bind, config_emulated());
            let log = requester(&mut a, &mut b, peer.to_raw()).expect("requester");
            println!("REQUESTER ok {} operations: {}", log.len(), log.join(" "));
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn two_processes_every_subprotocol_over_udp() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    let mut child = spawn_child(
        None,
        "child_entry",
        &[
            (ROLE_ENV, "responder".into()),
            (BIND_ENV, "127.0.0.1:0".into()),
        ],
    )
    .expect("spawn the responder");
    let addr = read_line_with(&mut child, "ADDR ").expect("the responder printed its address");
    let peer: UdpAddr = addr.parse().expect("printed address parses");
    let mut a = udp_node("127.0.0.1:0", config());
    let mut b = udp_node("127.0.0.1:0", config_emulated());
    let res = requester(&mut a, &mut b, peer.to_raw());
    let st = a.device().stats();
    println!("requester A stats: {st:?}");
    let child_res = wait_child(&mut child, Duration::from_secs(30));
    let log = res.expect("requester");
    child_res.expect("responder process");
    println!("{} operations: {}", log.len(), log.join(" "));
    assert!(
        st.sock.send_calls < st.sock.tx_datagrams,
        "sendmmsg batches datagrams"
    );
}
