//! Baselines: the matching schemes of UCX, Open MPI ob1 and MPICH (ch4 active-message
//! path), re-implemented on the same data-structure habits as the engine, so that
//! `tagmatch bench match --engine …` measures them on exactly the workloads and with
//! exactly the method the engine is measured with (matching-notes §4.2: "Run as
//! baselines: a re-implementation of UCX's bucket+wildcard+sn scheme, ob1's
//! per-peer+wild scheme, and a linear list").
//!
//! They are benchmark references, not alternatives to [`crate::Engine`]: they keep the
//! matching rules (posting order, earliest-arrived message, per-source order) but nothing
//! else (no budgets, sequencing, probes or purges). Each keeps the *search structure* of
//! the scheme it stands for; where the original costs more for reasons that are not the
//! search (UCX's singly-linked queues make a cancel scan its queue; ob1 takes a lock),
//! the baseline does not. One difference goes the other way: an ANY_SOURCE receive on
//! [`Ob1Like`] visits every peer to take the earliest arrival (the engine's rule, so that
//! results compare), where ob1 stops at the first peer with a match.
//!
//! Receives and messages are named by `u32` ids, as in [`crate::workload`]. Receive ids
//! and (for [`Ob1Like`], as ob1's per-rank arrays) source ranks index vectors: give dense
//! ids, as the workloads do; a huge id allocates a vector that long.

use crate::hash::{map_heap_bytes, FastMap};
use crate::workload::{Op, Params, Plan, Workload};
use crate::{Envelope, RecvSpec, Source, TagSel};
use core::fmt;
use core::str::FromStr;

/// The operations a baseline offers (those the workloads use).
pub trait Matcher {
    /// Posts receive `rid`: the id of the message it takes now, if any.
    fn post(&mut self, spec: RecvSpec, rid: u32) -> Option<u32>;
    /// Message `mid` arrives: the id of the receive it matches, if any.
    fn arrive(&mut self, env: Envelope, mid: u32) -> Option<u32>;
    /// Cancels pending receive `rid`; `false` if it is not pending.
    fn cancel(&mut self, rid: u32) -> bool;
    /// Pending receives and unexpected messages.
    fn depths(&self) -> (usize, usize);
    /// Heap bytes of the structures, from their capacities.
    fn heap_bytes(&self) -> usize;
}

/// "No node" in a link.
const NIL: u32 = u32::MAX;

/// Head and tail of one intrusive FIFO.
#[derive(Clone, Copy, Debug)]
struct Chain {
    head: u32,
    tail: u32,
}

impl Default for Chain {
    fn default() -> Self {
        Chain {
            head: NIL,
            tail: NIL,
        }
    }
}

