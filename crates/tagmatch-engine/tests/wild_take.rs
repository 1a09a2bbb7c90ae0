//! Single-wildcard takes and the wildcard lists kept across an empty queue (engine.rs:
//! `post_wild`, `post_wild_uncovered`, `link_log_into_k`, `dense_push_unexp`,
//! `wild_used` in `link_unexp_rest` / `build_unexp`), against the reference model.
//!
//! The policy under test: a wildcard kind of unexpected-message lists that a receive,
//! probe or purge needed since the queue was last empty stays kept when the queue
//! empties (the next arrivals are linked into it as they come); a kept kind nobody
//! needed in that period is forgotten at the next arrival to an empty queue (built again
//! from the arrival log when next needed). Matching must be the model's in every
//! transition: kept → kept, kept → forgotten → rebuilt, with claimed messages (on no
//! list) held across the empty queue, and keys on both sides of the dense arrays' ends.

mod model;

use model::{Model, Msg, Out, Rng};
use tagmatch_engine::*;

/// Engine and model side by side.
struct Pair {
    e: Engine<u32, u32>,
    m: Model,
    next: u32,
    claims: Vec<(u32, MsgHandle)>,
}

impl Pair {
    fn new(eager: bool) -> Self {
        let cfg = Config::default()
            .max_bytes(usize::MAX)
            .max_messages(1 << 20)
            .max_posted(1 << 20)
            .eager_wildcard_lists(eager);
        Pair {
            e: Engine::new(cfg),
            m: Model::new(
                cfg.reorder_window,
                usize::MAX,
                1 << 20,
                1 << 20,
                cfg.initial_seq,
            ),
            next: 0,
            claims: Vec::new(),
        }
    }

    fn depths(&self) -> (usize, usize, usize) {
        let c = self.e.counters();
        (c.posted_depth, c.unexpected_depth, c.claimed_depth)
    }

    fn check(&self, what: &str) {
        assert_eq!(
            self.depths(),
            (
                self.m.posted.len(),
                self.m.unexp.len(),
                self.m.claimed.len()
            ),
            "depths after {what}"
        );
    }

    fn arrive(&mut self, comm: u32, src: u32, tag: u64) -> Out {
        self.next += 1;
        let mid = self.next;
        let env = Envelope::new(comm, src, tag);
        let got = match self.e.arrive(env, 1, mid) {
            Ok(Arrived::Matched(x)) => Out::Match(x.recv, x.msg),
            Ok(Arrived::Unexpected(_)) => Out::Unexpected(mid),
            Err(r) => Out::Rejected(r.reason, r.msg),
        };
        assert_eq!(
            got,
            self.m.arrive(Msg { env, len: 1, mid }, true),
            "arrive {env:?}"
        );
        self.check("arrive");
        got
    }

    fn post(&mut self, spec: RecvSpec) -> Out {
        self.next += 1;
        let rid = self.next;
        let got = match self.e.post(spec, rid) {
            Ok(Posted::Matched(x)) => Out::Match(x.recv, x.msg),
            Ok(Posted::Pending(_)) => Out::Pending(rid),
            Err(r) => Out::PostRejected(r.recv),
        };
        assert_eq!(got, self.m.post(spec, rid), "post {spec:?}");
        self.check("post");
        got
    }

    fn probe(&mut self, spec: RecvSpec) {
        let got = self.e.probe(&spec).map(|p| *p.msg);
        assert_eq!(got, self.m.probe(&spec), "probe {spec:?}");
    }

    fn mprobe(&mut self, spec: RecvSpec) {
        let c = self.e.mprobe(&spec);
        let got = c.map(|c| *self.e.claimed(c.handle).unwrap());
        if let (Some(c), Some(mid)) = (c, got) {
            self.claims.push((mid, c.handle));
        }
        assert_eq!(got, self.m.mprobe(&spec), "mprobe {spec:?}");
        self.check("mprobe");
    }

    fn mrecv_all(&mut self) {
        for (mid, h) in core::mem::take(&mut self.claims) {
            let got = self.e.mrecv(h).ok().map(|x| x.msg);
            assert_eq!(got, self.m.mrecv(mid), "mrecv {mid}");
        }
        self.check("mrecv");
    }

