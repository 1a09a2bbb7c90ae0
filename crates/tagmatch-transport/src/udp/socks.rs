//! The device's sockets: the one bound to its address (the *listener*, slot 0), which
//! every peer can reach, and up to [`Socks::limit`] more on the same address, each
//! `connect`ed to one peer's socket address (see [`Sock::connect_beside`]). Sends to such
//! a peer go through its socket without an address (no route look-up per datagram), and
//! the kernel delivers that peer's datagrams there; every other datagram still comes to
//! the listener. The owner reads every slot, and handles a datagram by its sender
//! whichever socket it came through, so where a datagram lands never matters for what
//! is done with it (datagrams queued at the listener before a peer's socket was
//! connected, or queued at a new socket in the moment between its `bind` and its
//! `connect`, are read like any other).

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags};

use super::sock::{Sock, SockStats};

/// A connected socket and the connections that use it.
#[derive(Debug)]
struct PeerSock {
    sock: Sock,
    users: usize,
}

/// The listener and the connected sockets. See the module documentation.
#[derive(Debug)]
pub struct Socks {
    listener: Sock,
    /// Slot `i + 1` is `peers[i]`; a slot of a socket closed since is `None` (reused).
    peers: Vec<Option<PeerSock>>,
    /// Most connected sockets open at once.
    limit: usize,
    /// Counters of the connected sockets closed so far.
    retired: SockStats,
    /// Connected sockets opened.
    pub opened: u64,
    /// Connected sockets that could not be opened (the peer then uses the listener).
    pub open_errors: u64,
    /// Tests: every descriptor duplication for a readiness thread fails.
    #[cfg(test)]
    fail_duplicates: bool,
}

impl SockStats {
    /// Adds `o`'s counts to these.
    fn add(&mut self, o: &SockStats) {
        // (Destructured: a counter added to `SockStats` must be added here too.)
        let SockStats {
            send_calls: _,
            recv_calls: _,
            tx_datagrams: _,
            rx_datagrams: _,
            tx_errors: _,
            rx_truncated: _,
            poll_calls: _,
            tx_spliced: _,
        } = o;
        self.send_calls += o.send_calls;
        self.recv_calls += o.recv_calls;
        self.tx_datagrams += o.tx_datagrams;
        self.rx_datagrams += o.rx_datagrams;
        self.tx_errors += o.tx_errors;
        self.rx_truncated += o.rx_truncated;
        self.poll_calls += o.poll_calls;
        self.tx_spliced += o.tx_spliced;
    }
}

impl Socks {
    /// The listener alone; at most `limit` connected sockets will be opened beside it.
    pub fn new(listener: Sock, limit: usize) -> Socks {
        Socks {
            listener,
            peers: Vec::new(),
            limit,
            retired: SockStats::default(),
            opened: 0,
            open_errors: 0,
            #[cfg(test)]
            fail_duplicates: false,
        }
    }

    /// The socket of slot `i`, or the listener if that slot is closed.
    pub fn get_or_listener(&mut self, i: usize) -> &mut Sock {
        match i
            .checked_sub(1)
            .and_then(|j| self.peers.get_mut(j))
            .and_then(Option::as_mut)
        {
            Some(p) => &mut p.sock,
            None => &mut self.listener,
        }
    }

    /// The peer slot `i`'s socket is connected to (`None` for the listener and for a
    /// closed slot).
    pub fn peer_at(&self, i: usize) -> Option<SocketAddr> {
        let p = self.peers.get(i.checked_sub(1)?)?.as_ref()?;
        p.sock.peer()
    }

    /// Slots, open or not: the listener and every connected socket's slot.
    pub fn slots(&self) -> usize {
        1 + self.peers.len()
    }

