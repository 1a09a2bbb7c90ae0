//! Review of the exact-path changes (open arrival-order list with its ends in engine
//! fields, messages moved out of the slab by `GenSlab::take`, `post_keyed` on scalars):
//! seeded random walks against the reference model in `model/`, biased to what the
//! quickcheck generators of `differential.rs` / `lazy_lists.rs` rarely produce:
//!
//! - long runs of exact receives that take the *tail* of the arrival-order list (the
//!   last arrival), its head, or its only element, each followed by arrivals that reuse
//!   the freed slot, then a first wildcard receive / probe / mprobe / purge that builds
//!   the wildcard lists by walking the arrival-order list;
//! - `Config::eager_wildcard_lists` on (no other test runs the engine with it on) and off;
//! - messages released by the reorder buffer, with sequence numbers that wrap past
//!   `u32::MAX` (`Config::initial_seq` just below it);
//! - stale `RecvHandle`s / `MsgHandle`s kept after their receive or message left the
//!   slab, tried again after the slot was reused: each must be refused, never alias the
//!   new occupant;
//! - tight message budgets, so that the held-byte accounting of taken messages is
//!   checked on every step (depths, bytes and pressure are compared with the model).

mod model;

use model::walk::{each_seed, Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

const COMMS: u32 = 2;
/// Sources 0..ARRIVE_SRCS use `arrive`; the next SEQ_SRCS sources use `deliver`.
const ARRIVE_SRCS: u32 = 3;
const SEQ_SRCS: u32 = 2;

fn walk(cfg: Config) -> Walk {
    Walk::new(cfg, Opts::FULL)
}

/// Sequenced source `ARRIVE_SRCS + s` sends a message.
fn send(w: &mut Walk, env: Envelope, len: usize) {
    w.send(env, len, len);
}

/// The transport delivers in-flight message `pick` of sequenced source `ARRIVE_SRCS + s`.
fn deliver(w: &mut Walk, s: usize, pick: usize) {
    w.deliver(ARRIVE_SRCS + s as u32, pick);
}

fn cancel_where_tag(w: &mut Walk, tag: u64) {
    w.cancel_where(
        &format!("tag {tag}"),
        |s| matches!(s.tag, TagSel::Exact(t) if t == tag),
    );
}

fn key(r: &mut Rng) -> (u32, u32, u64) {
    (
        r.below(u64::from(COMMS)) as u32,
        r.below(u64::from(ARRIVE_SRCS)) as u32,
        r.below(3),
    )
}

fn wild_spec(r: &mut Rng) -> RecvSpec {
    let (c, s, t) = key(r);
    let src = if r.chance(50) { Some(s) } else { None };
    match r.below(5) {
        0 => RecvSpec::new(c, src, None),
        1 => RecvSpec::new(c, None, Some(t)),
        2 => RecvSpec::new(c, None, None),
        3 => RecvSpec::masked(c, src.map_or(Source::Any, Source::Rank), t, 1),
        _ => RecvSpec::new(c, Some(s), None),
    }
}

/// One exact-phase step: arrivals and exact receives aimed at the ends of the
/// arrival-order list.
fn exact_step(w: &mut Walk, r: &mut Rng) {
    match r.below(10) {
        0..=2 => {
            let (c, s, t) = key(r);
            w.arrive(Envelope::new(c, s, t), 1 + r.below(8) as usize);
        }
        3 => {
            let (c, _, t) = key(r);
            let s = ARRIVE_SRCS + r.below(u64::from(SEQ_SRCS)) as u32;
            send(w, Envelope::new(c, s, t), 1 + r.below(8) as usize);
        }
        4 => {
            let s = r.below(u64::from(SEQ_SRCS)) as usize;
            let pick = r.below(4) as usize;
            deliver(w, s, pick);
        }
        5 | 6 => {
            // The tail of the arrival order (the last arrival).
            if let Some(m) = w.m.unexp.last().cloned() {
                w.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
            }
        }
        7 => {
            if let Some(m) = w.m.unexp.first().cloned() {
                w.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
            }
        }
        8 => {
            let (c, s, t) = key(r);
            w.post(RecvSpec::exact(c, s, t));
        }
        _ => {
            let i = r.below(8) as usize;
            if r.chance(50) {
                w.cancel(i);
            } else {
                w.mrecv(i);
            }
        }
    }
}

/// One wildcard-phase step: whatever builds, uses or resets the wildcard lists.
fn wild_step(w: &mut Walk, r: &mut Rng) {
    match r.below(12) {
        0 | 1 => {
            let s = wild_spec(r);
            w.post(s);
        }
        2 => {
            let s = wild_spec(r);
            w.probe(s);
        }
        3 => {
            let s = wild_spec(r);
            w.mprobe(s);
        }
        4 => {
            let (c, s, t) = key(r);
            w.mprobe(RecvSpec::exact(c, s, t));
        }
        5 => {
            let src = r.below(u64::from(ARRIVE_SRCS + SEQ_SRCS)) as u32;
            w.purge_peer(src);
        }
        6 => {
            let c = r.below(u64::from(COMMS)) as u32;
            w.purge_comm(c);
        }
        7 => {
            let t = r.below(3);
            cancel_where_tag(w, t);
        }
        8 => {
            // Drain: every queued message by an exact receive, tail first.
            while let Some(m) = w.m.unexp.last().cloned() {
                if w.m.posted.len() >= w.m.max_posted {
                    break;
                }
                w.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
            }
        }
        _ => exact_step(w, r),
    }
}

fn run(seed: u64, cfg: Config, steps: usize) {
    let mut r = Rng::new(seed);
    let mut w = walk(cfg);
    let mut step = 0;
    while step < steps {
        // A long exact phase (the arrival-order list only, while nothing is built),
        // then a short wildcard phase.
        let exact = 5 + r.below(60) as usize;
        for _ in 0..exact {
            exact_step(&mut w, &mut r);
        }
        let wild = 1 + r.below(6) as usize;
        for _ in 0..wild {
            wild_step(&mut w, &mut r);
        }
        w.stale_handles();
        step += exact + wild;
    }
    // Everything left is still reachable in arrival order, by every kind.
    for m in w.m.unexp.clone() {
        w.probe(RecvSpec::new(m.env.comm, None, None));
        w.probe(RecvSpec::new(m.env.comm, Some(m.env.src), None));
        w.probe(RecvSpec::new(m.env.comm, None, Some(m.env.tag)));
        w.probe(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
    }
    w.stale_handles();
}

fn configs() -> Vec<(&'static str, Config)> {
    let base = Config::default()
        .reorder_window(4)
        .initial_seq(u32::MAX - 5);
    vec![
        ("lazy", base),
        ("eager", base.eager_wildcard_lists(true)),
        ("lazy, 12 messages", base.max_messages(12).max_posted(10)),
        (
            "eager, 12 messages",
            base.eager_wildcard_lists(true)
                .max_messages(12)
                .max_posted(10),
        ),
        ("lazy, 40 bytes", base.max_bytes(40)),
    ]
}

#[test]
fn exact_runs_then_wildcards_match_the_model_in_every_config() {
    for (name, cfg) in configs() {
        each_seed(&format!("config {name}"), 0..150, |seed| {
            run(seed, cfg, 1000)
        });
    }
}

/// The exact post's single-access path (no wildcard list kept) on the only element of
/// the arrival-order list, its head and its tail, each followed by a first wildcard
/// receive that walks the list: with eager lists on and off.
#[test]
fn only_head_and_tail_of_the_arrival_order_then_a_first_wildcard() {
    for eager in [false, true] {
        let cfg = Config::default().eager_wildcard_lists(eager);
        let mut w = walk(cfg);
        let e = |c, s, t| Envelope::new(c, s, t);
        // Only element.
        w.arrive(e(0, 1, 1), 1);
        w.post(RecvSpec::exact(0, 1, 1));
        w.arrive(e(0, 1, 2), 1);
        w.post(RecvSpec::new(0, None, None));
        // Tail, repeatedly, with the slot reused behind it.
        for i in 0..5 {
            w.arrive(e(0, 1, 10 + i), 1);
        }
        for i in (0..5).rev() {
            w.post(RecvSpec::exact(0, 1, 10 + i));
            w.arrive(e(1, 2, 20 + i), 1);
        }
        w.probe(RecvSpec::new(1, None, None));
        w.post(RecvSpec::new(1, None, None));
        // Head.
        w.post(RecvSpec::exact(1, 2, 23));
        w.post(RecvSpec::new(1, Some(2), None));
        w.post(RecvSpec::new(1, None, Some(21)));
        w.post(RecvSpec::new(1, None, None));
        w.post(RecvSpec::new(1, None, None));
        w.stale_handles();
        w.check("end");
    }
}