    /// Takes every queued message with receives of `kind` (0 exact, 1 ANY_TAG, 2
    /// ANY_SOURCE, 3 both), oldest first as the model lists them: each must be a match.
    fn drain(&mut self, kind: u8) {
        while let Some(m) = self.m.unexp.first().map(|m| m.env) {
            let spec = match kind {
                0 => RecvSpec::exact(m.comm, m.src, m.tag),
                1 => RecvSpec::new(m.comm, Some(m.src), None),
                2 => RecvSpec::new(m.comm, None, Some(m.tag)),
                _ => RecvSpec::new(m.comm, None, None),
            };
            assert!(matches!(self.post(spec), Out::Match(..)), "drain {kind}");
        }
        assert_eq!(self.depths().1, 0);
    }
}

/// Messages with repeated sources and tags (lists of several members), taken by single-
/// wildcard receives newest key first, period after period: a kind used in a period is
/// kept across the empty queue and must hold every later arrival, in arrival order.
#[test]
fn kept_kinds_hold_every_arrival_after_an_empty_queue() {
    for eager in [false, true] {
        let mut p = Pair::new(eager);
        // Period kinds: ANY_SOURCE twice (kept, then used again), ANY_TAG, none (exact
        // only: the kept kinds are forgotten at the next period), ANY_SOURCE again
        // (rebuilt from the log), both kinds, ANY/ANY.
        for (period, kinds) in [
            vec![2u8],
            vec![2],
            vec![1],
            vec![0],
            vec![2],
            vec![1, 2],
            vec![3, 2],
            vec![0],
            vec![1],
        ]
        .into_iter()
        .enumerate()
        {
            let n = 24 + period as u32;
            for i in 0..n {
                // Sources 0..5, tags 0..4: every (comm, src) and (comm, tag) list has
                // several members; two communicators.
                p.arrive(i % 2, i % 5, u64::from(i % 4));
            }
            // Single-wildcard receives for keys from the newest arrival back, then a
            // drain with the period's last kind.
            for (j, &k) in kinds.iter().enumerate() {
                for i in (0..n).rev().step_by(3 + j) {
                    let spec = match k {
                        1 => RecvSpec::new(i % 2, Some(i % 5), None),
                        2 => RecvSpec::new(i % 2, None, Some(u64::from(i % 4))),
                        3 => RecvSpec::new(i % 2, None, None),
                        _ => RecvSpec::exact(i % 2, i % 5, u64::from(i % 4)),
                    };
                    // Only receives that find a message (no receive is left pending
                    // across the empty queue).
                    if p.m.probe(&spec).is_some() {
                        assert!(matches!(p.post(spec), Out::Match(..)));
                    }
                }
            }
            p.drain(*kinds.last().unwrap());
            // The queue is empty: the next period's first arrival meets the kept kinds.
            assert_eq!(p.depths(), (0, 0, 0), "period {period}");
        }
    }
}

/// A message claimed by mprobe stays claimed (on no list) across the empty queue and the
/// kept kinds; probes see the later arrivals only, in arrival order.
#[test]
fn claimed_messages_across_kept_kinds() {
    for eager in [false, true] {
        let mut p = Pair::new(eager);
        for round in 0..6u32 {
            for i in 0..10 {
                p.arrive(0, i % 3, u64::from(i % 2));
            }
            p.mprobe(RecvSpec::new(0, None, Some(u64::from(round % 2))));
            p.mprobe(RecvSpec::new(0, Some(round % 3), None));
            p.probe(RecvSpec::new(0, None, Some(1)));
            p.probe(RecvSpec::new(0, Some(2), None));
            // Drain: the queue empties with claims outstanding, then more arrive.
            p.drain(if round % 2 == 0 { 2 } else { 1 });
            p.arrive(0, 1, 1);
            p.probe(RecvSpec::new(0, Some(1), None));
            p.probe(RecvSpec::new(0, None, Some(1)));
            p.drain(if round % 3 == 0 { 0 } else { 2 });
            if round % 2 == 1 {
                p.mrecv_all();
            }
        }
    }
}

