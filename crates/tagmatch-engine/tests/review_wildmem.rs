//! Review of merge d2c6987 (`wildmem`): a communicator's dense (comm, src) / (comm, tag)
//! list-head array is allocated or grown only when the queued entries pay for it (8 B
//! per entry and kind, directory included); until then its lists are in the hash index,
//! and the array the entries first pay for takes them over.
//!
//! - Seeded random walks against the reference model in `model/` whose depth oscillates
//!   around the thresholds at which arrays are paid for (ballast receives posted in
//!   batches and cancelled at once), so that non-empty lists, posted and unexpected,
//!   move from the hash index into arrays (new, grown, or taken into a widening
//!   directory) between any two operations: receives of every kind (general masks
//!   included), arrivals in order and reordered (`Walk::deliver_ahead`), probes,
//!   claims, cancels, bulk cancels and purges; communicators 0, 3, 100, 4095, 4096,
//!   `u32::MAX`; keys near 2^16. Lazy and eager wildcard lists. The driver is the
//!   shared `model::walk::Walk`.
//! - Work and memory: the heap bytes the engine (re)allocates per operation in a steady
//!   state must stay O(1) per operation, whatever other lists the hash index holds.

mod model;

use model::walk::{each_seed, Bytes, Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

const WINDOW: u32 = 8;

/// Engine and model side by side (the model with the engine's budgets): depths, bytes
/// and pressure checked by the caller (after every step of a walk), receives matched
/// stay in `handles` (a cancel through one must be refused by both), claims and
/// handles picked by `swap_remove`.
fn pair(eager: bool) -> Walk {
    let cfg = Config::default()
        .reorder_window(WINDOW)
        .max_messages(1 << 22)
        .max_posted(1 << 22)
        .initial_seq(0)
        .eager_wildcard_lists(eager);
    let opts = Opts {
        bytes: Bytes::Model,
        pressure: true,
        check_each: false,
        held_api: false,
        retire: false,
        swap_remove: true,
    };
    Walk::new(cfg, opts)
}

/// Communicators: directory ids (0, 3, 100: covered only once the directory widens,
/// 4095: its last), and far ones (4096, `u32::MAX`).
const COMMS: [u32; 6] = [0, 3, 100, 4095, 4096, u32::MAX];

/// The ballast communicator (exact receives only: they pay for arrays, hold none).
const BALLAST: u32 = 9;

/// A key: mostly small (several entries per list), sometimes up to 2^16 + 1.
fn key(r: &mut Rng) -> u64 {
    match r.below_usize(20) {
        0..=12 => r.below(24),
        13..=16 => r.below(300),
        17 => r.below(1 << 16),
        18 => [65_534, 65_535, 65_536, 65_537][r.below_usize(4)],
        _ => 1000 + r.below(3000),
    }
}

fn spec_of(r: &mut Rng, env: &Envelope) -> RecvSpec {
    match r.below_usize(12) {
        0..=2 => RecvSpec::exact(env.comm, env.src, env.tag),
        3..=5 => RecvSpec::new(env.comm, Some(env.src), None),
        6..=8 => RecvSpec::new(env.comm, None, Some(env.tag)),
        9 => RecvSpec::new(env.comm, None, None),
        10 => RecvSpec::masked(env.comm, Source::Rank(env.src), env.tag & 1, 1),
        _ => RecvSpec::masked(env.comm, Source::Any, env.tag & 3, 3),
    }
}

/// One walk: every step against the model; the ballast moves the depth across the
/// thresholds at which the arrays are paid for.
fn walk(seed: u64, eager: bool, steps: usize) {
    let mut p = pair(eager);
    let mut r = Rng::new(seed);
    let mut ballast_tag = 0u64;
    for step in 0..steps {
        let comm = COMMS[r.below_usize(COMMS.len())];
        let env = Envelope::new(comm, key(&mut r) as u32, key(&mut r));
        match r.below_usize(100) {
            0..=17 => {
                p.arrive(env, 1);
            }
            // Sequenced: the next in order, or a message up to `WINDOW` - 1 past it
            // (held in the reorder buffer while lists move into arrays).
            18..=25 => {
                let ahead = if r.chance(50) {
                    0
                } else {
                    r.below(WINDOW as u64)
                };
                // Refusals (a duplicate of a held one) are checked against the model.
                let _ = p.deliver_ahead(env, 1, ahead as u32);
            }
            26..=43 => {
                let s = spec_of(&mut r, &env);
                p.post(s);
            }
            44..=48 => {
                let s = spec_of(&mut r, &env);
                p.probe(s);
            }
            49..=51 => {
                let s = spec_of(&mut r, &env);
                p.mprobe(s);
            }
            52..=53 if !p.claims.is_empty() => p.mrecv(r.below_usize(1 << 20)),
            54..=61 if !p.handles.is_empty() => p.cancel(r.below_usize(1 << 20)),
            62..=64 => p.first_posted(env),
            65..=76 => {
                // Ballast: the depth climbs by up to 40 entries.
                for _ in 0..1 + r.below_usize(40) {
                    ballast_tag += 1;
                    p.post(RecvSpec::exact(BALLAST, 0, ballast_tag));
                }
            }
            77..=80 => p.cancel_where("ballast", |s| s.comm == BALLAST),
            81 => {
                let (c, src) = (env.comm, env.src);
                p.cancel_where("(comm, src)", move |s| {
                    s.comm == c && s.src == Source::Rank(src)
                });
            }
            82 => {
                p.purge_peer(env.src);
            }
            83 => {
                p.purge_comm(comm);
            }
            84 => p.drain_any_comm(comm),
            85..=87 => {
                // A burst of lists with distinct keys on one side.
                let n = r.below_usize(if step % 7 == 0 { 1500 } else { 120 });
                let start = r.below(1 << 16);
                let what = r.below_usize(4);
                for i in 0..n as u64 {
                    let x = (start + i) & 0xffff;
                    match what {
                        0 => {
                            p.arrive(Envelope::new(comm, x as u32, x), 1);
                        }
                        1 => {
                            p.post(RecvSpec::new(comm, Some(x as u32), None));
                        }
                        2 => {
                            p.post(RecvSpec::new(comm, None, Some(x)));
                        }
                        _ => {
                            p.post(RecvSpec::new(comm, None, Some(x % 600)));
                        }
                    }
                }
            }
            88 => {
                // Probes that build the lazy kinds.
                p.probe(RecvSpec::new(comm, Some(env.src), None));
                p.probe(RecvSpec::new(comm, None, Some(env.tag)));
            }
            _ => {}
        }
        p.check("step");
    }
    for c in COMMS.into_iter().chain([BALLAST]) {
        p.purge_comm(c);
    }
    while !p.claims.is_empty() {
        p.mrecv(p.claims.len() - 1);
    }
    p.check("end");
}

#[test]
fn lists_moving_into_paid_arrays_agree_with_the_model_lazy() {
    each_seed("lazy", 1..11, |seed| walk(seed, false, 3000));
}

#[test]
fn lists_moving_into_paid_arrays_agree_with_the_model_eager() {
    each_seed("eager", 11..21, |seed| walk(seed, true, 3000));
}

/// Non-empty lists of both sides and every wildcard kind taken over mid-queue: FIFO
/// order and the earliest-posted choice across kinds survive the move. Communicator
/// `comm`'s lists are built at depth 1.. (hashed), then ballast pays for its arrays and
/// one push per kind moves them; then every list is drained and compared.
#[test]
fn lists_taken_over_mid_queue_keep_fifo_and_earliest_posted() {
    for eager in [false, true] {
        for comm in [0u32, 100, 4095, 4096, u32::MAX] {
            let mut p = pair(eager);
            // Posted: ANY_TAG on sources 1..6, ANY_SOURCE on tags 1..6, 3 deep each,
            // interleaved so that arrivals must pick the earliest across kinds.
            for round in 0..3 {
                for x in 1..6u32 {
                    p.post(RecvSpec::new(comm, Some(x), None));
                    p.post(RecvSpec::new(comm, None, Some(u64::from(x) + 10 * round)));
                }
            }
            // Unexpected: sources 20..25, tags 20..25 (lazy lists built by a probe).
            for i in 0..12u32 {
                p.arrive(Envelope::new(comm, 20 + i % 5, 20 + u64::from(i % 4)), 1);
            }
            p.probe(RecvSpec::new(comm, Some(20), None));
            p.probe(RecvSpec::new(comm, None, Some(20)));
            // Ballast pays; one new list per kind grows the arrays over the others.
            for t in 0..3000u64 {
                p.post(RecvSpec::exact(BALLAST, 0, t));
            }
            p.post(RecvSpec::new(comm, Some(40), None));
            p.post(RecvSpec::new(comm, None, Some(40)));
            p.arrive(Envelope::new(comm, 41, 41), 1);
            for x in 1..6u32 {
                for t in [u64::from(x), 99] {
                    p.first_posted(Envelope::new(comm, x, t));
                    p.arrive(Envelope::new(comm, x, t), 1);
                }
            }
            for i in 0..12u32 {
                p.post(RecvSpec::new(comm, Some(20 + i % 5), None));
                p.post(RecvSpec::new(comm, None, Some(20 + u64::from(i % 4))));
            }
            p.check("drained");
            p.cancel_where("ballast", |s| s.comm == BALLAST);
            p.purge_comm(comm);
            p.check("end");
        }
    }
}

/// Sum of the heap bytes the engine took on between operations (a proxy for the
/// allocation and the slot-by-slot take-over work, both proportional to the array slots
/// allocated).
struct Churn {
    last: usize,
    taken: usize,
}

impl Churn {
    fn new(e: &Engine<u32, u32>) -> Self {
        Churn {
            last: e.heap_bytes(),
            taken: 0,
        }
    }
    fn step(&mut self, e: &Engine<u32, u32>) {
        let now = e.heap_bytes();
        self.taken += now.saturating_sub(self.last);
        self.last = now;
    }
}

/// Many lists in a kind's hash index that no array can take (tags at and above 2^16)
/// must not let one list of a communicator allocate an array of thousands of slots: an
/// array grows with the lists it (or its own keys past its end) holds. Otherwise,
/// communicators used in turn (each with one ANY_SOURCE receive on tag 4095, cancelled)
/// get a 4,096-slot array each, freed by the next sweep and allocated again — 16 KiB
/// allocated and 4,096 keys looked up in the hash index per receive, for ever, in a
/// steady state where nothing is queued but the same receives.
#[test]
fn one_list_does_not_buy_an_array_sized_by_other_hashed_lists() {
    for eager in [false, true] {
        let mut e: Engine<u32, u32> = Engine::new(Config::default().eager_wildcard_lists(eager));
        // 1,100 ANY_SOURCE receives on large tags (hashed for ever) and 30,000 exact
        // receives (the arrays' budget: 240 KB).
        for t in 0..1100u64 {
            e.post(RecvSpec::new(1, None, Some((1 << 16) + t)), 0)
                .unwrap();
        }
        for t in 0..30_000u64 {
            e.post(RecvSpec::exact(2, 0, t), 0).unwrap();
        }
        // One list on a fresh communicator: its array is at most 4 slots per list plus
        // 64 (and its directory or far entry).
        let before = e.heap_bytes();
        let Ok(Posted::Pending(h)) = e.post(RecvSpec::new(5000, None, Some(4095)), 1) else {
            panic!("nothing queued on communicator 5000")
        };
        let one = e.heap_bytes() - before;
        e.cancel(h).unwrap();
        // Steady state: communicators used in turn, one receive each, cancelled.
        for _ in 0..100 {
            for c in 6000..6012u32 {
                let h = match e.post(RecvSpec::new(c, None, Some(4095)), 1) {
                    Ok(Posted::Pending(h)) => h,
                    _ => panic!(),
                };
                e.cancel(h).unwrap();
            }
        }
        let mut churn = Churn::new(&e);
        let ops = 2 * 100 * 12;
        for _ in 0..100 {
            for c in 6000..6012u32 {
                let h = match e.post(RecvSpec::new(c, None, Some(4095)), 1) {
                    Ok(Posted::Pending(h)) => h,
                    _ => panic!(),
                };
                churn.step(&e);
                e.cancel(h).unwrap();
                churn.step(&e);
            }
        }
        assert!(
            one <= 1024 && churn.taken <= 64 * ops,
            "eager {eager}: one list took {one} B; {} B allocated over {ops} operations in a \
             steady state",
            churn.taken
        );
    }
}

/// The depth oscillating around the thresholds: once the arrays are paid for, a
/// steady cycle (fill with ballast and wildcard receives, drain all) allocates nothing
/// more (the arrays stay; no move back and forth).
#[test]
fn depth_oscillating_around_the_threshold_reaches_a_steady_heap() {
    for eager in [false, true] {
        let mut e: Engine<u32, u32> = Engine::new(Config::default().eager_wildcard_lists(eager));
        let cycle = |e: &mut Engine<u32, u32>, depth: u64| {
            for t in 0..depth {
                e.post(RecvSpec::exact(BALLAST, 0, t), 0).unwrap();
                e.post(RecvSpec::new(3, None, Some(t % 50)), 0).unwrap();
                e.arrive(Envelope::new(4096, (t % 70) as u32, t), 0, 0)
                    .unwrap();
            }
            e.probe(&RecvSpec::new(4096, Some(1), None));
            e.probe(&RecvSpec::new(4096, None, Some(1)));
            assert_eq!(e.cancel_where(|_, _| true, |_, _| {}), 2 * depth as usize);
            e.purge_comm(4096, |_| {});
        };
        for depth in [5u64, 20, 60, 200] {
            for _ in 0..3 {
                cycle(&mut e, depth);
            }
            let mut churn = Churn::new(&e);
            for _ in 0..20 {
                cycle(&mut e, depth);
                churn.step(&e);
            }
            assert_eq!(churn.taken, 0, "eager {eager}, depth {depth}");
        }
    }
}

/// The directory widening to its last entries (4,096) while far arrays of directory
/// communicators (1000, 2000, 4095) and of far ones (4096, `u32::MAX`) hold non-empty
/// lists on both sides (posted ANY_TAG / ANY_SOURCE receives, unexpected messages on
/// built lazy lists): the widening takes the first over with their lists, renumbers
/// the others, and every list keeps its order (against the model).
#[test]
fn the_directory_widening_to_4096_entries_keeps_every_far_arrays_lists() {
    const HOLDERS: [u32; 5] = [1000, 2000, 4095, 4096, u32::MAX];
    for eager in [false, true] {
        let mut p = pair(eager);
        // Ballast first, so that the holders' arrays are paid for at once.
        for t in 0..40_000u64 {
            p.post(RecvSpec::exact(BALLAST, 0, t));
        }
        for &c in &HOLDERS {
            for x in 0..20u32 {
                p.post(RecvSpec::new(c, Some(x), None));
                p.post(RecvSpec::new(c, None, Some(u64::from(x))));
                p.arrive(Envelope::new(c, 100 + x % 7, 100 + u64::from(x % 5)), 1);
            }
            p.probe(RecvSpec::new(c, Some(100), None));
            p.probe(RecvSpec::new(c, None, Some(100)));
            p.arrive(Envelope::new(c, 101, 101), 1);
        }
        // Communicator 3000: 16,400 ANY_SOURCE receives on distinct tags, its (comm,
        // tag) array grows to 2^16 slots, and the directory widens to 4,096 entries.
        for t in 0..16_400u64 {
            p.post(RecvSpec::new(3000, None, Some(t)));
        }
        for &c in &HOLDERS {
            for x in 0..20u32 {
                p.first_posted(Envelope::new(c, x, u64::from(x)));
                p.arrive(Envelope::new(c, x, 99_999), 1);
                p.arrive(Envelope::new(c, 99_999, u64::from(x)), 1);
            }
            for i in 0..8u32 {
                p.post(RecvSpec::new(c, Some(100 + i % 7), None));
                p.post(RecvSpec::new(c, None, Some(100 + u64::from(i % 5))));
            }
            p.drain_any_comm(c);
            p.check("holder drained");
        }
        p.arrive(Envelope::new(3000, 5, 16_399), 1);
        p.purge_comm(3000);
        p.cancel_where("ballast", |s| s.comm == BALLAST);
        p.check("end");
    }
}
