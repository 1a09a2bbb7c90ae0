//! Review of the tombstones that flushed deferred (comm, src, tag) index removals leave
//! (commit 0e1bc47: `Index::bury_at`, `TOMB`, the rebuild at the load limit, the probe
//! and backward shift passing over tombstones). Release constants apply here (distances
//! saturate at 15, 32 removals are deferred at a time); `defer_removals_from(0)` makes
//! every depth defer, `defer_removals_from(usize::MAX)` none, so two engines given the
//! same operations differ only by the deferral and its tombstones.

mod model;

use model::Rng;
use tagmatch_engine::*;

fn cfg() -> Config {
    model::review_config()
}

fn pair(c: Config) -> (Engine<u32, u32>, Engine<u32, u32>) {
    let mut a: Engine<u32, u32> = Engine::new(c);
    let mut b: Engine<u32, u32> = Engine::new(c);
    a.defer_removals_from(0);
    b.defer_removals_from(usize::MAX);
    (a, b)
}

/// Distinct keys, hashed in the (comm, src, tag) index (large tags and sources also
/// keep the wildcard kinds out of the dense arrays for half of them).
fn key(i: u64) -> Envelope {
    Envelope::new((i % 3) as u32, 100_000 + (i % 7) as u32, (1 << 40) + i)
}

fn arrive_both(a: &mut Engine<u32, u32>, b: &mut Engine<u32, u32>, e: Envelope, id: u32) {
    let x = format!("{:?}", a.arrive(e, 1, id));
    assert_eq!(x, format!("{:?}", b.arrive(e, 1, id)), "arrival {e:?}");
}

fn post_both(a: &mut Engine<u32, u32>, b: &mut Engine<u32, u32>, s: RecvSpec, id: u32) -> String {
    let x = format!("{:?}", a.post(s, id));
    assert_eq!(x, format!("{:?}", b.post(s, id)), "receive {s:?}");
    x
}

/// `Engine::reserve` promises that exact matching up to the reserved depth allocates
/// nothing. Tombstones left by wildcard receives take room in the (comm, src, tag)
/// index: a `reserve` that looks only at the table's size (large enough for the depth)
/// left them there, and the arrivals that followed, fewer than reserved, met the load
/// limit with more than 5/8 of the buckets live and doubled the table (8 KiB more than
/// the engine that does not defer, which never grows).
#[test]
fn reserve_makes_room_for_its_depth_despite_tombstones() {
    let (mut a, mut b) = pair(cfg());
    // 2,048 buckets in both (load limit 1,536, 5/8 = 1,280).
    a.reserve(0, 1000);
    b.reserve(0, 1000);
    let mut id = 0;
    for i in 0..1300 {
        id += 1;
        arrive_both(&mut a, &mut b, key(i), id);
    }
    // 236 taken by ANY_SOURCE receives: 236 tombstones in the deferring engine.
    for i in 0..236 {
        id += 1;
        let k = key(i);
        let x = post_both(&mut a, &mut b, RecvSpec::new(k.comm, None, Some(k.tag)), id);
        assert!(x.contains("Matched"), "{x}");
    }
    // 236 more arrivals: 1,300 queued, 1,536 buckets taken (the load limit).
    for i in 1300..1536 {
        id += 1;
        arrive_both(&mut a, &mut b, key(i), id);
    }
    a.reserve(0, 1500);
    b.reserve(0, 1500);
    let (ha, hb) = (a.heap_bytes(), b.heap_bytes());
    // Up to the reserved depth with exact arrivals only.
    for i in 1536..1736 {
        id += 1;
        arrive_both(&mut a, &mut b, key(i), id);
        assert_eq!(a.counters(), b.counters());
        assert_eq!(
            b.heap_bytes(),
            hb,
            "the engine that does not defer allocates"
        );
        assert_eq!(
            a.heap_bytes(),
            ha,
            "arrival {i}: {} queued after reserve(0, 1500)",
            a.counters().unexpected_depth
        );
    }
    assert_eq!(a.counters().unexpected_depth, 1500);
    // Every message is still found, by exact receives, in both.
    for i in 236..1736 {
        id += 1;
        let k = key(i);
        let x = post_both(&mut a, &mut b, RecvSpec::exact(k.comm, k.src, k.tag), id);
        assert!(x.contains("Matched"), "{x}");
    }
    assert_eq!(a.counters(), b.counters());
}