/// Keys past the end of their communicator's array: an ANY_SOURCE / ANY_TAG receive
/// whose key an array does not cover yet grows it (taking over the lists of the newly
/// covered keys from the hash index) and takes the head of the moved list, or, when the
/// growth rule refuses, takes it from the hash index.
#[test]
fn uncovered_keys_grow_or_stay_hashed_and_take_the_earliest() {
    for eager in [false, true] {
        let mut p = Pair::new(eager);
        // Few lists, large keys: the arrays refuse to grow that far (hash index).
        for i in 0..8u32 {
            p.arrive(0, 1000 + i % 2, 5000 + u64::from(i % 2));
        }
        p.post(RecvSpec::new(0, None, Some(5001)));
        p.post(RecvSpec::new(0, Some(1000), None));
        // Many lists: the arrays grow step by step to cover keys 0..300.
        for i in 0..300u32 {
            p.arrive(0, i, u64::from(i));
            p.arrive(0, i, u64::from(i));
        }
        for i in (0..300u32).rev().step_by(7) {
            p.post(RecvSpec::new(0, None, Some(u64::from(i))));
            p.post(RecvSpec::new(0, Some(i), None));
        }
        p.drain(2);
        // Posted receives past the arrays' ends, then the messages they wait for.
        for i in [70u32, 500, 9000, 70_000] {
            assert!(matches!(
                p.post(RecvSpec::new(3, None, Some(u64::from(i)))),
                Out::Pending(_)
            ));
            assert!(matches!(
                p.post(RecvSpec::new(3, Some(i), None)),
                Out::Pending(_)
            ));
        }
        for i in [70u32, 500, 9000, 70_000] {
            assert!(matches!(p.arrive(3, i + 1, u64::from(i)), Out::Match(..)));
            assert!(matches!(p.arrive(3, i, u64::from(i) + 1), Out::Match(..)));
        }
        assert_eq!(p.depths(), (0, 0, 0));
    }
}

/// Seeded random walks with few keys and frequent drains to an empty queue, so that the
/// kept / forgotten transitions happen at every kind of operation.
#[test]
fn seeded_walks_through_empty_queues_agree_with_the_model() {
    let mut drains = 0;
    for seed in 1..=24u64 {
        let eager = seed % 4 == 0;
        let mut p = Pair::new(eager);
        let mut rng = Rng::new(seed);
        for _ in 0..1500 {
            let comm = rng.below(2) as u32;
            let src = rng.below(4) as u32;
            let tag = rng.below(3);
            match rng.below(20) {
                0..=7 => {
                    p.arrive(comm, src, tag);
                }
                8..=13 => {
                    let spec = match rng.below(4) {
                        0 => RecvSpec::exact(comm, src, tag),
                        1 => RecvSpec::new(comm, Some(src), None),
                        2 => RecvSpec::new(comm, None, Some(tag)),
                        _ => RecvSpec::new(comm, None, None),
                    };
                    p.post(spec);
                }
                14 => p.probe(RecvSpec::new(comm, None, Some(tag))),
                15 => p.mprobe(RecvSpec::new(comm, Some(src), None)),
                16 => p.mrecv_all(),
                17 => {
                    // Pending receives would take the drain's messages: only drain a
                    // queue with nothing posted.
                    if p.depths().0 == 0 {
                        p.drain(rng.below(4) as u8);
                        drains += 1;
                    }
                }
                _ => {
                    // Match the pending receives with the messages they wait for.
                    let posted: Vec<RecvSpec> = p.m.posted.iter().map(|r| r.0).collect();
                    for s in posted.into_iter().take(3) {
                        let src = match s.src {
                            Source::Rank(r) => r,
                            Source::Any => 3,
                        };
                        let tag = match s.tag {
                            TagSel::Exact(t) => t,
                            _ => 2,
                        };
                        p.arrive(s.comm, src, tag);
                    }
                }
            }
        }
    }
    // The walks reach the empty queue often (each drain is followed by arrivals meeting
    // the kept or forgotten kinds).
    assert!(drains > 200, "{drains} drains");
}
