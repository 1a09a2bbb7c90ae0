//! The `async` feature: a future per request, runtime-agnostic.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{Completion, Endpoint, Request, Result};

/// The completion of one request as a future ([`Endpoint::completion`]).
///
/// Each poll progresses the endpoint without blocking. The transports have no
/// readiness source an executor could register yet, so a pending poll wakes its own task
/// again at once: the task behaves like a busy-polling `ucp_worker_progress` loop that
/// yields to other tasks between polls. It works on any executor (tokio, async-std,
/// smol, a hand-written `block_on`).
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
        if let Some(c) = this.ep.take_completion(this.req) {
            return Poll::Ready(c.into_result());
        }
        if let Err(e) = this.ep.progress() {
            return Poll::Ready(Err(e));
        }
        if let Some(c) = this.ep.take_completion(this.req) {
            return Poll::Ready(c.into_result());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Endpoint {
    /// A future resolving to `req`'s completion (failed operations: [`crate::Error::Failed`]).
    pub fn completion(&mut self, req: Request) -> CompletionFuture<'_> {
        CompletionFuture { ep: self, req }
    }
}