impl Chain {
    fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

/// A slot of a [`Pool`]: the value and its `(prev, next)` pair on each of `L` lists.
#[derive(Clone, Debug)]
struct Slot<T, const L: usize> {
    val: Option<T>,
    links: [(u32, u32); L],
}

/// A slab of values, each on up to `L` doubly-linked FIFOs ([`Chain`]s kept by the caller).
#[derive(Clone, Debug)]
struct Pool<T, const L: usize> {
    slots: Vec<Slot<T, L>>,
    free: Vec<u32>,
    len: usize,
}

impl<T, const L: usize> Default for Pool<T, L> {
    fn default() -> Self {
        Pool {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T, const L: usize> Pool<T, L> {
    fn insert(&mut self, v: T) -> u32 {
        self.len += 1;
        let s = Slot {
            val: Some(v),
            links: [(NIL, NIL); L],
        };
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = s;
                i
            }
            None => {
                self.slots.push(s);
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, i: u32) -> Option<T> {
        let v = self.slots.get_mut(i as usize)?.val.take()?;
        self.len -= 1;
        self.free.push(i);
        Some(v)
    }

    fn get(&self, i: u32) -> &T {
        match &self.slots[i as usize].val {
            Some(v) => v,
            None => unreachable!("baseline invariant: slot {i} on a list is occupied"),
        }
    }

    fn push_back(&mut self, c: &mut Chain, k: usize, i: u32) {
        self.slots[i as usize].links[k] = (c.tail, NIL);
        if c.tail == NIL {
            c.head = i;
        } else {
            self.slots[c.tail as usize].links[k].1 = i;
        }
        c.tail = i;
    }

    fn unlink(&mut self, c: &mut Chain, k: usize, i: u32) {
        let (p, n) = self.slots[i as usize].links[k];
        if p == NIL {
            c.head = n;
        } else {
            self.slots[p as usize].links[k].1 = n;
        }
        if n == NIL {
            c.tail = p;
        } else {
            self.slots[n as usize].links[k].0 = p;
        }
    }

    fn next(&self, k: usize, i: u32) -> u32 {
        self.slots[i as usize].links[k].1
    }

    /// First node of `c` (list `k`) whose value satisfies `f`.
    fn find(&self, c: &Chain, k: usize, mut f: impl FnMut(&T) -> bool) -> Option<u32> {
        let mut i = c.head;
        while i != NIL {
            if f(self.get(i)) {
                return Some(i);
            }
            i = self.next(k, i);
        }
        None
    }

    fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot<T, L>>() + self.free.capacity() * 4
    }
}

/// A posted receive of a baseline.
#[derive(Clone, Copy, Debug)]
struct Recv {
    spec: RecvSpec,
    rid: u32,
    /// Posting sequence number.
    sn: u64,
}

/// An unexpected message of a baseline.
#[derive(Clone, Copy, Debug)]
struct Frag {
    env: Envelope,
    mid: u32,
    /// Arrival sequence number.
    sn: u64,
}

/// Receive id → pool slot of the pending receive (`NIL`: not pending).
#[derive(Clone, Debug, Default)]
struct ByRid(Vec<u32>);

impl ByRid {
    fn set(&mut self, rid: u32, slot: u32) {
        let i = rid as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, NIL);
        }
        self.0[i] = slot;
    }
    fn take(&mut self, rid: u32) -> Option<u32> {
        let s = self.0.get_mut(rid as usize)?;
        let v = core::mem::replace(s, NIL);
        (v != NIL).then_some(v)
    }
    fn heap_bytes(&self) -> usize {
        self.0.capacity() * 4
    }
}

/// What every baseline keeps besides its lists: the receives and messages (messages on
/// `L` lists each), pending receives by id, and one sequence counter (posting order of
/// receives, arrival order of messages).
#[derive(Clone, Debug, Default)]
struct Store<const L: usize> {
    recvs: Pool<Recv, 1>,
    frags: Pool<Frag, L>,
    by_rid: ByRid,
    sn: u64,
}

impl<const L: usize> Store<L> {
    /// A new pending receive (to be linked by the caller).
    fn new_recv(&mut self, spec: RecvSpec, rid: u32) -> u32 {
        self.sn += 1;
        let i = self.recvs.insert(Recv {
            spec,
            rid,
            sn: self.sn,
        });
        self.by_rid.set(rid, i);
        i
    }

    /// A new unexpected message (to be linked by the caller).
    fn new_frag(&mut self, env: Envelope, mid: u32) -> u32 {
        self.sn += 1;
        self.frags.insert(Frag {
            env,
            mid,
            sn: self.sn,
        })
    }

    /// Frees receive `i` (already unlinked): its id.
    fn take_recv(&mut self, i: u32) -> Option<u32> {
        let r = self.recvs.take(i)?;
        self.by_rid.take(r.rid);
        Some(r.rid)
    }

    /// Frees message `i` (already unlinked): its id.
    fn take_frag(&mut self, i: u32) -> Option<u32> {
        self.frags.take(i).map(|f| f.mid)
    }

    /// Of the first matching receive of a keyed list (`a`) and of a wildcard list (`w`),
    /// the earlier posted; `true` if it is the wildcard one.
    fn earlier(&self, a: Option<u32>, w: Option<u32>) -> Option<(u32, bool)> {
        match (a, w) {
            (Some(a), Some(w)) if self.recvs.get(w).sn < self.recvs.get(a).sn => Some((w, true)),
            (Some(a), _) => Some((a, false)),
            (None, Some(w)) => Some((w, true)),
            (None, None) => None,
        }
    }

    fn depths(&self) -> (usize, usize) {
        (self.recvs.len, self.frags.len)
    }