/// A receive spec for queued message `m`, mostly wildcards (each taking `m`'s list
/// head, whose exact-index removal the deferring engine defers).
fn spec_for(r: &mut Rng, m: &Envelope) -> RecvSpec {
    match r.below(12) {
        0 => RecvSpec::exact(m.comm, m.src, m.tag),
        1..=4 => RecvSpec::new(m.comm, None, Some(m.tag)),
        5..=8 => RecvSpec::new(m.comm, Some(m.src), None),
        9 | 10 => RecvSpec::new(m.comm, None, None),
        _ => RecvSpec::masked(m.comm, Source::Any, m.tag & 1, 1),
    }
}

/// Steady queues held near a depth `depth` (the (comm, src, tag) index then sits near
/// its load limit, or near 5/8 of it, where a rebuild chooses between in place and
/// doubled), alternating runs of arrivals of fresh keys and runs of wildcard receives
/// of queued messages (deferred removals: tombstones), with exact receives, probes,
/// claims, cancels, purges and reservations between them. Two engines, one deferring
/// at every depth and one never: every answer and counter agrees after each operation,
/// and the deferring engine never holds more than twice the other's memory (its index
/// may be one doubling ahead, nothing more).
fn churn(seed: u64, depth: usize, steps: usize) {
    let mut r = Rng::new(seed);
    let (mut a, mut b) = pair(cfg().eager_wildcard_lists(seed % 3 == 0));
    let mut queued: Vec<Envelope> = Vec::new();
    let mut handles: Vec<RecvHandle> = Vec::new();
    let mut claims: Vec<MsgHandle> = Vec::new();
    let mut next_key = 0u64;
    let mut id = 0u32;
    let mut arriving = true;
    let mut run = 0usize;
    for step in 0..steps {
        id += 1;
        let ctx = format!("seed {seed} depth {depth} step {step}");
        if run == 0 {
            // Up to the depth (and a little past it) by arrivals, then down by a run of
            // receives of up to a quarter of it.
            arriving = queued.len() < depth;
            run = if arriving {
                depth - queued.len() + r.below_usize(4)
            } else {
                1 + r.below_usize(depth / 4 + 4)
            };
        }
        run -= 1;
        let op = r.below(100);
        if arriving || queued.is_empty() || op < 4 {
            // Fresh keys mostly (a new bucket each), sometimes a repeat (a list of two:
            // its head's removal is not deferred).
            let e = if op % 9 == 0 && !queued.is_empty() {
                queued[r.below_usize(queued.len())]
            } else {
                next_key += 1;
                key(next_key)
            };
            let x = a.arrive(e, 1, id);
            let y = b.arrive(e, 1, id);
            match &x {
                Ok(Arrived::Unexpected(_)) => queued.push(e),
                Ok(Arrived::Matched(_)) | Err(_) => {}
            }
            assert_eq!(format!("{x:?}"), format!("{y:?}"), "{ctx}");
        } else {
            let m = queued[r.below_usize(queued.len())];
            match op {
                4..=79 => {
                    let s = spec_for(&mut r, &m);
                    let x = a.post(s, id);
                    let y = b.post(s, id);
                    match &x {
                        Ok(Posted::Matched(mm)) => {
                            let p = queued.iter().position(|q| *q == mm.env).expect("queued");
                            queued.swap_remove(p);
                        }
                        Ok(Posted::Pending(h)) => handles.push(*h),
                        Err(_) => {}
                    }
                    assert_eq!(format!("{x:?}"), format!("{y:?}"), "{ctx}");
                }
                80..=84 => {
                    let s = spec_for(&mut r, &m);
                    let x = format!("{:?}", a.probe(&s).map(|p| (*p.msg, p.env)));
                    assert_eq!(x, format!("{:?}", b.probe(&s).map(|p| (*p.msg, p.env))));
                }
                85..=88 => {
                    let s = spec_for(&mut r, &m);
                    let x = a.mprobe(&s);
                    assert_eq!(x, b.mprobe(&s), "{ctx}");
                    if let Some(c) = x {
                        let p = queued.iter().position(|q| *q == c.env).expect("queued");
                        queued.swap_remove(p);
                        claims.push(c.handle);
                    }
                }
                89..=91 if !claims.is_empty() => {
                    let h = claims.swap_remove(r.below_usize(claims.len()));
                    let x = format!("{:?}", a.mrecv(h));
                    assert_eq!(x, format!("{:?}", b.mrecv(h)), "{ctx}");
                }
                92..=94 if !handles.is_empty() => {
                    let h = handles.swap_remove(r.below_usize(handles.len()));
                    let x = format!("{:?}", a.cancel(h));
                    assert_eq!(x, format!("{:?}", b.cancel(h)), "{ctx}");
                }
                95 => {
                    let mut xa = Vec::new();
                    let mut xb = Vec::new();
                    let na = a.purge_peer(m.src, |p| xa.push(format!("{p:?}")));
                    let nb = b.purge_peer(m.src, |p| xb.push(format!("{p:?}")));
                    assert_eq!((na, &xa), (nb, &xb), "{ctx}");
                    queued.retain(|q| q.src != m.src);
                    handles.clear();
                }
                96 => {
                    let n = r.below_usize(2 * depth + 2);
                    a.reserve(n, n);
                    b.reserve(n, n);
                }
                _ => {
                    let s = spec_for(&mut r, &m);
                    let x = a.post(s, id);
                    let y = b.post(s, id);
                    if let Ok(Posted::Matched(mm)) = &x {
                        let p = queued.iter().position(|q| *q == mm.env).expect("queued");
                        queued.swap_remove(p);
                    }
                    if let Ok(Posted::Pending(h)) = &x {
                        handles.push(*h);
                    }
                    assert_eq!(format!("{x:?}"), format!("{y:?}"), "{ctx}");
                }
            }
        }
        assert_eq!(a.counters(), b.counters(), "{ctx}");
        assert_eq!(a.pressure(), b.pressure(), "{ctx}");
        assert!(
            a.heap_bytes() <= 2 * b.heap_bytes() + 512,
            "{ctx}: {} against {}",
            a.heap_bytes(),
            b.heap_bytes()
        );
        if step % 64 == 0 {
            let e = queued.get(step % queued.len().max(1)).copied();
            if let Some(e) = e {
                let fa = a.first_posted_match(&e).map(|i| (i.seq, i.spec));
                assert_eq!(fa, b.first_posted_match(&e).map(|i| (i.seq, i.spec)));
            }
            for &h in &handles {
                assert_eq!(a.posted_info(h), b.posted_info(h), "{ctx}");
            }
        }
    }
    // Everything left is found by exact receives, in both.
    for m in queued {
        id += 1;
        let s = RecvSpec::exact(m.comm, m.src, m.tag);
        let x = format!("{:?}", a.post(s, id));
        assert_eq!(x, format!("{:?}", b.post(s, id)));
    }
    assert_eq!(a.counters(), b.counters());
}

#[test]
fn tombstone_churn_near_the_load_limit_small_tables() {
    // Tables of 2 to 64 buckets: depths around their limits (3/4) and 5/8.
    for (seed, depth) in (0..24u64).zip([1, 2, 3, 5, 6, 10, 12, 20, 24, 40, 46].iter().cycle()) {
        churn(seed, *depth, 3000);
    }
}

#[test]
fn tombstone_churn_near_the_load_limit_mid_tables() {
    // 2,048 buckets: live near 1,280 (5/8) and 1,536 (3/4); 4,096 near 2,560.
    for (seed, depth) in (100..106u64).zip([1270, 1290, 1520, 2550, 2600, 3000].iter()) {
        churn(seed, *depth, 12_000);
    }
}
