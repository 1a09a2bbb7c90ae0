//! The `async` feature: a future per request, runtime-agnostic.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{Completion, Endpoint, Request, Result};

/// The completion of one request as a future ([`Endpoint::completion`]).
///
/// Each poll progresses the endpoint without blocking. It works on any executor (tokio,
/// async-std, smol, a hand-written `block_on`):
///
/// - in-process endpoints (`mem`) register the task's waker with the endpoint's doorbell
///   when there is nothing to do, and peers wake it when they hand the endpoint a packet
///   or a fast-path message (`tagmatch_transport::bell`): a pending task costs nothing;
/// - UDP and verbs endpoints arm their device's watcher (`tagmatch_transport::watch`): a
///   thread blocked in `poll(2)` on the socket or the completion channel wakes the task
///   when a datagram or completion arrives or the next retransmission, delayed-ACK or
///   connection timer is due;
/// - whenever a device already has work queued, a pending poll wakes its own task again at
///   once (it progresses at the next poll).
///
/// It borrows the endpoint mutably while it lives: one endpoint has at most one future at
/// a time, so two of its requests are awaited one after the other, not together.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct CompletionFuture<'a> {
    ep: &'a mut Endpoint,
    req: Request,
}

impl Future for CompletionFuture<'_> {
    type Output = Result<Completion>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.req.ep != this.ep.id {
            // Another endpoint's request never completes here.
            return Poll::Ready(Err(crate::Error::UnknownRequest(this.req)));
        }
        if let Some(c) = this.ep.take_completion(this.req) {
            return Poll::Ready(c.into_result());
        }
        // In-process: the epoch first, so a ring after this look is not missed.
        let bell = this.ep.doorbell();
        let seen = bell.as_ref().map(|b| b.epoch());
        if let Err(e) = this.ep.progress() {
            return Poll::Ready(Err(e));
        }
        if let Some(c) = this.ep.take_completion(this.req) {
            return Poll::Ready(c.into_result());
        }
        if let (Some(b), Some(seen)) = (bell, seen) {
            if this.ep.in_process_idle() && b.wake_on_ring(seen, cx.waker()) {
                this.ep.note_idle_sleep();
                return Poll::Pending;
            }
        }
        match this.ep.wake_when_ready(cx.waker()) {
            Ok(true) => {
                this.ep.note_idle_sleep();
                return Poll::Pending;
            }
            Ok(false) => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Endpoint {
    /// A future resolving to `req`'s completion (failed operations: [`crate::Error::Failed`];
    /// a request of another endpoint: [`crate::Error::UnknownRequest`]).
    ///
    /// The future holds `&mut self` until it is dropped, so a second future of the same
    /// endpoint cannot be made while it lives: await the requests in turn (completions of
    /// others that arrive meanwhile stay queued for them).
    ///
    /// ```compile_fail,E0499
    /// # async fn both(ep: &mut tagmatch::Endpoint, r1: tagmatch::Request, r2: tagmatch::Request) {
    /// let first = ep.completion(r1);
    /// let second = ep.completion(r2); // error: `*ep` borrowed as mutable twice
    /// let _ = (first.await, second.await);
    /// # }
    /// ```
    ///
    /// ```
    /// # async fn both(ep: &mut tagmatch::Endpoint, r1: tagmatch::Request, r2: tagmatch::Request) {
    /// let first = ep.completion(r1).await;
    /// let second = ep.completion(r2).await;
    /// # let _ = (first, second);
    /// # }
    /// ```
    pub fn completion(&mut self, req: Request) -> CompletionFuture<'_> {
        CompletionFuture { ep: self, req }
    }
}
