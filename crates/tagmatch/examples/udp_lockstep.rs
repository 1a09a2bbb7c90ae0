//! An 8-byte tagged ping-pong between two UDP endpoints on loopback, both driven by one
//! thread in lockstep, as `tagmatch perf`'s `tag_lat` loop over the protocol does it: the
//! client sends from one registered region, then posts the reply's receive into a local
//! region; the server receives every message into its own local region and answers from
//! a registered region, taking its completions with `poll_completion`. A loopback
//! datagram is in the peer's socket when `sendmsg` returns, so (with no other thread to
//! wait for) every round trip takes the same path and the same number of `progress`
//! calls: run under `valgrind --tool=callgrind` with two round-trip counts, the
//! difference of the instruction totals divided by the difference of the counts is the
//! user-space cost of one round trip, both sides together, without the busy-poll misses
//! of two processes that make a two-process profile vary with scheduling.
//!
//! `cargo run --release -p tagmatch --example udp_lockstep -- 4000`

use tagmatch::{Endpoint, OpKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse().map_err(|e| format!("round count {s:?}: {e}"))?,
        None => 4000,
    };
    const SIZE: usize = 8;
    const TAG: u64 = 7;
    let local = "127.0.0.1:0".parse()?;
    let mut client = Endpoint::builder().udp(local).build()?;
    let mut server = Endpoint::builder().udp(local).build()?;
    let to_server = client.insert_peer(&server.address())?;
    let to_client = server.insert_peer(&client.address())?;
    let c_tx = client.register(vec![0xa5u8; SIZE])?;
    let c_rx = client.register_local(vec![0u8; SIZE])?;
    let s_tx = server.register(vec![0x5au8; SIZE])?;
    let s_rx = server.register_local(vec![0u8; SIZE])?;
    // The server's completions are polled in order (`poll_completion`), not by request.
    let _ = server.trecv_region(to_client, TAG, &s_rx, 0..SIZE)?;
    let mut sends = std::collections::VecDeque::new();
    let mut progress_calls = 0u64;
    for _ in 0..rounds {
        sends.push_back(client.tsend_region(to_server, TAG, &c_tx, 0..SIZE)?);
        let r = client.trecv_region(to_server, TAG, &c_rx, 0..SIZE)?;
        loop {
            server.progress()?;
            progress_calls += 1;
            while let Some(c) = server.poll_completion() {
                if c.kind == OpKind::Recv {
                    c.into_result()?;
                    let _ = server.tsend_region(to_client, TAG, &s_tx, 0..SIZE)?;
                    let _ = server.trecv_region(to_client, TAG, &s_rx, 0..SIZE)?;
                } else {
                    c.into_result()?;
                }
            }
            client.progress()?;
            if let Some(c) = client.take_completion(r) {
                c.into_result()?;
                break;
            }
        }
        // Send completions are taken as they come (the ACKs ride on the answers), at
        // most 8 outstanding, as `perf`'s client.
        while let Some(&s) = sends.front() {
            match client.take_completion(s) {
                Some(c) => {
                    c.into_result()?;
                    sends.pop_front();
                }
                None if sends.len() > 8 => {
                    client.wait_with(s, &mut [&mut server])?;
                    sends.pop_front();
                }
                None => break,
            }
        }
    }
    println!(
        "{rounds} round trips, {:.2} progress calls per side per round trip",
        progress_calls as f64 / rounds as f64
    );
    Ok(())
}
