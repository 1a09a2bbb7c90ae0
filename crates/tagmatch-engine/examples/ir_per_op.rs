//! Instructions per operation of a benchmark workload, for callgrind: prepares
//! `WORKLOAD` at `DEPTH` (untimed set-up), runs the timed phase `REPS` times (set-up again
//! between, untimed) inside [`timed`], which callgrind collects alone:
//!
//! ```text
//! cargo build --release -p tagmatch-engine --example ir_per_op
//! valgrind --tool=callgrind --toggle-collect='ir_per_op::timed' --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/ir_per_op posted-exact 65536 1
//! callgrind_annotate /tmp/cg.out | head   # Ir; divide by the printed op count
//! ```
//!
//! Add `--cache-sim=yes --LL=1048576,8,64` for cache misses. Optional arguments after
//! the depth: `REPS` (default 1), `STRIDE` (tags, sources of the keyed-stride workload
//! `stride-tags` / `stride-srcs`: N exact receives with tag (or source) i × STRIDE, then N
//! arrivals in shuffled order), used to check the index hash on structured keys.

use tagmatch_engine::workload::{Params, Prepared, Workload};
use tagmatch_engine::{Config, Engine, Envelope, Posted, RecvSpec};

/// The timed part: callgrind's `--toggle-collect` target.
#[inline(never)]
fn timed(p: &mut Prepared) -> usize {
    p.run()
}

/// The strided-keys timed part.
#[inline(never)]
fn timed_arrivals(e: &mut Engine<u32, u32>, keys: &[Envelope]) -> usize {
    let mut n = 0;
    for (i, k) in keys.iter().enumerate() {
        if let Ok(tagmatch_engine::Arrived::Matched(_)) = e.arrive(*k, 0, i as u32) {
            n += 1;
        }
    }
    n
}

/// The alternating receives' timed part.
#[inline(never)]
fn timed_alternate(e: &mut Engine<u32, u32>, keys: &[Envelope], every: usize) -> usize {
    let (mut lo, mut hi) = (0, keys.len());
    let mut n = 0;
    for i in 0..keys.len() {
        let spec = if i % every == every - 1 {
            let k = keys[lo];
            lo += 1;
            RecvSpec::exact(k.comm, k.src, k.tag)
        } else {
            hi -= 1;
            RecvSpec::new(0, None, Some(keys[hi].tag))
        };
        if let Ok(Posted::Matched(_)) = e.post(spec, i as u32) {
            n += 1;
        }
    }
    n
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let name = a.get(1).map(String::as_str).unwrap_or("posted-exact");
    let depth: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(65_536);
    let reps: usize = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let stride: u64 = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(1);
    if let Some(field) = name.strip_prefix("stride-") {
        // Structured keys: N exact receives with tags (or sources) i × stride, arrivals
        // in a fixed pseudo-random order.
        let key = |i: u64| match field {
            "srcs" => Envelope::new(0, (i * stride) as u32, 7),
            _ => Envelope::new(0, 0, i * stride),
        };
        let mut e: Engine<u32, u32> = Engine::new(
            Config::default()
                .max_messages(usize::MAX)
                .max_posted(usize::MAX)
                .max_bytes(usize::MAX),
        );
        let mut keys: Vec<Envelope> = (0..depth as u64).map(key).collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in (1..keys.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            keys.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut total = 0;
        for _ in 0..reps {
            for (i, k) in (0..depth as u64).map(key).enumerate() {
                let spec = RecvSpec::new(k.comm, Some(k.src), Some(k.tag));
                match e.post(spec, i as u32) {
                    Ok(Posted::Pending(_)) => {}
                    other => panic!("post {k:?}: {other:?}"),
                }
            }
            total += timed_arrivals(&mut e, &keys);
        }
        assert_eq!(total, depth * reps, "every arrival matches");
        println!("ops {}", depth * reps);
        return;
    }
    if let Some(every) = name.strip_prefix("alternate-") {
        // The (comm, src, tag) lists' drop against its worst case: DEPTH messages of
        // distinct keys (small tags, 64 sources), then DEPTH receives, every EVERY-th exact (the
        // earliest message's key, which needs the lists: a rebuild when dropped), the
        // others ANY_SOURCE for the latest message's tag.
        let every: usize = every.parse().expect("alternate-EVERY");
        let mut total = 0;
        for _ in 0..reps {
            let mut e: Engine<u32, u32> = Engine::new(
                Config::default()
                    .max_messages(usize::MAX)
                    .max_posted(usize::MAX)
                    .max_bytes(usize::MAX),
            );
            let keys: Vec<Envelope> = (0..depth as u64)
                .map(|i| Envelope::new(0, (i % 64) as u32, i))
                .collect();
            for (i, k) in keys.iter().enumerate() {
                let _ = e.arrive(*k, 0, i as u32);
            }
            total += timed_alternate(&mut e, &keys, every);
        }
        assert_eq!(total, depth * reps, "every receive matches");
        println!("ops {}", depth * reps);
        return;
    }
    let w: Workload = name.parse().expect("a workload name");
    let mut p = Prepared::new(w, &Params::new(depth));
    let mut ops = 0;
    for r in 0..reps {
        if r > 0 {
            assert!(p.again(), "the timed phase leaves the engine empty");
        }
        timed(&mut p);
        ops += p.ops();
    }
    println!("ops {ops}");
}
