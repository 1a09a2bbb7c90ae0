//! The baselines (`tagmatch_engine::baseline`) against the engine: over random sequences
//! of posts (exact, ANY_TAG, ANY_SOURCE, both, masked), arrivals and cancels on two
//! communicators, every baseline must pair the same receives with the same messages as
//! the engine (which `differential.rs` checks against the reference model), so that the
//! benchmark compares schemes that do the same work.

use quickcheck::{Arbitrary, Gen, QuickCheck};
use tagmatch_engine::baseline::{Linear, Matcher, Ob1Like, UcxLike};
use tagmatch_engine::*;

#[derive(Clone, Debug)]
enum Step {
    Post {
        comm: u32,
        src: Option<u32>,
        tag: Option<u64>,
        masked: bool,
    },
    Arrive {
        comm: u32,
        src: u32,
        tag: u64,
    },
    Cancel {
        pick: usize,
    },
}

impl Arbitrary for Step {
    fn arbitrary(g: &mut Gen) -> Self {
        let comm = u32::arbitrary(g) % 2;
        match u8::arbitrary(g) % 5 {
            0 | 1 => Step::Arrive {
                comm,
                src: u32::arbitrary(g) % 3,
                tag: u64::arbitrary(g) % 4,
            },
            2 | 3 => Step::Post {
                comm,
                src: bool::arbitrary(g).then(|| u32::arbitrary(g) % 3),
                tag: bool::arbitrary(g).then(|| u64::arbitrary(g) % 4),
                masked: u8::arbitrary(g) % 6 == 0,
            },
            _ => Step::Cancel {
                pick: usize::arbitrary(g),
            },
        }
    }
}

/// What each step did (the id it paired with or cancelled, if any) and the depths
/// (pending receives, unexpected messages) at the end.
type Outcome = (Vec<Option<u32>>, (usize, usize));

/// The engine behind the baselines' interface (receive handles kept by receive id).
struct EngineM {
    e: Engine<u32, u32>,
    handles: std::collections::HashMap<u32, RecvHandle>,
}

impl Default for EngineM {
    fn default() -> Self {
        EngineM {
            e: Engine::new(
                Config::default()
                    .max_messages(usize::MAX)
                    .max_posted(usize::MAX)
                    .max_bytes(usize::MAX),
            ),
            handles: Default::default(),
        }
    }
}

impl Matcher for EngineM {
    fn post(&mut self, spec: RecvSpec, rid: u32) -> Option<u32> {
        match self.e.post(spec, rid).unwrap() {
            Posted::Matched(m) => Some(m.msg),
            Posted::Pending(h) => {
                self.handles.insert(rid, h);
                None
            }
        }
    }
    fn arrive(&mut self, env: Envelope, mid: u32) -> Option<u32> {
        match self.e.arrive(env, 0, mid).unwrap() {
            Arrived::Matched(m) => {
                self.handles.remove(&m.recv);
                Some(m.recv)
            }
            Arrived::Unexpected(_) => None,
        }
    }
    fn cancel(&mut self, rid: u32) -> bool {
        match self.handles.remove(&rid) {
            Some(h) => self.e.cancel(h) == Ok(rid),
            None => false,
        }
    }
    fn depths(&self) -> (usize, usize) {
        let c = self.e.counters();
        (c.posted_depth, c.unexpected_depth)
    }
    fn heap_bytes(&self) -> usize {
        self.e.heap_bytes()
    }
}

fn run_engine(steps: &[Step]) -> Outcome {
    run::<EngineM>(steps)
}

