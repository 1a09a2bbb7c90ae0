//! A doorbell: how an in-process endpoint that has nothing to do sleeps until a peer hands
//! it something, instead of spinning (the in-memory device has no file descriptor to
//! block on; `ucp_worker_wait` plays this role for UCX's shared-memory transports).
//!
//! Every producer (the in-memory network delivering a packet to a device, a fast-path
//! sender publishing a message, an acknowledgement, a lane opened or closed) *rings* the
//! doorbell of the endpoint it wrote to. The owner takes the bell's [`Doorbell::epoch`]
//! *before* it looks for work and, if it found none, [`Doorbell::wait`]s for the epoch to
//! move. A ring between the look and the wait moves the epoch, so the wait returns at once:
//! no wake-up is lost, whatever the interleaving (both sides use sequentially consistent
//! operations on the epoch and the sleeper count, and the notification is sent under the
//! mutex the sleeper checks the epoch under).
//!
//! Cost of a ring: one atomic add on the epoch and one load of the sleeper count; the mutex
//! and the condition variable are touched only when someone sleeps.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Doorbell {
    epoch: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
    /// Tasks to wake at the next ring (each counted in `sleepers` while registered).
    wakers: Mutex<Vec<Waker>>,
    rings: AtomicU64,
    sleeps: AtomicU64,
}

impl Doorbell {
    /// A new doorbell.
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// Something was handed to the owner: wakes it if it sleeps.
    #[inline]
    pub fn ring(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            self.wake();
        }
    }

    /// [`Doorbell::ring`] with someone asleep (kept out of line: the common ring is the
    /// add and the load above, inlined at the ringer).
    #[cold]
    #[inline(never)]
    fn wake(&self) {
        self.rings.fetch_add(1, Ordering::Relaxed);
        // Under the mutex: a sleeper that checked the old epoch is already waiting.
        {
            let _g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.cv.notify_all();
        }
        let woken =
            std::mem::take(&mut *self.wakers.lock().unwrap_or_else(PoisonError::into_inner));
        if !woken.is_empty() {
            self.sleepers.fetch_sub(woken.len(), Ordering::SeqCst);
            for w in woken {
                w.wake();
            }
        }
    }

    /// The asynchronous [`Doorbell::wait`]: arranges for `waker` to be woken at the next
    /// ring, unless the epoch already differs from `seen` (then returns `false` and the
    /// caller must not wait: something was handed over since it looked).
    pub fn wake_on_ring(&self, seen: u64, waker: &Waker) -> bool {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let mut ws = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        if self.epoch.load(Ordering::SeqCst) != seen || ws.iter().any(|w| w.will_wake(waker)) {
            drop(ws);
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            return self.epoch.load(Ordering::SeqCst) == seen;
        }
        ws.push(waker.clone());
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The current epoch; take it before looking for work.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Sleeps until the epoch differs from `seen` (something was handed over since) or
    /// `limit` passes. Returns whether it was woken by a ring (or found one already).
    pub fn wait(&self, seen: u64, limit: Duration) -> bool {
        if self.epoch.load(Ordering::SeqCst) != seen {
            return true;
        }
        // `None`: no limit (a `Duration::MAX` timeout).
        let deadline = Instant::now().checked_add(limit);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        let mut g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let rung = loop {
            if self.epoch.load(Ordering::SeqCst) != seen {
                break true;
            }
            g = match deadline {
                None => self.cv.wait(g).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break false;
                    }
                    self.cv
                        .wait_timeout(g, d - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        };
        drop(g);
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        rung
    }

    /// Times the owner went to sleep ([`Doorbell::wait`] calls that found no ring yet).
    pub fn sleeps(&self) -> u64 {
        self.sleeps.load(Ordering::Relaxed)
    }

    /// Rings that found a sleeper (and so notified).
    pub fn wakeups(&self) -> u64 {
        self.rings.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_ring_before_the_wait_is_not_lost() {
        let b = Doorbell::new();
        let e = b.epoch();
        b.ring();
        let t = Instant::now();
        assert!(b.wait(e, Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(b.sleeps(), 0);
    }

    #[test]
    fn a_registered_waker_is_woken_once_by_the_next_ring() {
        use std::sync::atomic::AtomicUsize;
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let n = Arc::new(Count(AtomicUsize::new(0)));
        let w = Waker::from(n.clone());
        let b = Doorbell::new();
        let e = b.epoch();
        assert!(b.wake_on_ring(e, &w));
        assert!(b.wake_on_ring(e, &w), "registered twice: kept once");
        b.ring();
        assert_eq!(n.0.load(Ordering::SeqCst), 1);
        b.ring();
        assert_eq!(n.0.load(Ordering::SeqCst), 1, "woken once, then forgotten");
        // A ring between the look and the registration: not registered, wake now.
        let e = b.epoch();
        b.ring();
        assert!(!b.wake_on_ring(e, &w));
        assert_eq!(b.sleepers.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_wait_without_a_ring_times_out() {
        let b = Doorbell::new();
        let e = b.epoch();
        assert!(!b.wait(e, Duration::from_millis(20)));
        assert_eq!(b.sleeps(), 1);
    }

    /// A sleeper on another thread is woken by every ring, across many interleavings: the
    /// ping-pong would stall for the whole limit (and fail) on a lost wake-up.
    #[test]
    fn ping_pong_between_threads_never_loses_a_wakeup() {
        let a = Arc::new(Doorbell::new());
        let b = Arc::new(Doorbell::new());
        let turn = Arc::new(AtomicU64::new(0));
        const ROUNDS: u64 = 2000;
        let (a2, b2, t2) = (a.clone(), b.clone(), turn.clone());
        let h = std::thread::spawn(move || {
            for i in 0..ROUNDS {
                loop {
                    let e = b2.epoch();
                    if t2.load(Ordering::SeqCst) == 2 * i + 1 {
                        break;
                    }
                    assert!(b2.wait(e, Duration::from_secs(10)), "lost wake-up at {i}");
                }
                t2.store(2 * i + 2, Ordering::SeqCst);
                a2.ring();
            }
        });
        for i in 0..ROUNDS {
            turn.store(2 * i + 1, Ordering::SeqCst);
            b.ring();
            loop {
                let e = a.epoch();
                if turn.load(Ordering::SeqCst) == 2 * i + 2 {
                    break;
                }
                assert!(a.wait(e, Duration::from_secs(10)), "lost wake-up at {i}");
            }
        }
        h.join().unwrap();
    }
}