    /// The socket of slot `i`, if open.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Sock> {
        match i {
            0 => Some(&mut self.listener),
            _ => self
                .peers
                .get_mut(i - 1)
                .and_then(Option::as_mut)
                .map(|p| &mut p.sock),
        }
    }

    /// The slot a new connection with `peer` sends through: that peer's connected
    /// socket (opened now if it has none and fewer than the limit are open), else the
    /// listener (slot 0). The second value is a duplicate of a socket opened now, for
    /// a readiness thread, when `watched` (one runs). If the descriptor cannot be
    /// duplicated (the process is out of descriptors, say), the socket is closed again
    /// and the peer uses the listener, which the thread watches: a socket the thread
    /// never saw would take the peer's datagrams without waking an owner that waits on
    /// the thread.
    pub fn attach(&mut self, peer: SocketAddr, watched: bool) -> (usize, Option<OwnedFd>) {
        if self.limit == 0 {
            return (0, None);
        }
        let mut free = None;
        let mut open = 0;
        for (i, p) in self.peers.iter_mut().enumerate() {
            match p {
                Some(p) if p.sock.peer() == Some(peer) => {
                    p.users += 1;
                    return (i + 1, None);
                }
                Some(_) => open += 1,
                None => {
                    free.get_or_insert(i);
                }
            }
        }
        if open >= self.limit {
            return (0, None);
        }
        let others: Vec<&Sock> = self.peers.iter().flatten().map(|p| &p.sock).collect();
        let sock = match self.listener.connect_beside(&others, peer) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "no connected socket for the peer");
                self.open_errors += 1;
                return (0, None);
            }
        };
        let dup = if watched {
            match self.duplicate(&sock) {
                Ok(fd) => Some(fd),
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "connected socket not watchable: closed");
                    self.open_errors += 1;
                    return (0, None);
                }
            }
        } else {
            None
        };
        self.opened += 1;
        let p = Some(PeerSock { sock, users: 1 });
        let i = match free {
            Some(i) => {
                self.peers[i] = p;
                i
            }
            None => {
                self.peers.push(p);
                self.peers.len() - 1
            }
        };
        (i + 1, dup)
    }

    /// A connection that sent through slot `i` is gone: the slot's connected socket is
    /// closed when no connection uses it any more. Returns whether it was (a readiness
    /// thread's duplicate of it must then be closed too).
    pub fn detach(&mut self, i: usize) -> bool {
        let Some(slot) = i.checked_sub(1).and_then(|j| self.peers.get_mut(j)) else {
            return false;
        };
        if let Some(p) = slot {
            p.users = p.users.saturating_sub(1);
            if p.users == 0 {
                self.retired.add(&p.sock.stats);
                *slot = None;
                return true;
            }
        }
        false
    }

    /// Counters of every socket, open or closed.
    pub fn stats(&self) -> SockStats {
        let mut s = self.retired;
        s.add(&self.listener.stats);
        for p in self.peers.iter().flatten() {
            s.add(&p.sock.stats);
        }
        s
    }

    /// A duplicate of `sock`'s descriptor, for a readiness thread.
    fn duplicate(&self, sock: &Sock) -> io::Result<OwnedFd> {
        #[cfg(test)]
        if self.fail_duplicates {
            // EMFILE: what dup(2) answers when the process is out of descriptors.
            return Err(io::Error::from_raw_os_error(24));
        }
        sock.duplicate()
    }

    /// Duplicates of every open socket's descriptor, for a readiness thread.
    pub fn duplicates(&self) -> io::Result<Vec<OwnedFd>> {
        let mut v = vec![self.listener.duplicate()?];
        for p in self.peers.iter().flatten() {
            v.push(p.sock.duplicate()?);
        }
        Ok(v)
    }

    /// Waits until a socket is readable (or slot `write` is writable) or `timeout`
    /// passes (see [`Sock::wait`]); returns the first readable slot, if one is. Only
    /// the slot whose frames wait asks for writability: the others are writable almost
    /// always, and would end the wait at once.
    pub fn wait(
        &mut self,
        write: Option<usize>,
        timeout: Option<Duration>,
    ) -> io::Result<Option<usize>> {
        if self.peers.is_empty() {
            self.listener.wait(write.is_some(), timeout)?;
            return Ok(None);
        }
        let flags = |slot: usize| {
            if write == Some(slot) {
                PollFlags::POLLIN | PollFlags::POLLOUT
            } else {
                PollFlags::POLLIN
            }
        };
        self.listener.stats.poll_calls += 1;
        // (An allocation per blocking wait, which sleeps in the kernel anyway.)
        let mut slots = Vec::with_capacity(self.slots());
        let mut fds = Vec::with_capacity(self.slots());
        fds.push(PollFd::new(self.listener.as_fd(), flags(0)));
        slots.push(0);
        for (i, p) in self.peers.iter().enumerate() {
            if let Some(p) = p {
                fds.push(PollFd::new(p.sock.as_fd(), flags(i + 1)));
                slots.push(i + 1);
            }
        }
        super::sock::poll_fds(&mut fds, timeout)?;
        Ok(fds.iter().zip(&slots).find_map(|(f, &i)| {
            f.revents()
                .is_some_and(|r| r.contains(PollFlags::POLLIN))
                .then_some(i)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// Receives one datagram on `s` (waiting up to a second): its sender and bytes.
    fn take(s: &mut Sock) -> Option<(SocketAddr, Vec<u8>)> {
        let mut bufs = vec![vec![0u8; 64]];
        let mut got = Vec::new();
        s.wait(false, Some(Duration::from_secs(1))).expect("wait");
        s.recv_batch(&mut bufs, &mut got).expect("recv");
        got.first()
            .map(|&(j, from, len)| (from, bufs[j][..len].to_vec()))
    }

    /// A blocking wait asks only the slot whose frames wait for writability: asked of
    /// no open slot (or of none), it sleeps until its timeout with nothing to read
    /// (every socket here is writable, so asking them all would end it at once); asked
    /// of an open slot, the writable socket ends it at once. (Observed with a generous
    /// margin: poll(2) returns before its timeout only for an event.)
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_wait_asks_writability_of_the_blocked_slot_only() {
        use std::time::Instant;
        let l = Sock::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let mut socks = Socks::new(l, 4);
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let (slot, _) = socks.attach(a.local_addr().expect("addr"), false);
        assert_eq!(slot, 1);
        for write in [None, Some(7)] {
            let t = Instant::now();
            let r = socks.wait(write, Some(Duration::from_millis(300)));
            assert_eq!(r.expect("wait"), None);
            assert!(
                t.elapsed() >= Duration::from_millis(250),
                "{write:?}: woke early"
            );
        }
        for write in [0, 1] {
            let t = Instant::now();
            let r = socks.wait(Some(write), Some(Duration::from_secs(20)));
            assert_eq!(r.expect("wait"), None);
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "slot {write}: not woken"
            );
        }
    }

    /// With a readiness thread, a connected socket whose descriptor cannot be
    /// duplicated for it is not kept: the peer uses the listener (its datagrams arrive
    /// there), and the failure is counted. Without a thread nothing is duplicated.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_socket_the_readiness_thread_cannot_watch_is_not_kept() {
        let l = Sock::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let at = l.local_addr().expect("addr");
        let mut socks = Socks::new(l, 4);
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let c = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = |s: &UdpSocket| s.local_addr().expect("addr");

        socks.fail_duplicates = true;
        let (slot, fd) = socks.attach(addr(&a), true);
        assert_eq!((slot, fd.is_none()), (0, true));
        assert_eq!((socks.opened, socks.open_errors, socks.slots()), (0, 1, 1));
        a.send_to(b"to the listener", at).expect("send");
        assert_eq!(
            take(socks.get_mut(0).expect("listener")),
            Some((addr(&a), b"to the listener".to_vec()))
        );

        // Unwatched: opened, nothing duplicated (the failing duplication not asked).
        let (slot, fd) = socks.attach(addr(&b), false);
        assert_eq!((slot, fd.is_none(), socks.opened), (1, true, 1));
        b.send_to(b"to its socket", at).expect("send");
        assert_eq!(
            take(socks.get_mut(1).expect("b's socket")),
            Some((addr(&b), b"to its socket".to_vec()))
        );

        // Watched and duplicable: opened, with the duplicate for the thread.
        socks.fail_duplicates = false;
        let (slot, fd) = socks.attach(addr(&c), true);
        assert_eq!((slot, fd.is_some(), socks.opened), (2, true, 2));
    }
}