/// Runs `steps` on `B`; a cancel picks one of the pending receives and must succeed once.
fn run<B: Matcher + Default>(steps: &[Step]) -> Outcome {
    let mut b = B::default();
    let mut pending: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let id = i as u32;
        out.push(match *s {
            Step::Post {
                comm,
                src,
                tag,
                masked,
            } => {
                let m = b.post(spec(comm, src, tag, masked), id);
                if m.is_none() {
                    pending.push(id);
                }
                m
            }
            Step::Arrive { comm, src, tag } => {
                let r = b.arrive(Envelope::new(comm, src, tag), id);
                if let Some(r) = r {
                    pending.retain(|p| *p != r);
                }
                r
            }
            Step::Cancel { pick } => (!pending.is_empty()).then(|| {
                let r = pending.remove(pick % pending.len());
                assert!(b.cancel(r), "cancel of pending receive {r}");
                assert!(!b.cancel(r), "second cancel of receive {r}");
                r
            }),
        });
    }
    (out, b.depths())
}

fn spec(comm: u32, src: Option<u32>, tag: Option<u64>, masked: bool) -> RecvSpec {
    match (masked, tag) {
        // Odd tags (mask 1, want 1), from a source or any.
        (true, _) => RecvSpec::masked(comm, src.map_or(Source::Any, Source::Rank), 1, 1),
        (false, t) => RecvSpec::new(comm, src, t),
    }
}

fn same_as_engine(steps: Vec<Step>) -> bool {
    let want = run_engine(&steps);
    let l = run::<Linear>(&steps);
    let u = run::<UcxLike>(&steps);
    let o = run::<Ob1Like>(&steps);
    assert_eq!(l, want, "linear");
    assert_eq!(u, want, "ucx-like");
    assert_eq!(o, want, "ob1-like");
    true
}

#[test]
fn baselines_pair_exactly_as_the_engine() {
    QuickCheck::new()
        .tests(1000)
        .rng(Gen::new(120))
        .quickcheck(same_as_engine as fn(Vec<Step>) -> bool);
}

/// The same sequences with every key moved into one UCX hash bucket (communicators,
/// sources and tags multiplied by 1021, which the bucket hash reduces mod 1021 in the
/// OMPI-packed tag): the UCX-like bucket FIFOs then hold receives and messages of
/// different keys, which its scans must skip, and ob1's per-rank arrays grow sparse.
#[test]
fn baselines_pair_exactly_as_the_engine_when_every_key_shares_a_ucx_bucket() {
    fn spread(steps: Vec<Step>) -> bool {
        let steps = steps
            .into_iter()
            .map(|s| match s {
                Step::Post {
                    comm,
                    src,
                    tag,
                    masked,
                } => Step::Post {
                    comm: comm * 1021,
                    src: src.map(|s| s * 1021),
                    tag: tag.map(|t| t * 1021),
                    masked,
                },
                Step::Arrive { comm, src, tag } => Step::Arrive {
                    comm: comm * 1021,
                    src: src * 1021,
                    tag: tag * 1021,
                },
                c => c,
            })
            .collect();
        same_as_engine(steps)
    }
    QuickCheck::new()
        .tests(300)
        .rng(Gen::new(120))
        .quickcheck(spread as fn(Vec<Step>) -> bool);
}

#[test]
fn generator_makes_matches_on_both_sides_and_cancels() {
    // The property above is only as strong as the sequences: they must pair receives
    // that were posted first, messages that arrived first, and cancel pending receives.
    let mut g = Gen::from_size_and_seed(60, 0x6261_7365); // fixed seed: a coverage check must not flake
    let (mut by_post, mut by_arrive, mut cancels) = (0, 0, 0);
    for _ in 0..50 {
        let steps: Vec<Step> = Arbitrary::arbitrary(&mut g);
        for (s, r) in steps.iter().zip(run_engine(&steps).0) {
            match (s, r) {
                (Step::Post { .. }, Some(_)) => by_post += 1,
                (Step::Arrive { .. }, Some(_)) => by_arrive += 1,
                (Step::Cancel { .. }, Some(_)) => cancels += 1,
                _ => {}
            }
        }
    }
    assert!(
        by_post > 50 && by_arrive > 50 && cancels > 20,
        "{by_post} {by_arrive} {cancels}"
    );
}
