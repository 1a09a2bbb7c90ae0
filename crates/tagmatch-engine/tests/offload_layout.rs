//! Properties of the tag bit layout and of class intersection, on which the prefix rule
//! rests: an offloaded entry matches exactly the envelopes its receive matches (saturated
//! fields included), and `specs_intersect` is exactly "some envelope matches both".

use std::sync::atomic::{AtomicUsize, Ordering};

use quickcheck::{Arbitrary, Gen, QuickCheck};

/// Cases with an encodable receive, and matching envelopes checked in them.
static ENCODED: AtomicUsize = AtomicUsize::new(0);
static MATCHING: AtomicUsize = AtomicUsize::new(0);
use tagmatch_engine::offload::{specs_intersect, TagLayout};
use tagmatch_engine::{Envelope, RecvSpec, Source, TagSel};

/// Small values with the interesting edges of a layout with 2-bit comm, 3-bit src and
/// 4-bit tag fields (all-ones values 3, 7, 15) and of the full ranges.
fn val(g: &mut Gen, edges: &[u64]) -> u64 {
    if bool::arbitrary(g) {
        edges[usize::arbitrary(g) % edges.len()]
    } else {
        u64::arbitrary(g) % 20
    }
}

#[derive(Clone, Debug)]
struct Case {
    layout: (u8, u8, u8),
    spec: RecvSpec,
    envs: Vec<Envelope>,
}

fn spec(g: &mut Gen) -> RecvSpec {
    let comm = val(g, &[0, 2, 3, 4, u64::from(u32::MAX)]) as u32;
    let src = match u8::arbitrary(g) % 3 {
        0 => Source::Any,
        _ => Source::Rank(val(g, &[6, 7, 8, u64::from(u32::MAX)]) as u32),
    };
    let tag = match u8::arbitrary(g) % 4 {
        0 => TagSel::Any,
        1 | 2 => TagSel::Exact(val(g, &[14, 15, 16, u64::MAX])),
        _ => TagSel::Masked {
            want: val(g, &[15, 1 << 40, u64::MAX]),
            mask: [1, 3, 0xf, !0u64 << 4 | 3, !0u64 << 2, !0u64, 0][usize::arbitrary(g) % 7],
        },
    };
    RecvSpec { comm, src, tag }
}

fn env(g: &mut Gen) -> Envelope {
    Envelope::new(
        val(g, &[0, 2, 3, 4, u64::from(u32::MAX)]) as u32,
        val(g, &[6, 7, 8, u64::from(u32::MAX)]) as u32,
        val(g, &[14, 15, 16, 1 << 40, u64::MAX]),
    )
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Self {
        let layout = *g
            .choose(&[
                (2, 3, 4),
                (20, 20, 24),
                (0, 32, 32),
                (32, 32, 0),
                (1, 1, 62),
            ])
            .unwrap_or(&(2, 3, 4));
        let spec = spec(g);
        // Envelopes that match the spec (by construction) and arbitrary ones.
        let mut envs: Vec<Envelope> = (0..16).map(|_| env(g)).collect();
        for e in envs.clone() {
            let mut m = e;
            m.comm = spec.comm;
            if let Source::Rank(s) = spec.src {
                m.src = s;
            }
            match spec.tag {
                TagSel::Exact(t) => m.tag = t,
                TagSel::Masked { want, mask } => m.tag = (e.tag & !mask) | (want & mask),
                TagSel::Any => {}
            }
            envs.push(m);
        }
        Case { layout, spec, envs }
    }
}

#[test]
fn entries_match_exactly_the_receives_match_set() {
    fn prop(c: Case) -> bool {
        let (cb, sb, tb) = c.layout;
        let l = TagLayout::new(cb, sb, tb).expect("valid layout");
        let Some((tag, mask)) = l.entry(&c.spec) else {
            return true;
        };
        ENCODED.fetch_add(1, Ordering::Relaxed);
        let m = c.envs.iter().filter(|e| c.spec.matches(e)).count();
        MATCHING.fetch_add(m, Ordering::Relaxed);
        c.envs
            .iter()
            .all(|e| (l.encode(e) & mask == tag & mask) == c.spec.matches(e))
    }
    QuickCheck::new()
        .tests(20_000)
        .quickcheck(prop as fn(Case) -> bool);
    let (enc, m) = (
        ENCODED.load(Ordering::Relaxed),
        MATCHING.load(Ordering::Relaxed),
    );
    eprintln!("{enc} encodable receives, {m} matching envelopes checked");
    assert!(enc > 1_000 && m > 10_000, "{enc} {m}");
}

#[test]
fn encodable_receives_are_common_enough() {
    // The property above must not hold vacuously.
    let l = TagLayout::new(2, 3, 4).unwrap();
    let mut n = 0;
    for comm in 0..5 {
        for src in [None, Some(0), Some(6), Some(7)] {
            for tag in [None, Some(0), Some(14), Some(15)] {
                n += usize::from(l.entry(&RecvSpec::new(comm, src, tag)).is_some());
            }
        }
    }
    assert_eq!(n, 3 * 3 * 3);
}

#[test]
fn specs_intersect_iff_some_envelope_matches_both() {
    // Exhaustive over a small domain: sources 0..3, tags 0..8, masks over 3 bits.
    let mut specs = Vec::new();
    for src in [Source::Any, Source::Rank(0), Source::Rank(2)] {
        let mut tags = vec![TagSel::Any];
        tags.extend((0..8).map(TagSel::Exact));
        for mask in 1..8u64 {
            for want in 0..8u64 {
                tags.push(TagSel::Masked { want, mask });
            }
        }
        for tag in tags {
            specs.push(RecvSpec { comm: 0, src, tag });
        }
    }
    let envs: Vec<Envelope> = (0..3)
        .flat_map(|s| (0..16).map(move |t| Envelope::new(0, s, t)))
        .collect();
    for a in &specs {
        for b in &specs {
            // Masks only look at 3 bits, so tags 0..16 cover every combination.
            let witness = envs.iter().any(|e| a.matches(e) && b.matches(e));
            assert_eq!(specs_intersect(a, b), witness, "{a:?} {b:?}");
        }
        let other = RecvSpec { comm: 1, ..*a };
        assert!(!specs_intersect(a, &other));
    }
}
