//! Review of the wildcard kinds kept across an empty queue (merge 10cc56f, `wild2`:
//! `wild_used` in `build_unexp` / `link_unexp_kept`, the claimed messages' dead log
//! entries, `link_log_into_k` keeping the communicator's array) together with the dense
//! arrays created only when the entries pay for them (`wildmem`). Seeded walks that
//! empty the queue very often, by every operation that can empty it (receives of every
//! kind, mprobe, purges, reorder-buffer releases), with claims held across empty
//! queues, keys around the arrays' ends and every operation checked against the model.

mod model;

use model::walk::{each_seed, Bytes, Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

const SRCS: [u32; 8] = [0, 1, 2, 63, 64, 65_535, 65_536, 7];
const TAGS: [u64; 8] = [0, 1, 2, 63, 64, 65_535, 65_536, 1 << 40];

fn cfg(eager: bool, claims_count: bool) -> Config {
    Config::default()
        .reorder_window(4)
        .initial_seq(0)
        .max_bytes(1 << 30)
        .max_messages(1 << 16)
        .max_posted(1 << 16)
        .claims_count(claims_count)
        .eager_wildcard_lists(eager)
}

fn env(r: &mut Rng, comms: u64) -> Envelope {
    let comm = r.below(comms) as u32;
    let ns = if r.chance(70) { 3 } else { SRCS.len() };
    let src = SRCS[r.below_usize(ns)];
    let nt = if r.chance(70) { 3 } else { TAGS.len() };
    Envelope::new(comm, src, TAGS[r.below_usize(nt)])
}

fn spec(r: &mut Rng, m: &Envelope) -> RecvSpec {
    match r.below(8) {
        0 | 1 => RecvSpec::exact(m.comm, m.src, m.tag),
        2 | 3 => RecvSpec::new(m.comm, Some(m.src), None),
        4 | 5 => RecvSpec::new(m.comm, None, Some(m.tag)),
        6 => RecvSpec::new(m.comm, None, None),
        _ => RecvSpec::masked(m.comm, Source::Any, m.tag & 1, 1),
    }
}

/// One walk: arrivals (ordered and sequenced through the reorder buffer), receives,
/// probes, claims, cancels and purges, the queue emptied every few operations.
fn walk(seed: u64, steps: usize) {
    let mut r = Rng::new(seed);
    let eager = seed % 5 == 0;
    let claims_count = seed % 3 == 0;
    // Bytes against the walk's books (claims count as the config says); the model's
    // pressure counts claims.
    let opts = Opts {
        bytes: Bytes::Walk,
        pressure: claims_count,
        ..Opts::FULL
    };
    let mut p = Walk::new(cfg(eager, claims_count), opts);
    let comms = 1 + r.below(3);
    for _ in 0..steps {
        let m = env(&mut r, comms);
        match r.below(100) {
            0..=24 => {
                p.arrive(m, 1 + r.below_usize(3));
            }
            25..=34 => {
                // Sequenced sources 100.. (their own key range), delivered out of order.
                let e = Envelope::new(m.comm, 100 + (m.src & 3), m.tag);
                let len = 1 + r.below_usize(3);
                p.send(e, len, len);
                let pick = r.below_usize(4);
                p.deliver(e.src, pick);
            }
            35..=39 => {
                let pick = r.below_usize(4);
                p.deliver(100 + r.below(4) as u32, pick);
            }
            40..=57 => {
                let s = spec(&mut r, &m);
                p.post(s);
            }
            58..=63 => {
                let s = spec(&mut r, &m);
                p.probe(s);
            }
            64..=69 => {
                let s = spec(&mut r, &m);
                p.mprobe(s);
            }
            70..=73 => p.mrecv(r.below_usize(1 << 20)),
            74..=77 => p.cancel(r.below_usize(1 << 20)),
            78 => {
                let c = m.comm;
                p.cancel_where("comm", move |s| s.comm == c);
            }
            79 => {
                p.purge_peer(if r.chance(50) { m.src } else { 100 + (m.src & 3) });
            }
            80 => {
                p.purge_comm(m.comm);
            }
            81..=86 => {
                // Empty the queue (receives pending would take messages: exact
                // drain in arrival order takes each message by its own key only
                // when nothing is posted).
                if p.m.posted.is_empty() {
                    if r.chance(50) {
                        p.drain_exact();
                    } else {
                        for c in 0..comms as u32 {
                            p.drain_any_comm(c);
                        }
                    }
                }
            }
            87..=89 => p.witness(&mut r),
            90..=92 => p.first_posted(m),
            _ => {
                // Take the queued messages in arrival order with single-wildcard receives
                // (each must be a match of the earliest).
                let kind = r.below(3);
                while let Some(q) = p.m.unexp.first().map(|q| q.env) {
                    if !p.m.posted.is_empty() {
                        break;
                    }
                    let s = match kind {
                        0 => RecvSpec::new(q.comm, Some(q.src), None),
                        1 => RecvSpec::new(q.comm, None, Some(q.tag)),
                        _ => RecvSpec::exact(q.comm, q.src, q.tag),
                    };
                    p.post(s);
                }
            }
        }
    }
    for c in 0..comms as u32 {
        p.purge_comm(c);
    }
    while !p.claims.is_empty() {
        p.mrecv(0);
    }
    p.stale_handles();
    p.check("end");
}

#[test]
fn walks_through_empty_queues_agree_with_the_model() {
    each_seed("review_wild2 walk", 1..200, |s| walk(s, 3000));
}
