//! A receiver that is not ready: its memory budget holds two unexpected messages, a sender
//! sends forty. The receiver refuses the rest (receiver not ready) and its device holds
//! them; while it waits one second for an operation of its own, its `progress` blocks in
//! the device instead of handing the held packets in again and again. Then it receives,
//! and every message arrives in order. Prints the wait's progress calls, refusals and CPU
//! time (Linux: from `/proc/thread-self/stat`).
//!
//! `cargo run --release -p tagmatch --example not_ready`

use std::time::{Duration, Instant};

use tagmatch::{Endpoint, Error, ANY_TAG};

/// This thread's CPU time in clock ticks (usually 10 ms), where the kernel tells.
fn cpu_ticks() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the command name (which may hold spaces): utime and stime are the 12th
    // and 13th.
    let rest = s.get(s.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split(' ').collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn main() -> Result<(), Error> {
    let local = "127.0.0.1:0".parse().expect("a socket address");
    let mut a = Endpoint::builder().udp(local).build()?;
    let mut b = Endpoint::builder()
        .udp(local)
        .memory_budget(1 << 20, 2)
        .build()?;
    let ab = a.insert_peer(&b.address())?;
    let ba = b.insert_peer(&a.address())?;
    const N: u64 = 40;
    let sends = (0..N)
        .map(|i| a.tsend(ab, i, vec![i as u8; 64]))
        .collect::<Result<Vec<_>, _>>()?;
    for _ in 0..300 {
        a.progress()?;
        b.progress()?;
    }
    // A receive of a tag nobody sends: b waits for its own operation while not ready.
    let r = b.trecv(ba, 1 << 40, 64)?;
    let before = b.stats();
    let (t0, c0) = (Instant::now(), cpu_ticks());
    match b.wait_for(r, Duration::from_secs(1)) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("the receive cannot complete: {other:?}"),
    }
    let after = b.stats();
    let cpu = match (c0, cpu_ticks()) {
        (Some(x), Some(y)) => format!("{} ms", (y - x) * 10),
        _ => "unknown".into(),
    };
    println!(
        "1 s wait of a not-ready UDP receiver: {} progress calls, {} refusals, CPU {cpu} in {} ms",
        after.facade.progress_calls - before.facade.progress_calls,
        after.rdm.rx_refused - before.rdm.rx_refused,
        t0.elapsed().as_millis()
    );
    b.cancel(r)?;
    for i in 0..N {
        let r = b.trecv(ba, ANY_TAG, 64)?;
        let c = b.wait_with(r, &mut [&mut a])?;
        assert_eq!((c.tag, c.data), (i, vec![i as u8; 64]));
    }
    for s in sends {
        a.wait_with(s, &mut [&mut b])?;
    }
    println!("then all {N} messages arrived, in order");
    Ok(())
}
