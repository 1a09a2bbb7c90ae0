//! Receive slots: a receive buffer the endpoint keeps, posted again and again, whose
//! completion is checked in place (as a `ucp` request is checked with
//! `ucp_request_check_status`), without a [`Completion`](crate::Completion) record.
//!
//! On the in-process fast path a message the slot's receive takes is copied straight into
//! the slot's buffer and the slot marked done: no completion record is built, queued,
//! taken and moved, and the buffer never changes hands. On every other path (other
//! transports, a message of a peer without the fast path) the slot's receive is an
//! ordinary receive into the slot's buffer, whose completion [`Endpoint::slot_done`]
//! takes and turns into the same answer.

use tagmatch_rdm::{OpError, OpId, PeerId};

use crate::endpoint::Source;
use crate::inproc::RecvBuf;
use crate::{Completion, Endpoint, Error, Peer, Request, Result, TagMatch};

/// A receive slot of an endpoint ([`Endpoint::recv_slot`]): a buffer of a fixed length that
/// the endpoint keeps. Post a receive into it with [`Endpoint::tpost_slot`], check it with
/// [`Endpoint::slot_done`], read the bytes with [`Endpoint::slot_data`]; then post it
/// again.
#[derive(Debug)]
pub struct RecvSlot {
    idx: u32,
    ep: u32,
}

/// A receive into a slot that completed: what [`Endpoint::slot_done`] gives (the bytes
/// are [`Endpoint::slot_data`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvInfo {
    /// The message's length (the slot holds at most its own length of it).
    pub len: u64,
    /// The message's tag (0 for an untagged message).
    pub tag: u64,
    /// The sender.
    pub source: Peer,
    /// The remote CQ data the sender attached, if any.
    pub cq_data: Option<u64>,
}

/// What a slot's receive came to.
#[derive(Debug)]
pub(crate) enum SlotState {
    Idle,
    /// Being posted (a message may complete it before the post returns).
    Posting,
    /// Posted.
    Posted,
    /// Failed (cancelled; an error of the protocol path).
    Failed {
        op: u64,
        error: OpError,
    },
    /// Completed (in place on the fast path).
    Done {
        op: u64,
        len: u64,
        tag: u64,
        src: u32,
        cq: Option<u64>,
    },
}

/// A slot's buffer and state.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The buffer (its length is the slot's; empty while lent to a protocol-path receive).
    pub(crate) buf: Vec<u8>,
    cap: usize,
    /// Bytes of the last completed receive in `buf`.
    got: usize,
    pub(crate) state: SlotState,
}

impl Slot {
    /// A fast-path message was copied into the buffer (`n` bytes of `len`).
    #[inline(always)]
    pub(crate) fn complete(
        &mut self,
        op: u64,
        len: u64,
        n: usize,
        tag: u64,
        src: u32,
        cq: Option<u64>,
    ) {
        self.got = n;
        self.state = SlotState::Done {
            op,
            len,
            tag,
            src,
            cq,
        };
    }
}

