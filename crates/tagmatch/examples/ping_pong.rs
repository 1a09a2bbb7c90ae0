//! Tagged ping-pong between two endpoints, each in its own thread.
//!
//! `cargo run -p tagmatch --example ping_pong` (in-process), or over UDP on loopback:
//! `cargo run -p tagmatch --example ping_pong -- udp`.

use std::time::{Duration, Instant};

use tagmatch::{Endpoint, MemFabric, ANY_SOURCE};

const ROUNDS: u64 = 10_000;

fn main() -> Result<(), tagmatch::Error> {
    let udp = std::env::args().nth(1).as_deref() == Some("udp");
    let fabric = MemFabric::new();
    let build = || {
        let b = Endpoint::builder();
        if udp {
            b.udp("127.0.0.1:0".parse().expect("literal address"))
                .build()
        } else {
            b.mem(&fabric).build()
        }
    };
    let mut ping = build()?;
    let mut pong = build()?;
    let pong_addr = pong.address();

    // The responder: echo every message back with the same tag.
    let responder = std::thread::spawn(move || -> Result<(), tagmatch::Error> {
        for _ in 0..ROUNDS {
            let r = pong.trecv(ANY_SOURCE, tagmatch::ANY_TAG, 64)?;
            let c = pong.wait(r)?;
            let back = c.source().expect("receives name their sender");
            let s = pong.tsend(back, c.tag, c.data)?;
            pong.wait(s)?;
        }
        pong.flush(Duration::from_secs(2))?;
        Ok(())
    });

    let peer = ping.insert_peer(&pong_addr)?;
    let start = Instant::now();
    for i in 0..ROUNDS {
        let r = ping.trecv(peer, i, 64)?;
        let s = ping.tsend(peer, i, i.to_le_bytes().to_vec())?;
        ping.wait(s)?;
        let c = ping.wait(r)?;
        assert_eq!(c.data, i.to_le_bytes());
    }
    let rtt = start.elapsed() / ROUNDS as u32;
    // The responder's last send completes when this side acknowledges it: keep
    // progressing until nothing is owed to the peer (over UDP, the acknowledgement of the
    // last reply), then let the responder finish. Without it the responder's last send
    // waits for an acknowledgement that never comes and fails after the peer timeout.
    ping.flush(Duration::from_secs(2))?;
    responder.join().expect("responder thread")?;
    println!(
        "{ROUNDS} round trips of 8 bytes over {}: {:.2} µs per round trip",
        ping.transport(),
        rtt.as_secs_f64() * 1e6
    );
    Ok(())
}