    fn heap_bytes(&self) -> usize {
        self.recvs.heap_bytes() + self.frags.heap_bytes() + self.by_rid.heap_bytes()
    }
}

// ---------------------------------------------------------------------------- linear

/// MPICH ch4 active-message path (and ch3): one posted list and one unexpected list,
/// each searched linearly from the front (matching-notes §4.1: "single linear list per
/// VCI"). Removal of the found entry is O(1).
#[derive(Clone, Debug, Default)]
pub struct Linear {
    st: Store<1>,
    posted: Chain,
    unexpected: Chain,
}

impl Matcher for Linear {
    fn post(&mut self, spec: RecvSpec, rid: u32) -> Option<u32> {
        let st = &mut self.st;
        if let Some(i) = st.frags.find(&self.unexpected, 0, |f| spec.matches(&f.env)) {
            st.frags.unlink(&mut self.unexpected, 0, i);
            return st.take_frag(i);
        }
        let i = st.new_recv(spec, rid);
        st.recvs.push_back(&mut self.posted, 0, i);
        None
    }

    fn arrive(&mut self, env: Envelope, mid: u32) -> Option<u32> {
        let st = &mut self.st;
        if let Some(i) = st.recvs.find(&self.posted, 0, |r| r.spec.matches(&env)) {
            st.recvs.unlink(&mut self.posted, 0, i);
            return st.take_recv(i);
        }
        let i = st.new_frag(env, mid);
        st.frags.push_back(&mut self.unexpected, 0, i);
        None
    }

    fn cancel(&mut self, rid: u32) -> bool {
        let st = &mut self.st;
        match st.by_rid.take(rid) {
            Some(i) => {
                st.recvs.unlink(&mut self.posted, 0, i);
                st.recvs.take(i).is_some()
            }
            None => false,
        }
    }

    fn depths(&self) -> (usize, usize) {
        self.st.depths()
    }

    fn heap_bytes(&self) -> usize {
        self.st.heap_bytes()
    }
}

// ---------------------------------------------------------------------------- UCX

/// matching-notes §1.1: "`UCP_TAG_MATCH_HASH_SIZE 1021`"; the array is allocated
/// rounded up to a power of two.
const UCX_BUCKETS: usize = 1021;

/// matching-notes §1.1: "The hash is `(u32)tag % 1021 ^ (u32)(tag>>32) % 1021` over the
/// whole 64-bit tag. Under OMPI's layout that covers (tag, src, ctx)" — OMPI pml_ucx
/// packs tag:24 | rank:20 | ctx:20 (§1.0) from the most significant bit down
/// (`PML_UCX_MAKE_SEND_TAG`: tag << 40 | rank << 20 | context), as here: the low word
/// holds the context and the rank's low 12 bits, the high word the rest of the rank and
/// the tag.
fn ucx_bucket(env: &Envelope) -> usize {
    let t = ((env.tag & 0xFF_FFFF) << 40)
        | (u64::from(env.src & 0xF_FFFF) << 20)
        | u64::from(env.comm & 0xF_FFFF);
    ((t as u32 % UCX_BUCKETS as u32) ^ ((t >> 32) as u32 % UCX_BUCKETS as u32)) as usize
}

/// UCX's software matcher (`ucp_tag_match_t`, matching-notes §1.1): expected receives
/// with a full mask (exact source and tag) in 1021 hash-bucket FIFOs, every other
/// receive in one wildcard FIFO, merged by posting sequence number on arrival when the
/// wildcard FIFO is not empty; each unexpected message on its bucket's FIFO and on the
/// global `all` FIFO, which a wildcard receive scans.
#[derive(Clone, Debug)]
pub struct UcxLike {
    /// Messages on two lists: 0 their bucket's, 1 `all`.
    st: Store<2>,
    exp_hash: Vec<Chain>,
    exp_wild: Chain,
    unexp_hash: Vec<Chain>,
    unexp_all: Chain,
}

impl Default for UcxLike {
    fn default() -> Self {
        let n = UCX_BUCKETS.next_power_of_two();
        UcxLike {
            st: Store::default(),
            exp_hash: vec![Chain::default(); n],
            exp_wild: Chain::default(),
            unexp_hash: vec![Chain::default(); n],
            unexp_all: Chain::default(),
        }
    }
}

/// The bucket of an exact (full-mask) receive, `None` for any other.
fn ucx_recv_bucket(spec: &RecvSpec) -> Option<usize> {
    match (spec.src, spec.tag) {
        (Source::Rank(s), TagSel::Exact(t)) => Some(ucx_bucket(&Envelope::new(spec.comm, s, t))),
        _ => None,
    }
}

impl Matcher for UcxLike {
    fn post(&mut self, spec: RecvSpec, rid: u32) -> Option<u32> {
        let st = &mut self.st;
        // matching-notes §1.1: "A full-mask receive or probe scans its bucket. A wildcard
        // receive or probe scans `all` linearly".
        let bucket = ucx_recv_bucket(&spec);
        let found = match bucket {
            Some(b) => st
                .frags
                .find(&self.unexp_hash[b], 0, |f| spec.matches(&f.env)),
            None => st.frags.find(&self.unexp_all, 1, |f| spec.matches(&f.env)),
        };
        if let Some(i) = found {
            let fb = ucx_bucket(&st.frags.get(i).env);
            st.frags.unlink(&mut self.unexp_hash[fb], 0, i);
            st.frags.unlink(&mut self.unexp_all, 1, i);
            return st.take_frag(i);
        }
        // "Every posted receive gets `sn = expected.sn++`".
        let i = st.new_recv(spec, rid);
        match bucket {
            Some(b) => st.recvs.push_back(&mut self.exp_hash[b], 0, i),
            None => st.recvs.push_back(&mut self.exp_wild, 0, i),
        }
        None
    }

