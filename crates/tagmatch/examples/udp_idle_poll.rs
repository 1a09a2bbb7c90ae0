//! The cost of one busy-poll pass that finds nothing: a UDP endpoint with one connected
//! peer (one message exchanged each way, so the peer has its own socket and both
//! handshakes are done), a receive posted, then `N` calls of `progress()` with nothing
//! arriving. Under `valgrind --tool=callgrind` with two values of `N`, the difference of
//! the instruction totals over the difference of the counts is the user-space cost of an
//! empty pass — what a waiting side pays between a datagram's arrival and its noticing
//! it (half a pass on average), on top of the system call:
//!
//! ```text
//! cargo build --release -p tagmatch --example udp_idle_poll
//! valgrind --tool=callgrind --callgrind-out-file=N.out target/release/examples/udp_idle_poll N
//! strace -c target/release/examples/udp_idle_poll N     # system calls per pass
//! ```

use tagmatch::Endpoint;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let passes: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse().map_err(|e| format!("pass count {s:?}: {e}"))?,
        None => 100_000,
    };
    let local = "127.0.0.1:0".parse()?;
    let mut a = Endpoint::builder().udp(local).build()?;
    let mut b = Endpoint::builder().udp(local).build()?;
    let to_b = a.insert_peer(&b.address())?;
    let to_a = b.insert_peer(&a.address())?;
    let r = b.trecv(tagmatch::ANY_SOURCE, 1u64, 8)?;
    let s = a.tsend(to_b, 1, vec![1u8; 8])?;
    b.wait_with(r, &mut [&mut a])?;
    a.wait_with(s, &mut [&mut b])?;
    let r = a.trecv(tagmatch::ANY_SOURCE, 1u64, 8)?;
    let s = b.tsend(to_a, 1, vec![1u8; 8])?;
    a.wait_with(r, &mut [&mut b])?;
    b.wait_with(s, &mut [&mut a])?;
    // Let the last ACKs settle, then poll an idle endpoint with a receive posted.
    for _ in 0..1000 {
        a.progress()?;
        b.progress()?;
    }
    let _r = a.trecv(to_b, 2u64, 8)?;
    let t = std::time::Instant::now();
    for _ in 0..passes {
        a.progress()?;
    }
    let el = t.elapsed();
    println!(
        "{passes} empty passes, {:.0} ns each",
        el.as_nanos() as f64 / passes as f64
    );
    Ok(())
}
