//! An 8-byte tagged ping-pong between two UDP endpoints on loopback, both driven by one
//! thread in lockstep, as `tagmatch perf`'s `tag_lat` loop does it (the client posts a
//! receive and sends from an owned buffer; the server answers each message with its
//! buffer). A loopback datagram is in the peer's socket when `sendmsg` returns, so (with
//! no other thread to wait for) every round trip takes the same path and the same number
//! of `progress` calls: run under `valgrind --tool=callgrind` with two round-trip counts,
//! the difference of the instruction totals divided by the difference of the counts is the
//! user-space cost of one round trip, both sides together, without the busy-poll misses
//! of two processes that make a two-process profile vary with scheduling.
//!
//! `cargo run --release -p tagmatch --example udp_lockstep -- 4000`

use tagmatch::{Endpoint, Request};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse().map_err(|e| format!("round count {s:?}: {e}"))?,
        None => 4000,
    };
    let local = "127.0.0.1:0".parse()?;
    let mut client = Endpoint::builder().udp(local).build()?;
    let mut server = Endpoint::builder().udp(local).build()?;
    let to_server = client.insert_peer(&server.address())?;
    let to_client = server.insert_peer(&client.address())?;
    const TAG: u64 = 7;
    let mut server_recv = server.trecv(to_client, TAG, 8)?;
    let mut sends: std::collections::VecDeque<(bool, Request)> = Default::default();
    let mut buf = vec![0xa5u8; 8];
    let mut progress_calls = 0u64;
    for _ in 0..rounds {
        let r = client.trecv(to_server, TAG, 8)?;
        sends.push_back((true, client.tsend(to_server, TAG, buf)?));
        buf = loop {
            server.progress()?;
            progress_calls += 1;
            if let Some(c) = server.take_completion(server_recv) {
                let data = c.into_result()?.data;
                server_recv = server.trecv(to_client, TAG, 8)?;
                sends.push_back((false, server.tsend(to_client, TAG, data)?));
            }
            client.progress()?;
            if let Some(c) = client.take_completion(r) {
                break c.into_result()?.data;
            }
        };
        // Send completions are taken as they come (the ACKs ride on the answers).
        while let Some(&(mine, s)) = sends.front() {
            let ep = if mine { &mut client } else { &mut server };
            match ep.take_completion(s) {
                Some(c) => {
                    c.into_result()?;
                    sends.pop_front();
                }
                None if sends.len() > 16 => {
                    ep.wait(s)?;
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