    fn arrive(&mut self, env: Envelope, mid: u32) -> Option<u32> {
        let st = &mut self.st;
        let b = ucx_bucket(&env);
        // "if the wildcard queue is empty, scan only the bucket. Otherwise … a two-way
        // merge of bucket and wildcard queues by `sn`".
        let in_bucket = st
            .recvs
            .find(&self.exp_hash[b], 0, |r| r.spec.matches(&env));
        let in_wild = if self.exp_wild.is_empty() {
            None
        } else {
            st.recvs.find(&self.exp_wild, 0, |r| r.spec.matches(&env))
        };
        if let Some((i, wild)) = st.earlier(in_bucket, in_wild) {
            if wild {
                st.recvs.unlink(&mut self.exp_wild, 0, i);
            } else {
                st.recvs.unlink(&mut self.exp_hash[b], 0, i);
            }
            return st.take_recv(i);
        }
        let i = st.new_frag(env, mid);
        st.frags.push_back(&mut self.unexp_hash[b], 0, i);
        st.frags.push_back(&mut self.unexp_all, 1, i);
        None
    }

    fn cancel(&mut self, rid: u32) -> bool {
        let st = &mut self.st;
        let Some(i) = st.by_rid.take(rid) else {
            return false;
        };
        match ucx_recv_bucket(&st.recvs.get(i).spec) {
            Some(b) => st.recvs.unlink(&mut self.exp_hash[b], 0, i),
            None => st.recvs.unlink(&mut self.exp_wild, 0, i),
        }
        st.recvs.take(i).is_some()
    }

    fn depths(&self) -> (usize, usize) {
        self.st.depths()
    }

    fn heap_bytes(&self) -> usize {
        self.st.heap_bytes()
            + (self.exp_hash.capacity() + self.unexp_hash.capacity())
                * core::mem::size_of::<Chain>()
    }
}

// ---------------------------------------------------------------------------- ob1

/// Per (communicator, peer) state of [`Ob1Like`].
#[derive(Clone, Copy, Debug, Default)]
struct Proc {
    specific: Chain,
    unexpected: Chain,
}

/// Per communicator state of [`Ob1Like`].
#[derive(Clone, Debug, Default)]
struct Comm {
    wild: Chain,
    /// Indexed by source rank.
    procs: Vec<Proc>,
}

/// Open MPI ob1 (matching-notes §1.3): per communicator a `wild_receives` FIFO
/// (ANY_SOURCE receives) and per (communicator, peer) `specific_receives` (exact and
/// ANY_TAG receives, matched by comparison) and `unexpected_frags`. An arrival merges the
/// peer's specific receives with the wild ones by sequence number; a specific-source
/// receive scans that peer's unexpected messages; an ANY_SOURCE receive walks every
/// peer. ob1 takes the first match found walking round-robin from `last_probed`; this
/// baseline walks all of them and takes the earliest arrival (the engine's rule, so
/// results compare), at the same O(P + U) cost.
#[derive(Clone, Debug, Default)]
pub struct Ob1Like {
    comms: FastMap<u32, Comm>,
    st: Store<1>,
}

impl Ob1Like {
    fn proc_mut(c: &mut Comm, src: u32) -> &mut Proc {
        let i = src as usize;
        if c.procs.len() <= i {
            c.procs.resize(i + 1, Proc::default());
        }
        &mut c.procs[i]
    }
}

impl Matcher for Ob1Like {
    fn post(&mut self, spec: RecvSpec, rid: u32) -> Option<u32> {
        let st = &mut self.st;
        let c = self.comms.entry(spec.comm).or_default();
        let found = match spec.src {
            Source::Rank(s) => {
                let p = Ob1Like::proc_mut(c, s);
                st.frags
                    .find(&p.unexpected, 0, |f| spec.matches(&f.env))
                    .map(|i| (i, s))
            }
            Source::Any => {
                let mut best: Option<(u32, u32)> = None;
                for (s, p) in c.procs.iter().enumerate() {
                    if let Some(i) = st.frags.find(&p.unexpected, 0, |f| spec.matches(&f.env)) {
                        if best.is_none_or(|(b, _)| st.frags.get(i).sn < st.frags.get(b).sn) {
                            best = Some((i, s as u32));
                        }
                    }
                }
                best
            }
        };
        if let Some((i, s)) = found {
            let p = Ob1Like::proc_mut(c, s);
            st.frags.unlink(&mut p.unexpected, 0, i);
            return st.take_frag(i);
        }
        let i = st.new_recv(spec, rid);
        match spec.src {
            Source::Rank(s) => st
                .recvs
                .push_back(&mut Ob1Like::proc_mut(c, s).specific, 0, i),
            Source::Any => st.recvs.push_back(&mut c.wild, 0, i),
        }
        None
    }

