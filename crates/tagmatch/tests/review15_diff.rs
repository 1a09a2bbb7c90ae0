//! Review 15: random sequences of receives (wildcards, masks, untagged, into buffers,
//! slots), sends from a peer and from the endpoint itself (regular, injected, delivery
//! complete), probes, claims, claimed receives and cancels, run on the fast path, the
//! protocol path and a fast-path receiver with a protocol-path sender (and, with one
//! sender, the protocol path over UDP): every operation must come to the same outcome on
//! all of them.

mod common;

use common::ep;
use tagmatch::{
    Endpoint, Error, MemFabric, Message, Peer, Request, SendOptions, Source, TagMatch, ANY_SOURCE,
    ANY_TAG,
};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 17
    }

    fn pick(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What one step came to, comparable across paths (peers as "a"/"self"/"-").
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Posted(Result<(), String>),
    Probe(Option<(u64, u64, &'static str)>),
    Claim(Option<(u64, u64, &'static str)>),
    Cancel(Result<(), String>),
    Sent,
    /// A receive's outcome: status, tag, length, data, source, CQ data.
    Recv(
        Result<(), String>,
        u64,
        u64,
        Vec<u8>,
        &'static str,
        Option<u64>,
    ),
}

fn err_name(e: &Error) -> String {
    match e {
        Error::UnknownRequest(_) => "UnknownRequest".into(),
        Error::Failed { error, .. } => format!("Failed {error:?}"),
        e => format!("{e}"),
    }
}

/// Both endpoints progress for a while (in-process: every message sent so far has
/// arrived and been matched or queued).
fn settle(a: &mut Endpoint, b: &mut Endpoint) {
    let udp = a.transport() == "udp";
    for _ in 0..if udp { 4 } else { 1 } {
        for _ in 0..60 {
            a.progress().unwrap();
            b.progress().unwrap();
        }
        if udp {
            // Every datagram acknowledged both ways (so taken in by its receiver).
            let limit = std::time::Duration::from_millis(2);
            for _ in 0..1000 {
                if a.flush(limit).unwrap() & b.flush(limit).unwrap() {
                    break;
                }
            }
        }
    }
}

/// `budget`: the receiver holds at most this many unexpected messages (the rest wait at
/// their sender, fast path, or are refused and redelivered, protocol path); `big`: some
/// sends are medium and long messages.
fn run(kind: &str, seed: u64, budget: Option<usize>, big: bool) -> Vec<Seen> {
    let f = MemFabric::new();
    let udp = kind == "udp";
    let solo = udp || kind == "proto-solo";
    let kind = if kind == "proto-solo" { "proto" } else { kind };
    let mut a = if udp {
        common::udp_pair().0
    } else {
        ep(&f, kind == "fast")
    };
    let mut bb = if udp {
        Endpoint::builder().udp("127.0.0.1:0".parse().unwrap())
    } else {
        Endpoint::builder().mem(&f).fast_path(kind != "proto")
    };
    if let Some(n) = budget {
        bb = bb.memory_budget(1 << 24, n);
    }
    let mut b = bb.build().unwrap();
    let ab = a.insert_peer(&b.address()).unwrap();
    let ba = b.insert_peer(&a.address()).unwrap();
    let me = b.insert_peer(&b.address()).unwrap();
    let name = |p: Option<Peer>| match p {
        Some(p) if p == ba => "a",
        Some(p) if p == me => "self",
        _ => "-",
    };
    let mut g = Lcg(seed * 0x9e37_79b9 + 7);
    let tags = [1u64, 2, 3, 0x11, 0x12];
    let sels = [
        ANY_TAG,
        TagMatch::exact(1),
        TagMatch::exact(2),
        TagMatch::exact(0x11),
        TagMatch::masked(0x10, 0xf0),
        TagMatch::ignoring(0, 0xf0),
    ];
    let mut seen = Vec::new();
    // Receives by step: request (or slot), and whether it is a slot's.
    let mut recvs: Vec<(usize, Request)> = Vec::new();
    let mut slots: Vec<(usize, tagmatch::RecvSlot, Request)> = Vec::new();
    let mut claims: Vec<Message> = Vec::new();
    let mut sends: Vec<Request> = Vec::new();
    let dc = SendOptions {
        cq_data: Some(0xcd),
        delivery_complete: true,
    };
    let trace = std::env::var("REVIEW15_TRACE").is_ok();
    for step in 0..70usize {
        if trace {
            println!(
                "{kind} step {step}: unexpected {} claimed {} posted {} refused {} seen {:?}",
                b.stats().unexpected,
                b.stats().matching.claimed_depth,
                b.stats().matching.posted_depth,
                b.stats().rdm.rx_refused,
                seen.last()
            );
        }
        let src: Source = match g.pick(3) {
            0 => ANY_SOURCE,
            1 => ba.into(),
            _ => me.into(),
        };
        let sel = sels[g.pick(sels.len() as u64) as usize];
        let len = if big && g.pick(4) == 0 {
            [10_000usize, 300_000][g.pick(2) as usize]
        } else {
            [0usize, 4, 8, 40][g.pick(4) as usize]
        };
        let op = g.pick(14);
        if trace {
            println!("  op {op} src {src:?} sel {sel:?} len {len}");
        }
        match op {
            0..=2 => {
                let r = b.trecv(src, sel, len);
                seen.push(Seen::Posted(r.as_ref().map(|_| ()).map_err(err_name)));
                if let Ok(r) = r {
                    recvs.push((step, r));
                }
            }
            3 => {
                let r = b.recv_into(src, vec![0xee; len]);
                seen.push(Seen::Posted(r.as_ref().map(|_| ()).map_err(err_name)));
                if let Ok(r) = r {
                    recvs.push((step, r));
                }
            }
            4 => {
                let s = b.recv_slot(len);
                let r = b.tpost_slot(&s, src, sel);
                seen.push(Seen::Posted(r.as_ref().map(|_| ()).map_err(err_name)));
                if let Ok(r) = r {
                    slots.push((step, s, r));
                }
            }
            5..=8 => {
                let tag = tags[g.pick(tags.len() as u64) as usize];
                let n = if big && g.pick(5) == 0 {
                    [20_000usize, 200_000][g.pick(2) as usize]
                } else {
                    [0usize, 5, 8, 33][g.pick(4) as usize]
                };
                let data: Vec<u8> = (0..n).map(|i| (step * 3 + i * 7) as u8).collect();
                // With a budget, one sender only: messages of two senders that both
                // wait for room may enter in either order (no order across sources).
                let own = g.pick(3) == 0 && budget.is_none() && !solo;
                let (x, to) = if own { (&mut b, me) } else { (&mut a, ab) };
                let how = g.pick(4);
                if trace {
                    println!("  send own {own} tag {tag} len {n} how {how}");
                }
                match how {
                    0 => x.tinject(to, tag, &data).unwrap(),
                    1 => sends.push(x.tsend_with(to, tag, data, dc).unwrap()),
                    2 if tag == 3 => x.inject(to, &data).unwrap(),
                    _ => sends.push(x.tsend(to, tag, data).unwrap()),
                }
                seen.push(Seen::Sent);
            }
            9 => {
                let p = if g.pick(4) == 0 {
                    b.probe(src)
                } else {
                    b.tprobe(src, sel)
                };
                seen.push(Seen::Probe(p.map(|p| (p.tag, p.len, name(Some(p.source))))));
            }
            10 => {
                let m = b.tmprobe(src, sel);
                seen.push(Seen::Claim(
                    m.as_ref()
                        .map(|m| (m.info.tag, m.info.len, name(Some(m.info.source)))),
                ));
                claims.extend(m);
            }
            11 => {
                if !claims.is_empty() {
                    let m = claims.remove(g.pick(claims.len() as u64) as usize);
                    let r = if g.pick(2) == 0 {
                        b.mrecv(m, len)
                    } else {
                        b.mrecv_into(m, vec![0xee; len])
                    };
                    seen.push(Seen::Posted(r.as_ref().map(|_| ()).map_err(err_name)));
                    if let Ok(r) = r {
                        recvs.push((step, r));
                    }
                }
            }
            _ => {
                // Cancel a receive or slot of an earlier step (maybe already matched).
                let n = recvs.len() + slots.len();
                if n > 0 {
                    let k = g.pick(n as u64) as usize;
                    let r = if k < recvs.len() {
                        recvs[k].1
                    } else {
                        slots[k - recvs.len()].2
                    };
                    seen.push(Seen::Cancel(b.cancel(r).map_err(|e| err_name(&e))));
                }
            }
        }
        settle(&mut a, &mut b);
    }
    if trace {
        let (sa, sb) = (a.stats(), b.stats());
        println!(
            "{kind} end: b unexpected {} posted {} claimed {} rdm refused {} in_flight rx {} fast_backpressure {}; a tx {} sends pending {}",
            sb.unexpected,
            sb.matching.posted_depth,
            sb.matching.claimed_depth,
            sb.rdm.rx_refused,
            sb.rx_in_flight,
            sb.facade.fast_backpressure,
            sa.tx_in_flight,
            sa.device_sends_pending
        );
    }
    // Every receive's outcome, by the step that posted it (those still waiting: none).
    let mut outcomes: Vec<(usize, Seen)> = Vec::new();
    for (step, r) in &recvs {
        let c = b.take_completion(*r);
        outcomes.push((
            *step,
            match c {
                None => Seen::Posted(Err("pending".into())),
                Some(c) => Seen::Recv(
                    c.status().map_err(|e| format!("{e:?}")),
                    c.tag,
                    c.len,
                    c.data.clone(),
                    name(c.source()),
                    c.cq_data(),
                ),
            },
        ));
    }
    for (step, s, _) in &slots {
        let out = match b.slot_done(s) {
            None => Seen::Posted(Err("pending".into())),
            Some(Ok(i)) => Seen::Recv(
                Ok(()),
                i.tag,
                i.len,
                b.slot_data(s).unwrap().to_vec(),
                name(Some(i.source)),
                i.cq_data,
            ),
            Some(Err(e)) => Seen::Recv(
                Err(err_name(&e)),
                0,
                0,
                b.slot_data(s).unwrap().to_vec(),
                "-",
                None,
            ),
        };
        outcomes.push((*step, out));
    }
    outcomes.sort_by_key(|(s, _)| *s);
    seen.extend(outcomes.into_iter().map(|(_, o)| o));
    // What is left unexpected, by probing it all away.
    while let Some(m) = b.tmprobe(ANY_SOURCE, ANY_TAG) {
        seen.push(Seen::Claim(Some((
            m.info.tag,
            m.info.len,
            name(Some(m.info.source)),
        ))));
    }
    while let Some(m) = b.mprobe(ANY_SOURCE) {
        seen.push(Seen::Claim(Some((
            m.info.tag,
            m.info.len,
            name(Some(m.info.source)),
        ))));
    }
    for s in sends {
        let done = a.take_completion(s).or_else(|| b.take_completion(s));
        assert!(
            done.is_none_or(|c| c.is_ok()),
            "{kind} seed {seed}: send failed"
        );
    }
    seen
}

/// The three paths agree on every step of 60 random sequences (a third of them against
/// a receiver whose budget holds 3 unexpected messages, from one sender; a third with
/// medium and long messages). Guards: any difference
/// between the fast path's matcher (receives held aside, windows, slots, self-sends
/// delivered inside the call, claims of protocol messages) and the protocol endpoint's
/// matching, cancel or truncation.
#[test]
fn random_sequences_come_out_the_same_on_every_path() {
    // How often each kind of outcome occurred (the sequences must reach them all).
    let mut kinds = std::collections::BTreeMap::<String, u32>::new();
    for seed in 0..60 {
        let (budget, big) = match seed % 3 {
            0 => (None, false),
            1 => (Some(3), false),
            _ => (None, true),
        };
        let proto = run("proto", seed, budget, big);
        for s in &proto {
            let k = match s {
                Seen::Recv(Ok(()), ..) => "received".to_string(),
                Seen::Recv(Err(e), ..) => e.split(' ').take(2).collect::<Vec<_>>().join(" "),
                Seen::Cancel(r) => format!("cancel {r:?}"),
                Seen::Claim(Some(_)) => "claimed".into(),
                Seen::Probe(Some(_)) => "probed".into(),
                Seen::Posted(Err(e)) => e.clone(),
                _ => continue,
            };
            *kinds.entry(k).or_default() += 1;
        }
        let fast = run("fast", seed, budget, big);
        let mixed = run("mixed", seed, budget, big);
        for (kind, got) in [("fast", &fast), ("mixed", &mixed)] {
            if kind == "mixed" && budget.is_some() {
                // See `a_full_mixed_receiver_matches_as_the_protocol_path`.
                continue;
            }
            if let Some(i) = (0..proto.len().max(got.len())).find(|&i| proto.get(i) != got.get(i)) {
                panic!(
                    "seed {seed}: {kind} differs from proto at entry {i}: {:?} vs {:?}\nproto {proto:?}\n{kind} {got:?}",
                    got.get(i),
                    proto.get(i)
                );
            }
        }
    }
    println!("{kinds:?}");
    for k in [
        "received",
        "Truncated {",
        "Failed Canceled",
        "cancel Ok(())",
        "cancel Err(\"UnknownRequest\")",
        "claimed",
        "probed",
    ] {
        assert!(kinds.get(k).is_some_and(|n| *n >= 5), "{k}: {kinds:?}");
    }
}

/// The protocol path over UDP against the same path in process, on sequences with one
/// sender (a self-send's arrival relative to a UDP peer's depends on timing): with every
/// datagram acknowledged between steps, both come out the same. Guards: the UDP device's
/// retransmissions, batching, immediate sends and receiver-not-ready redelivery changing
/// what a receive, probe, claim or cancel sees.
#[test]
fn udp_sequences_come_out_as_in_process() {
    for seed in 0..20 {
        let (budget, big) = match seed % 3 {
            0 => (None, false),
            1 => (Some(3), false),
            _ => (None, true),
        };
        let proto = run("proto-solo", seed, budget, big);
        let udp = run("udp", seed, budget, big);
        if let Some(i) = (0..proto.len().max(udp.len())).find(|&i| proto.get(i) != udp.get(i)) {
            panic!(
                "seed {seed}: udp differs at {i}: {:?} vs {:?}",
                udp.get(i),
                proto.get(i)
            );
        }
    }
}

/// The budget sequences with a fast-path receiver and a protocol-path sender: 6 of the
/// 20 (seeds 25, 28, 37, 52, 55, 58) differ from the protocol path, each at an untagged
/// message of `a` that the protocol path delivered to a waiting receive (or showed to a
/// probe) and the mixed path left unclaimed. Found in review 15, not fixed: the protocol
/// path admits a peer's messages in order (one refused for the budget holds back the
/// later ones, tagged or not), while with the fast path the protocol endpoint admits up
/// to its own budget of unclaimed messages beyond the fast engine's, and the fast path
/// claims them tagged first, then untagged, stopping at the first its full engine
/// refuses. Claiming each kind apart (one stalled message per kind) flipped the
/// difference (seeds 4, 37, 43, 55: the mixed path then delivered what the protocol
/// path held back): matching the protocol path needs the claims in the peer's arrival
/// order across both kinds, which the protocol endpoint's `tmprobe`/`mprobe` do not
/// give. `REVIEW15_TRACE=1` prints each step.
///
/// Until that is done this test pins the divergence down: exactly those six seeds
/// differ. It fails when one more differs (a regression) and when one stops differing
/// (then narrow or drop this list, or turn the test back into "none differ").
#[test]
fn a_full_mixed_receiver_differs_from_the_protocol_path_only_where_known() {
    const KNOWN: [u64; 6] = [25, 28, 37, 52, 55, 58];
    let mut differ = Vec::new();
    let mut at = Vec::new();
    for seed in (1..60).step_by(3) {
        let proto = run("proto", seed, Some(3), false);
        let mixed = run("mixed", seed, Some(3), false);
        if let Some(i) = (0..proto.len().max(mixed.len())).find(|&i| proto.get(i) != mixed.get(i)) {
            differ.push(seed);
            at.push((seed, i, proto.get(i).cloned(), mixed.get(i).cloned()));
        }
    }
    assert_eq!(differ, KNOWN, "(seed, entry, proto, mixed): {at:?}");
}
