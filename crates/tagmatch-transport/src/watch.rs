//! Readiness for asynchronous owners of a device with a file descriptor (the UDP socket,
//! the verbs completion channel), runtime-agnostic.
//!
//! An executor cannot be handed the device's descriptor without tying the crate to one
//! runtime (tokio, async-io, …). Instead, an owner whose future found nothing to do *arms*
//! the device's watcher with the task's waker and the device's next timer deadline
//! (retransmission, delayed ACK, connection set-up). A thread (one per device, started on
//! first use) blocks in `poll(2)` on a duplicate of the descriptor until it is readable or
//! the deadline passes, then wakes the task once. `poll` is level-triggered, so a datagram
//! (or a completion event) that arrived between the owner's last look and the arming is
//! seen at once: no wake-up is lost.
//!
//! The thread sleeps on a condition variable while nothing is armed. It also polls one
//! end of a socket pair, through which dropping the device interrupts its `poll(2)` (the
//! drop then joins it, so the duplicate descriptor is closed, and a UDP port released,
//! before the drop returns), and so does arming it with a deadline earlier than the one
//! it is polling for (which would otherwise be served up to [`STOP_LATENCY`] late).

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// Longest single `poll(2)` of the watcher thread (it is interrupted earlier when the
/// device is dropped or armed with an earlier deadline).
pub const STOP_LATENCY: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct State {
    waker: Option<Waker>,
    deadline: Option<Instant>,
    stop: bool,
    /// While the thread is in `poll(2)`: the deadline it polls for (`None` inside: none).
    polling: Option<Option<Instant>>,
    /// Tasks woken so far (for tests and statistics).
    wakes: u64,
    /// Descriptors to watch from now on as well (a socket the device opened since).
    added: Vec<OwnedFd>,
    /// Descriptors to watch from now on instead of all before (the device closed a
    /// socket: its duplicate must be closed too, see [`Watcher::replace`]).
    replaced: Option<Vec<OwnedFd>>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Watcher {
    shared: Arc<Shared>,
    /// Written to interrupt the thread's `poll(2)`.
    kick: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts the thread watching `fds` (duplicates of the device's descriptors).
    pub(crate) fn start(fds: Vec<OwnedFd>) -> std::io::Result<Watcher> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let (kick, kicked) = UnixStream::pair()?;
        kick.set_nonblocking(true)?;
        kicked.set_nonblocking(true)?;
        let thread = std::thread::Builder::new()
            .name("tagmatch-watch".into())
            .spawn(move || run(&s, fds, kicked))?;
        Ok(Watcher {
            shared,
            kick,
            thread: Some(thread),
        })
    }

    /// Interrupts the thread's `poll(2)` (a full socket buffer means a kick is pending
    /// already).
    fn kick(&self) {
        let _ = (&self.kick).write(&[1]);
    }

    /// Wakes `waker` once, when the socket is readable or `deadline` passes (replacing
    /// whatever was armed before).
    pub(crate) fn arm(&self, waker: &Waker, deadline: Option<Instant>) {
        let mut st = lock(&self.shared.state);
        match &mut st.waker {
            Some(w) if w.will_wake(waker) => {}
            w => *w = Some(waker.clone()),
        }
        st.deadline = deadline;
        // Polling for a later deadline (or none): poll again with this one.
        let kick = match (st.polling, deadline) {
            (Some(None), Some(_)) => true,
            (Some(Some(p)), Some(d)) => d < p,
            _ => false,
        };
        self.shared.cv.notify_one();
        drop(st);
        if kick {
            self.kick();
        }
    }

    /// Watches `fd` as well (a duplicate of a socket the device opened since it started).
    pub(crate) fn add(&self, fd: OwnedFd) {
        lock(&self.shared.state).added.push(fd);
        self.kick();
    }

    /// Watches `fds` (duplicates of every socket the device has open) instead of all it
    /// watched before, whose duplicates the thread closes at once. The device calls it
    /// when it closes a socket: a duplicate kept open would keep the socket itself open,
    /// and a socket `connect`ed to a peer would go on taking that peer's datagrams from
    /// the kernel, where nobody reads them.
    pub(crate) fn replace(&self, fds: Vec<OwnedFd>) {
        {
            let mut st = lock(&self.shared.state);
            st.added.clear();
            st.replaced = Some(fds);
        }
        self.shared.cv.notify_one();
        self.kick();
    }

    /// Tasks the watcher woke so far.
    pub fn wakes(&self) -> u64 {
        lock(&self.shared.state).wakes
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.cv.notify_one();
        self.kick();
        // The thread holds a duplicate of the device's descriptor: it is closed when the
        // thread ends, which is at once now.
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run(shared: &Shared, mut fds: Vec<OwnedFd>, mut kicked: UnixStream) {
    loop {
        // Wait until something is armed (or the device went).
        let deadline = {
            let mut st = lock(&shared.state);
            loop {
                if st.stop {
                    return;
                }
                if let Some(v) = st.replaced.take() {
                    // (The old duplicates are closed here.)
                    fds = v;
                }
                fds.append(&mut st.added);
                if st.waker.is_some() {
                    st.polling = Some(st.deadline);
                    break st.deadline;
                }
                st = shared.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let now = Instant::now();
        let due = deadline.is_some_and(|d| d <= now);
        let readable = due || {
            let wait = deadline.map_or(STOP_LATENCY, |d| (d - now).min(STOP_LATENCY));
            // Rounded up to the next millisecond, so a deadline is never polled early in a
            // loop of zero-length polls.
            let ms = u16::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u16::MAX);
            // The kick first, then every socket.
            let mut pfds = Vec::with_capacity(fds.len() + 1);
            pfds.push(PollFd::new(kicked.as_fd(), PollFlags::POLLIN));
            pfds.extend(
                fds.iter()
                    .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN)),
            );
            let r = poll(&mut pfds, PollTimeout::from(ms));
            let fd_ready = pfds[1..].iter().any(|f| f.any().unwrap_or(false));
            if pfds[0].any().unwrap_or(false) {
                // Kicked (stop, or an earlier deadline): drain, then look again.
                let mut buf = [0u8; 64];
                while matches!(kicked.read(&mut buf), Ok(n) if n > 0) {}
            }
            match r {
                Ok(_) => fd_ready || deadline.is_some_and(|d| d <= Instant::now()),
                // EINTR and the like: look again (an error that persists, e.g. a closed
                // descriptor, wakes the task so its own receive reports it).
                Err(nix::errno::Errno::EINTR) => false,
                Err(_) => true,
            }
        };
        lock(&shared.state).polling = None;
        if readable {
            let w = {
                let mut st = lock(&shared.state);
                st.wakes += 1;
                st.waker.take()
            };
            if let Some(w) = w {
                w.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wait_for(n: &Count, want: usize) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if n.0.load(Ordering::SeqCst) >= want {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn wakes_on_a_datagram_and_on_a_deadline_once_each() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let w = Watcher::start(vec![rx.try_clone().unwrap().into()]).unwrap();
        let n = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(n.clone());
        // Nothing readable, no deadline: no wake-up.
        w.arm(&waker, None);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(n.0.load(Ordering::SeqCst), 0);
        // A datagram: woken once (then disarmed, although the socket stays readable).
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        assert!(wait_for(&n, 1));
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(n.0.load(Ordering::SeqCst), 1);
        // Armed again while readable: at once.
        w.arm(&waker, None);
        assert!(wait_for(&n, 2));
        let mut buf = [0u8; 8];
        rx.recv(&mut buf).unwrap();
        // A deadline 50 ms ahead: woken after it.
        let t = Instant::now();
        w.arm(&waker, Some(t + Duration::from_millis(50)));
        assert!(wait_for(&n, 3));
        assert!(t.elapsed() >= Duration::from_millis(50));
        assert_eq!(w.wakes(), 3);
    }
}