    fn arrive(&mut self, env: Envelope, mid: u32) -> Option<u32> {
        let st = &mut self.st;
        let c = self.comms.entry(env.comm).or_default();
        // matching-notes §1.3: "merge `proc->specific_receives` with `comm->wild_receives`
        // by `req_sequence`".
        let wild = st.recvs.find(&c.wild, 0, |r| r.spec.matches(&env));
        let p = Ob1Like::proc_mut(c, env.src);
        let specific = st.recvs.find(&p.specific, 0, |r| r.spec.matches(&env));
        if let Some((i, is_wild)) = st.earlier(specific, wild) {
            if is_wild {
                st.recvs.unlink(&mut c.wild, 0, i);
            } else {
                st.recvs
                    .unlink(&mut Ob1Like::proc_mut(c, env.src).specific, 0, i);
            }
            return st.take_recv(i);
        }
        let i = st.new_frag(env, mid);
        st.frags
            .push_back(&mut Ob1Like::proc_mut(c, env.src).unexpected, 0, i);
        None
    }

    fn cancel(&mut self, rid: u32) -> bool {
        let st = &mut self.st;
        let Some(i) = st.by_rid.take(rid) else {
            return false;
        };
        let spec = st.recvs.get(i).spec;
        let c = self.comms.entry(spec.comm).or_default();
        match spec.src {
            Source::Rank(s) => st.recvs.unlink(&mut Ob1Like::proc_mut(c, s).specific, 0, i),
            Source::Any => st.recvs.unlink(&mut c.wild, 0, i),
        }
        st.recvs.take(i).is_some()
    }

    fn depths(&self) -> (usize, usize) {
        self.st.depths()
    }

    fn heap_bytes(&self) -> usize {
        self.st.heap_bytes()
            + map_heap_bytes(&self.comms)
            + self
                .comms
                .values()
                .map(|c| c.procs.capacity() * core::mem::size_of::<Proc>())
                .sum::<usize>()
    }
}

// ---------------------------------------------------------------------------- hash floor

/// A hash-map key: (communicator and source, tag).
type Key = (u64, u64);

/// The floor's map: std's (hashbrown) with foldhash, the fastest hasher of the
/// workspace's dependencies.
type FloorMap = std::collections::HashMap<Key, u32, foldhash::fast::FixedState>;

fn key(comm: u32, src: u32, tag: u64) -> Key {
    ((u64::from(comm) << 32) | u64::from(src), tag)
}

/// Not a matching scheme: the least an exact operation costs any matcher that indexes
/// its queues by a hash of (comm, src, tag) — one insert or one remove in a hash map
/// (the engine's `FastMap`: hashbrown with the multiply-xorshift hasher of the engine's
/// maps) — and nothing else: no FIFO per key, no posting order across keys, no
/// wildcard, no sequence number. `tagmatch bench match --engine hash-floor` measures
/// it on the exact workloads with the engine's method, so that the engine's figure can
/// be read against what this machine's best general-purpose hash table does per
/// operation.
///
/// Defined only for exact receives whose keys are distinct among the pending receives
/// (and among the stored messages): the workloads of [`HashFloor::supports`]. Any other
/// operation (a wildcard receive, a second pending receive or message with a pending
/// key) is not performed; it is counted in [`HashFloor::unsupported`], which a run
/// checks.
#[derive(Clone, Debug, Default)]
pub struct HashFloor {
    posted: FloorMap,
    unexp: FloorMap,
    /// Receive id → key of the pending receive (for cancels).
    by_rid: Vec<Option<Key>>,
    unsupported: usize,
}

impl HashFloor {
    /// Whether workload `w` has only exact receives with keys distinct among the pending
    /// ones (its results then equal the engine's).
    pub fn supports(w: Workload) -> bool {
        matches!(
            w,
            Workload::PostedExact
                | Workload::UnexpectedExact
                | Workload::ManyPeers
                | Workload::CancelMix
        )
    }

