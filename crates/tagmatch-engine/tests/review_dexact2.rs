//! Second review of the dense (comm, src, tag) list heads (`dense.rs`, last section;
//! `Engine::dense[2]`): random walks against the reference model in `model/`, biased to
//! the new structure: communicator 0 (the only one whose sources own arrays of tags),
//! a few sources below 8 (filed from an engine without arrays) and the directory's
//! edge, tags 0..200 with a few from 2^16 on the same (comm, src), bursts of distinct
//! tags whose depths cross the memory rule's thresholds (12, 36, ... entries) so that
//! arrays are refused, allocated, grown, take over hashed lists and free the hash
//! index, then many cancels, purges, claims, wildcard receives (deferred removals),
//! out-of-order deliveries and `reserve` calls in the middle.

mod model;

use model::walk::{each_seed, Walk};
use model::Rng;
use tagmatch_engine::*;

fn comm(r: &mut Rng) -> u32 {
    match r.below(10) {
        0 => 1,
        1 => 7,
        _ => 0,
    }
}

fn src(r: &mut Rng) -> u32 {
    match r.below(20) {
        0 => 4095,
        1 => 4096,
        2 => 1 << 20,
        _ => r.below(8) as u32,
    }
}

fn tag(r: &mut Rng) -> u64 {
    match r.below(25) {
        0 => 65_535,
        1 => 65_536 + r.below(3),
        2 => 1 << 33,
        _ => r.below(200),
    }
}

fn spec(r: &mut Rng, e: &Envelope) -> RecvSpec {
    match r.below(10) {
        0..=5 => RecvSpec::exact(e.comm, e.src, e.tag),
        6 => RecvSpec::new(e.comm, Some(e.src), None),
        7 => RecvSpec::new(e.comm, None, Some(e.tag)),
        8 => RecvSpec::new(e.comm, None, None),
        _ => RecvSpec::masked(e.comm, Source::Rank(e.src), e.tag & 3, 3),
    }
}

/// `n` lists of one (comm, src), distinct tags from `start`, as messages or receives.
fn burst(w: &mut Walk, r: &mut Rng, c: u32, s: u32, n: u64) {
    let start = [0, 0, 10, 60, 190, 65_530][r.below_usize(6)];
    let msgs = r.chance(50);
    for i in 0..n {
        let t = start + i;
        if msgs {
            w.arrive(Envelope::new(c, s, t), 1);
        } else {
            w.post(RecvSpec::exact(c, s, t));
        }
    }
}

fn walk(seed: u64, defer: bool, steps: usize) {
    let mut w = Walk::for_exact_arrays(defer);
    let mut r = Rng::new(seed);
    for step in 0..steps {
        let e = Envelope::new(comm(&mut r), src(&mut r), tag(&mut r));
        match r.below(100) {
            0..=24 => {
                w.arrive(e, 1);
            }
            25..=49 => {
                let s = spec(&mut r, &e);
                w.post(s);
            }
            50..=53 => {
                let s = spec(&mut r, &e);
                w.probe(s);
            }
            54..=56 => {
                let s = spec(&mut r, &e);
                w.mprobe(s);
            }
            57..=58 if !w.claims.is_empty() => w.mrecv(r.below_usize(1 << 20)),
            59..=68 if !w.handles.is_empty() => w.cancel(r.below_usize(1 << 20)),
            69..=70 => w.first_posted(e),
            71 => {
                let t = e.tag;
                w.cancel_where("tag", move |s| s.tag == TagSel::Exact(t));
            }
            72 => {
                let c = e.comm;
                w.cancel_where("comm", move |s| s.comm == c);
            }
            73 => {
                w.purge_peer(e.src);
            }
            74 => {
                w.purge_comm(e.comm);
            }
            75..=80 => {
                let n = [4, 11, 12, 13, 35, 36, 37, 64, 65, 300][r.below_usize(10)];
                burst(&mut w, &mut r, e.comm, e.src, n);
            }
            81..=84 => {
                // Out of order through the reorder buffer.
                w.send(e, 1, 1);
                if r.chance(60) {
                    let s = e.src;
                    let pick = r.below_usize(8);
                    w.deliver(s, pick);
                }
            }
            85..=86 => {
                let srcs: Vec<u32> = w.in_flight.keys().copied().collect();
                for s in srcs {
                    while w.deliver(s, 0).is_some() {}
                }
            }
            87 => w.drain_any_comm(e.comm),
            88 if step % 7 == 0 => {
                let n = r.below_usize(64);
                w.e.reserve(n, n);
            }
            89 => w.witness(&mut r),
            90 => {
                for _ in 0..r.below(40) {
                    let i = r.below_usize(1 << 20);
                    w.take_at(i % (w.m.unexp.len() + 1));
                }
            }
            _ => {}
        }
        w.check("step");
    }
    w.finish(&[0, 1, 7]);
}

/// Random walks biased to communicator 0's small sources and tags agree with the
/// model, wildcard removals deferred at every size.
#[test]
fn biased_walks_with_deferred_removals_agree_with_the_model() {
    each_seed("deferred", 1..25, |s| walk(s * 7919, true, 1500));
}

/// The same without deferred removals (every removal done in place).
#[test]
fn biased_walks_without_deferred_removals_agree_with_the_model() {
    each_seed("in place", 1..25, |s| walk(s * 104_729 + 3, false, 1500));
}