impl Endpoint {
    /// A receive slot with a buffer of `len` bytes, kept by this endpoint for its
    /// lifetime.
    ///
    /// ```
    /// use tagmatch::{Endpoint, MemFabric};
    ///
    /// # fn main() -> Result<(), tagmatch::Error> {
    /// let f = MemFabric::new();
    /// let mut a = Endpoint::builder().mem(&f).build()?;
    /// let mut b = Endpoint::builder().mem(&f).build()?;
    /// let pb = a.insert_peer(&b.address())?;
    /// let pa = b.insert_peer(&a.address())?;
    /// let slot = b.recv_slot(16);
    /// for i in 0..3u8 {
    ///     let _request = b.tpost_slot(&slot, pa, 7)?;
    ///     a.tinject(pb, 7, &[i; 5])?;
    ///     let info = loop {
    ///         if let Some(r) = b.slot_done(&slot) {
    ///             break r?;
    ///         }
    ///         b.progress()?;
    ///         a.progress()?;
    ///     };
    ///     assert_eq!((info.len, info.tag, info.source), (5, 7, pa));
    ///     assert_eq!(b.slot_data(&slot)?, &[i; 5]);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn recv_slot(&mut self, len: usize) -> RecvSlot {
        self.slots.push(Slot {
            buf: vec![0; len],
            cap: len,
            got: 0,
            state: SlotState::Idle,
        });
        RecvSlot {
            idx: (self.slots.len() - 1) as u32,
            ep: self.id,
        }
    }

    /// Posts a tagged receive into `slot` (`trecv_into` the slot's buffer); its
    /// completion is [`Endpoint::slot_done`]'s, never [`Endpoint::poll_completion`]'s
    /// or [`Endpoint::wait`]'s: the request serves to cancel it ([`Endpoint::cancel`]). A slot holds one receive at
    /// a time: posting it again before [`Endpoint::slot_done`] answered is
    /// [`Error::SlotPosted`].
    #[inline(always)]
    pub fn tpost_slot(
        &mut self,
        slot: &RecvSlot,
        source: impl Into<Source>,
        tag: impl Into<TagMatch>,
    ) -> Result<Request> {
        self.post_slot_inner(slot, source.into(), Some(tag.into()))
    }

    /// Untagged [`Endpoint::tpost_slot`].
    pub fn post_slot(&mut self, slot: &RecvSlot, source: impl Into<Source>) -> Result<Request> {
        self.post_slot_inner(slot, source.into(), None)
    }

    #[inline(always)]
    fn post_slot_inner(
        &mut self,
        slot: &RecvSlot,
        source: Source,
        tag: Option<TagMatch>,
    ) -> Result<Request> {
        let src = self.src(source)?;
        let i = slot.idx as usize;
        if slot.ep != self.id {
            return Err(Error::UnknownSlot);
        }
        let Some(s) = self.slots.get_mut(i) else {
            return Err(Error::UnknownSlot);
        };
        if !matches!(s.state, SlotState::Idle) {
            return Err(Error::SlotPosted);
        }
        if self.fast.is_none() {
            return self.post_slot_proto(i, src, tag);
        }
        // Posted before the post: a message the post meets at once (through the
        // engine's post; a receive held aside never meets one there) completes the slot
        // in place, over this state; no second look at the slot after the post.
        s.state = SlotState::Posted;
        let len = s.cap;
        match self.fast_post(tag, src, RecvBuf::Slot { idx: i as u32, len }) {
            Ok(req) => Ok(req),
            Err(e) => Err(self.post_failed(i, e)),
        }
    }

    /// [`Endpoint::tpost_slot`] without the fast path: a receive into the slot's buffer,
    /// lent until its completion.
    #[inline(never)]
    fn post_slot_proto(
        &mut self,
        i: usize,
        src: Option<PeerId>,
        tag: Option<TagMatch>,
    ) -> Result<Request> {
        let s = &mut self.slots[i];
        let mut buf = std::mem::take(&mut s.buf);
        buf.resize(s.cap, 0);
        s.state = SlotState::Posting;
        let r = match tag {
            Some(t) => self.trecv_into(source_of(src, self.id), t, buf),
            None => self.recv_into(source_of(src, self.id), buf),
        };
        if let Ok(req) = &r {
            self.extra.slot_ops.insert(req.op.0, i as u32);
        }
        self.posted(i, r)
    }

    /// After a slot's post: posted (unless already completed), or back to idle.
    #[inline(always)]
    fn posted(&mut self, i: usize, r: Result<Request>) -> Result<Request> {
        match r {
            Ok(req) => {
                if let Some(s) = self.slots.get_mut(i) {
                    if matches!(s.state, SlotState::Posting) {
                        s.state = SlotState::Posted;
                    }
                }
                Ok(req)
            }
            Err(e) => Err(self.post_failed(i, e)),
        }
    }

    /// A slot's post failed: the slot is idle again, with its buffer.
    #[cold]
    #[inline(never)]
    fn post_failed(&mut self, i: usize, e: Error) -> Error {
        let s = &mut self.slots[i];
        s.state = SlotState::Idle;
        if s.buf.is_empty() {
            s.buf = vec![0; s.cap];
        }
        e
    }

    /// `slot`'s state, if it is one of this endpoint's (one bounds check).
    #[inline(always)]
    fn slot_mut(&mut self, slot: &RecvSlot) -> Result<&mut Slot> {
        if slot.ep != self.id {
            return Err(Error::UnknownSlot);
        }
        // Not `ok_or`: its error is built (and dropped, a call) on every look.
        match self.slots.get_mut(slot.idx as usize) {
            Some(s) => Ok(s),
            None => Err(Error::UnknownSlot),
        }
    }

    #[inline(always)]
    fn slot_index(&self, slot: &RecvSlot) -> Result<usize> {
        let i = slot.idx as usize;
        if slot.ep != self.id || i >= self.slots.len() {
            return Err(Error::UnknownSlot);
        }
        Ok(i)
    }

    /// Whether `slot`'s receive completed (without progressing): `None` while it waits
    /// (or nothing is posted), else what it came to, once: the message's length, tag,
    /// sender and CQ data, or its error ([`Error::Failed`]: a truncated message, whose
    /// first bytes the slot holds; a cancelled receive). Then the slot may be posted
    /// again. A slot of another endpoint is `Some(Err(Error::UnknownSlot))`.
    #[inline(always)]
    pub fn slot_done(&mut self, slot: &RecvSlot) -> Option<Result<RecvInfo>> {
        let ep = self.id;
        let s = match self.slot_mut(slot) {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        // Tested variant by variant, the done one first (a `match` decoded the state's
        // niche-packed tag in full before its first comparison).
        if let SlotState::Done {
            op,
            len,
            tag,
            src,
            cq,
        } = s.state
        {
            s.state = SlotState::Idle;
            let info = RecvInfo {
                len,
                tag,
                source: Peer {
                    id: PeerId(src),
                    ep,
                },
                cq_data: cq,
            };
            if len > s.cap as u64 {
                return Some(Err(truncated(ep, op, len, s.cap)));
            }
            return Some(Ok(info));
        }
        if let SlotState::Failed { op, error } = s.state {
            s.state = SlotState::Idle;
            return Some(Err(Error::Failed {
                request: Request { op: OpId(op), ep },
                kind: tagmatch_rdm::OpKind::Recv,
                error,
            }));
        }
        // Posted, idle, being posted.
        None
    }

    /// A slot's receive completed through the protocol endpoint, or was cancelled: its
    /// completion, taken by the slot (the bytes into the slot's buffer).
    pub(crate) fn slot_deliver(&mut self, i: usize, mut c: Completion) {
        let Some(s) = self.slots.get_mut(i) else {
            return;
        };
        let n = c.data.len().min(s.cap);
        if s.buf.is_empty() {
            // Lent to the protocol endpoint's receive: back, at the slot's length.
            s.buf = std::mem::take(&mut c.data);
            s.buf.resize(s.cap, 0);
        } else {
            s.buf[..n].copy_from_slice(&c.data[..n]);
        }
        s.got = n;
        let op = c.request.op.0;
        s.state = match c.status() {
            // A truncated receive is one `slot_done` tells by its length.
            Ok(()) | Err(OpError::Truncated { .. }) => SlotState::Done {
                op,
                len: c.len,
                tag: c.tag,
                src: c.source().map_or(0, |p| p.id.0),
                cq: c.cq_data(),
            },
            Err(error) => SlotState::Failed { op, error },
        };
    }

    /// The bytes of `slot`'s last completed receive (at most the slot's length).
    pub fn slot_data(&self, slot: &RecvSlot) -> Result<&[u8]> {
        let i = self.slot_index(slot)?;
        let s = &self.slots[i];
        Ok(&s.buf[..s.got.min(s.buf.len())])
    }
}

/// A receive's source from the peer index [`Endpoint::src`] resolved.
fn source_of(src: Option<PeerId>, ep: u32) -> Source {
    match src {
        None => Source::Any,
        Some(id) => Source::Peer(Peer { id, ep }),
    }
}

#[cold]
fn truncated(ep: u32, op: u64, len: u64, cap: usize) -> Error {
    Error::Failed {
        request: Request { op: OpId(op), ep },
        kind: tagmatch_rdm::OpKind::Recv,
        error: OpError::Truncated {
            msg_len: len,
            buf_len: cap as u64,
        },
    }
}