    /// Operations it did not perform (see the type's documentation); 0 for a valid run.
    pub fn unsupported(&self) -> usize {
        self.unsupported
    }
}

impl Matcher for HashFloor {
    fn post(&mut self, spec: RecvSpec, rid: u32) -> Option<u32> {
        let (Source::Rank(src), TagSel::Exact(tag)) = (spec.src, spec.tag) else {
            self.unsupported += 1;
            return None;
        };
        let k = key(spec.comm, src, tag);
        if let Some(mid) = self.unexp.remove(&k) {
            return Some(mid);
        }
        if self.posted.contains_key(&k) {
            self.unsupported += 1;
            return None;
        }
        self.posted.insert(k, rid);
        let i = rid as usize;
        if self.by_rid.len() <= i {
            self.by_rid.resize(i + 1, None);
        }
        self.by_rid[i] = Some(k);
        None
    }

    fn arrive(&mut self, env: Envelope, mid: u32) -> Option<u32> {
        let k = key(env.comm, env.src, env.tag);
        if let Some(rid) = self.posted.remove(&k) {
            if let Some(s) = self.by_rid.get_mut(rid as usize) {
                *s = None;
            }
            return Some(rid);
        }
        if self.unexp.contains_key(&k) {
            self.unsupported += 1;
            return None;
        }
        self.unexp.insert(k, mid);
        None
    }

    fn cancel(&mut self, rid: u32) -> bool {
        match self.by_rid.get_mut(rid as usize).and_then(Option::take) {
            Some(k) => self.posted.remove(&k).is_some(),
            None => false,
        }
    }

    fn depths(&self) -> (usize, usize) {
        (self.posted.len(), self.unexp.len())
    }

    fn heap_bytes(&self) -> usize {
        map_heap_bytes(&self.posted)
            + map_heap_bytes(&self.unexp)
            + self.by_rid.capacity() * core::mem::size_of::<Option<Key>>()
    }
}

// ---------------------------------------------------------------------------- runs

/// Which baseline (or the engine itself, for `tagmatch bench match --engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// [`crate::Engine`].
    Tagmatch,
    /// [`UcxLike`].
    Ucx,
    /// [`Ob1Like`].
    Ob1,
    /// [`Linear`].
    Linear,
    /// [`HashFloor`] (exact workloads only).
    HashFloor,
}

impl Kind {
    /// All kinds, the engine first.
    pub const ALL: [Kind; 5] = [
        Kind::Tagmatch,
        Kind::Ucx,
        Kind::Ob1,
        Kind::Linear,
        Kind::HashFloor,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tagmatch => "tagmatch",
            Kind::Ucx => "ucx-like",
            Kind::Ob1 => "ob1-like",
            Kind::Linear => "linear",
            Kind::HashFloor => "hash-floor",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown engine name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownKind(pub String);

impl fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::workload::unknown_name(f, "engine", &self.0, Kind::ALL.map(Kind::name))
    }
}

impl std::error::Error for UnknownKind {}

impl FromStr for Kind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownKind(s.to_string()))
    }
}

/// A workload after its set-up phase on a baseline (the counterpart of
/// [`crate::workload::Prepared`]).
#[derive(Debug)]
pub struct BaselinePrepared<B> {
    b: B,
    /// Set-up operations (for [`BaselinePrepared::again`]).
    setup: Vec<Op>,
    ops: Vec<Op>,
    matches: usize,
    /// Heap bytes at the end of set-up.
    pub setup_heap_bytes: usize,
    /// Pending receives at the end of set-up.
    pub setup_posted: usize,
    /// Unexpected messages at the end of set-up.
    pub setup_unexpected: usize,
}

