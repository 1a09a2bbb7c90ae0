//! Helpers shared by the `verbs_*` integration tests: device-or-skip, loopback pairs
//! connected over a TCP side channel on 127.0.0.1, and bounded waits for completions.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tagmatch_transport::verbs::{Completion, Context, TaggedTransport, TransportConfig};

/// Set to `1` to turn "no RDMA device" from a skip into a failure (vm-test sets it).
pub const REQUIRE_ENV: &str = "TAGMATCH_REQUIRE_RDMA_DEVICE";
/// Set to `1` to turn "no tag-matching device" from a skip into a failure.
pub const REQUIRE_TM_ENV: &str = "TAGMATCH_REQUIRE_TM_DEVICE";

/// Bound of every wait (TCG guests are slow).
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Writes a line to the real stderr (visible without `--nocapture`).
pub fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

fn env_is_one(key: &str) -> bool {
    std::env::var(key).is_ok_and(|v| v.trim() == "1")
}

/// Reports a skip, or fails when `require_env` is `1`.
pub fn skip(test: &str, reason: &str, require_env: &str) {
    if env_is_one(require_env) {
        panic!("{test}: {reason}, and {require_env}=1 requires it");
    }
    say(&format!("SKIPPED {test}: {reason}"));
}

/// Opens the device (`TAGMATCH_RDMA_DEVICE` or the first), or reports a skip when there
/// is no RDMA device at all. Any other failure fails the test.
pub fn open_or_skip(test: &str) -> Option<Context> {
    match tagmatch_transport::verbs::device_names() {
        Err(e) => {
            skip(test, &format!("no RDMA device ({e})"), REQUIRE_ENV);
            None
        }
        Ok(_) => Some(Context::open(None).unwrap_or_else(|e| panic!("{test}: open: {e}"))),
    }
}

/// A connected TCP pair on 127.0.0.1 (the side channel).
pub fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let a = TcpStream::connect(l.local_addr().expect("local addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    (a, b)
}

/// Two transports on `ctx` (ranks from their configs), connected RC QP to RC QP through
/// the TCP side channel.
pub fn pair(
    ctx: &Context,
    a: TransportConfig,
    b: TransportConfig,
) -> (TaggedTransport, TaggedTransport) {
    let mut ta = TaggedTransport::new(ctx, a).expect("transport a");
    let mut tb = TaggedTransport::new(ctx, b).expect("transport b");
    let (mut sa, mut sb) = tcp_pair();
    let pa = ta.start_connect(&mut sa).expect("start_connect a");
    let pb = tb.start_connect(&mut sb).expect("start_connect b");
    assert_eq!(ta.finish_connect(pa, &mut sa).expect("finish a"), b.rank);
    assert_eq!(tb.finish_connect(pb, &mut sb).expect("finish b"), a.rank);
    (ta, tb)
}

/// A config of rank `rank` with the defaults otherwise.
pub fn cfg(rank: u32) -> TransportConfig {
    TransportConfig {
        rank,
        ..TransportConfig::default()
    }
}

/// Progresses both transports, collecting completions, until `done(a_done, b_done)` holds;
/// panics after [`TIMEOUT`].
pub fn drive(
    a: &mut TaggedTransport,
    b: &mut TaggedTransport,
    ca: &mut Vec<Completion>,
    cb: &mut Vec<Completion>,
    what: &str,
    done: impl Fn(&[Completion], &[Completion]) -> bool,
) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        a.progress().expect("progress a");
        b.progress().expect("progress b");
        while let Some(c) = a.poll_completion() {
            ca.push(c);
        }
        while let Some(c) = b.poll_completion() {
            cb.push(c);
        }
        if done(ca, cb) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not done within {TIMEOUT:?}; a: {ca:?} {:?}; b: {cb:?} {:?}",
            a.errors(),
            b.errors()
        );
        std::thread::yield_now();
    }
}

/// Progresses one transport until `n` completions are collected; panics after [`TIMEOUT`].
pub fn collect(t: &mut TaggedTransport, n: usize, what: &str) -> Vec<Completion> {
    let deadline = Instant::now() + TIMEOUT;
    let mut out = Vec::new();
    while out.len() < n {
        t.progress().expect("progress");
        while let Some(c) = t.poll_completion() {
            out.push(c);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {n} completions within {TIMEOUT:?}: {out:?}; errors {:?}",
            out.len(),
            t.errors()
        );
        std::thread::yield_now();
    }
    out
}

/// A deterministic byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}
