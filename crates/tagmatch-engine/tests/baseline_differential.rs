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

fn run_engine(steps: &[Step]) -> Outcome {
    let mut e: Engine<u32, u32> = Engine::new(
        Config::default()
            .max_messages(usize::MAX)
            .max_posted(usize::MAX)
            .max_bytes(usize::MAX),
    );
    let mut pending: Vec<(u32, RecvHandle)> = Vec::new();
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let id = i as u32;
        out.push(match *s {
            Step::Post {
                comm,
                src,
                tag,
                masked,
            } => match e.post(spec(comm, src, tag, masked), id).unwrap() {
                Posted::Matched(m) => Some(m.msg),
                Posted::Pending(h) => {
                    pending.push((id, h));
                    None
                }
            },
            Step::Arrive { comm, src, tag } => {
                match e.arrive(Envelope::new(comm, src, tag), 0, id).unwrap() {
                    Arrived::Matched(m) => {
                        pending.retain(|(r, _)| *r != m.recv);
                        Some(m.recv)
                    }
                    Arrived::Unexpected(_) => None,
                }
            }
            Step::Cancel { pick } => cancel_pick(&mut pending, pick).map(|(r, h)| {
                assert_eq!(e.cancel(h).unwrap(), r);
                r
            }),
        });
    }
    let c = e.counters();
    (out, (c.posted_depth, c.unexpected_depth))
}

fn cancel_pick<T: Copy>(pending: &mut Vec<(u32, T)>, pick: usize) -> Option<(u32, T)> {
    (!pending.is_empty()).then(|| pending.remove(pick % pending.len()))
}

fn run_baseline<B: Matcher + Default>(steps: &[Step]) -> Outcome {
    let mut b = B::default();
    let mut pending: Vec<(u32, ())> = Vec::new();
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
                    pending.push((id, ()));
                }
                m
            }
            Step::Arrive { comm, src, tag } => {
                let r = b.arrive(Envelope::new(comm, src, tag), id);
                if let Some(r) = r {
                    pending.retain(|(p, _)| *p != r);
                }
                r
            }
            Step::Cancel { pick } => cancel_pick(&mut pending, pick).map(|(r, ())| {
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
    let l = run_baseline::<Linear>(&steps);
    let u = run_baseline::<UcxLike>(&steps);
    let o = run_baseline::<Ob1Like>(&steps);
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

#[test]
fn generator_makes_matches_on_both_sides_and_cancels() {
    // The property above is only as strong as the sequences: they must pair receives
    // that were posted first, messages that arrived first, and cancel pending receives.
    let mut g = Gen::new(60);
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