impl<B: Matcher + Default> BaselinePrepared<B> {
    /// Runs the set-up phase of `w` on a new baseline.
    pub fn new(w: Workload, p: &Params) -> Self {
        let Plan { setup, timed } = Plan::new(w, p);
        let mut b = B::default();
        for &op in &setup {
            apply(&mut b, op);
        }
        let (posted, unexpected) = b.depths();
        BaselinePrepared {
            setup_heap_bytes: b.heap_bytes(),
            setup_posted: posted,
            setup_unexpected: unexpected,
            b,
            setup,
            ops: timed,
            matches: 0,
        }
    }
}

impl<B: Matcher> BaselinePrepared<B> {
    /// Runs the set-up phase again on the same baseline once the timed phase has left it
    /// with no posted receive and no unexpected message (the counterpart of
    /// [`crate::workload::Prepared::again`]); `false` (nothing done) otherwise. The match
    /// count restarts at 0.
    pub fn again(&mut self) -> bool {
        if self.b.depths() != (0, 0) {
            return false;
        }
        for &op in &self.setup {
            apply(&mut self.b, op);
        }
        self.matches = 0;
        true
    }
}

/// Runs one operation; whether it made a match.
#[inline]
fn apply<B: Matcher>(b: &mut B, op: Op) -> bool {
    match op {
        Op::Post(spec, rid) => b.post(spec, rid).is_some(),
        Op::Arrive(env, mid) => b.arrive(env, mid).is_some(),
        Op::Cancel(rid) => {
            b.cancel(rid);
            false
        }
    }
}

impl<B: Matcher> BaselinePrepared<B> {
    /// Number of timed operations.
    pub fn ops(&self) -> usize {
        self.ops.len()
    }

    /// Runs timed operations `start..end` (clamped); returns the matches made so far.
    /// Ranges must be run in order, each once.
    pub fn run_range(&mut self, start: usize, end: usize) -> usize {
        let end = end.min(self.ops.len());
        let start = start.min(end);
        let mut m = 0;
        for &op in &self.ops[start..end] {
            m += usize::from(apply(&mut self.b, op));
        }
        self.matches += m;
        self.matches
    }

    /// The baseline (to read its depths after a run).
    pub fn baseline(&self) -> &B {
        &self.b
    }

    /// Heap bytes per pending receive at the end of set-up (`None` unless the set-up
    /// leaves only receives).
    pub fn bytes_per_posted(&self) -> Option<f64> {
        (self.setup_posted > 0 && self.setup_unexpected == 0)
            .then(|| self.setup_heap_bytes as f64 / self.setup_posted as f64)
    }

    /// Heap bytes per unexpected message at the end of set-up (`None` unless the set-up
    /// leaves only messages).
    pub fn bytes_per_unexpected(&self) -> Option<f64> {
        (self.setup_unexpected > 0 && self.setup_posted == 0)
            .then(|| self.setup_heap_bytes as f64 / self.setup_unexpected as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Prepared;

    fn check<B: Matcher + Default>(kind: Kind) {
        for w in Workload::ALL {
            for n in [1, 2, 7, 64, 1000] {
                for f in [0.0, 0.5, 1.0] {
                    let mut p = Params::new(n);
                    p.wildcard_fraction = f;
                    let want = Prepared::new(w, &p).run();
                    let mut b = BaselinePrepared::<B>::new(w, &p);
                    assert_eq!(b.run_range(0, b.ops()), want, "{kind} {w} n={n} f={f}");
                    assert_eq!(b.baseline().depths(), (0, 0), "{kind} {w} n={n} f={f}");
                    // The set-up again on the same state, then the same matches.
                    assert!(b.again(), "{kind} {w} n={n} f={f}");
                    assert_eq!(
                        b.baseline().depths(),
                        (b.setup_posted, b.setup_unexpected),
                        "{kind} {w} n={n} f={f}"
                    );
                    assert!(
                        !b.again(),
                        "{kind} {w} n={n} f={f}: refused while not empty"
                    );
                    assert_eq!(b.run_range(0, b.ops()), want, "{kind} {w} n={n} f={f}");
                }
            }
        }
    }

    #[test]
    fn every_baseline_matches_every_workload_like_the_engine() {
        check::<Linear>(Kind::Linear);
        check::<UcxLike>(Kind::Ucx);
        check::<Ob1Like>(Kind::Ob1);
    }

    #[test]
    fn the_hash_floor_matches_its_workloads_like_the_engine() {
        for w in Workload::ALL
            .into_iter()
            .filter(|&w| HashFloor::supports(w))
        {
            for n in [1, 2, 7, 64, 1000] {
                for peers in [None, Some(3)] {
                    let mut p = Params::new(n);
                    p.peers = peers;
                    let want = Prepared::new(w, &p).run();
                    let mut b = BaselinePrepared::<HashFloor>::new(w, &p);
                    assert!(b.setup_heap_bytes > 0, "{w} n={n}");
                    assert_eq!(b.run_range(0, b.ops()), want, "{w} n={n}");
                    assert_eq!(b.baseline().depths(), (0, 0), "{w} n={n}");
                    assert_eq!(b.baseline().unsupported(), 0, "{w} n={n}");
                    assert!(b.again(), "{w} n={n}");
                    assert_eq!(b.run_range(0, b.ops()), want, "{w} n={n}");
                }
            }
        }
    }

    #[test]
    fn the_hash_floor_counts_what_it_does_not_do() {
        // The wildcard workloads are not its domain: their receives are counted.
        for w in Workload::ALL
            .into_iter()
            .filter(|&w| !HashFloor::supports(w))
        {
            let mut p = Params::new(64);
            p.wildcard_fraction = 0.5;
            let mut b = BaselinePrepared::<HashFloor>::new(w, &p);
            b.run_range(0, b.ops());
            assert!(b.baseline().unsupported() > 0, "{w}");
        }
        let mut f = HashFloor::default();
        let spec = RecvSpec::exact(1, 2, 3);
        let env = Envelope::new(1, 2, 3);
        // A second pending receive with the same key is not kept.
        assert_eq!(f.post(spec, 0), None);
        assert_eq!(f.post(spec, 1), None);
        assert_eq!((f.unsupported(), f.depths()), (1, (1, 0)));
        assert_eq!(f.arrive(env, 7), Some(0));
        assert!(!f.cancel(0), "matched, no longer pending");
        // Likewise a second stored message with the same key.
        assert_eq!(f.arrive(env, 8), None);
        assert_eq!(f.arrive(env, 9), None);
        assert_eq!((f.unsupported(), f.depths()), (2, (0, 1)));
        assert_eq!(f.post(spec, 2), Some(8));
        // Cancel takes the receive out of the map: a message then is stored.
        assert_eq!(f.post(spec, 3), None);
        assert!(f.cancel(3));
        assert!(!f.cancel(3));
        assert!(!f.cancel(1_000_000), "never posted");
        assert_eq!(f.arrive(env, 10), None);
        assert_eq!(f.depths(), (0, 1));
        // Wildcards are never matched nor stored.
        assert_eq!(f.post(RecvSpec::new(1, None, Some(3)), 4), None);
        assert_eq!((f.unsupported(), f.depths()), (3, (0, 1)));
    }

    #[test]
    fn ucx_buckets_follow_the_documented_hash() {
        // (u32)t % 1021 ^ (u32)(t >> 32) % 1021 over OMPI's send tag, tag:24 | rank:20 |
        // ctx:20 from the top (PML_UCX_MAKE_SEND_TAG: tag << 40 | rank << 20 | ctx).
        let hash = |t: u64| ((t as u32 % 1021) ^ ((t >> 32) as u32 % 1021)) as usize;
        let e = Envelope::new(3, 5, 7);
        assert_eq!(ucx_bucket(&e), hash((7 << 40) | (5 << 20) | 3));
        // Fields in both words: rank bits 12..20 and the tag land in the high word.
        let e = Envelope::new(0xA_BCDE, 0x7_1234, 0xFE_DCBA);
        let t = (0xFE_DCBAu64 << 40) | (0x7_1234 << 20) | 0xA_BCDE;
        assert_eq!((t >> 32) as u32, 0xFEDC_BA71);
        assert_eq!(ucx_bucket(&e), hash(t));
        // Only the low 24/20/20 bits count, as in the packed tag.
        assert_eq!(
            ucx_bucket(&Envelope::new(1 << 20, 1 << 20, 1 << 24)),
            ucx_bucket(&Envelope::new(0, 0, 0))
        );
        assert!((0..5000u64).all(|i| ucx_bucket(&Envelope::new(1, 2, i)) < 1024));
    }

    #[test]
    fn names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(k.name().parse::<Kind>(), Ok(k));
        }
        assert!("mpich"
            .parse::<Kind>()
            .unwrap_err()
            .to_string()
            .contains("ucx-like"));
    }
}
