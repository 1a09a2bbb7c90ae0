//! The socket: non-blocking UDP with batched system calls (`sendmmsg`/`recvmmsg` through
//! `nix` on Linux and Android; one datagram per call elsewhere; a lone datagram goes with
//! `sendmsg` / `recvfrom`, which need no message-header arrays) and `ppoll` (`poll`
//! elsewhere) for readiness. Outgoing datagrams are gathered from their pieces (headers,
//! payload in place); incoming ones are received into the caller's buffers and handed over
//! in place, or peeked at and scattered so that a payload lands in its destination.

use std::io::{self, IoSlice};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags};

/// Receive buffer size: the largest datagram of a 9000-byte path plus slack.
pub const RX_BUF: usize = 9216;
/// Receive buffer size on a loopback address: the largest UDP datagram (the loopback
/// interface's MTU is 64 KiB, so nothing is fragmented).
pub const RX_BUF_LOOPBACK: usize = 65536;

/// Most pages of a payload [`Sock::send_spliced`] hands to the socket in one piece: the
/// kernel moves at most 16 pipe buffers into a socket per internal send, and the head
/// takes one.
pub const SPLICE_PAGES: usize = 15;

/// Whether [`Sock::peek`] and [`Sock::recv_split`] exist (Linux and Android): the device
/// can then receive an RDMA payload straight into its destination.
pub const PEEK: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// Syscall counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SockStats {
    /// Send system calls.
    pub send_calls: u64,
    /// Receive system calls (including the ones that found nothing).
    pub recv_calls: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// Datagrams the kernel refused (unreachable, too big): dropped, retransmitted later.
    pub tx_errors: u64,
    /// Datagrams longer than the receive buffer (dropped).
    pub rx_truncated: u64,
    /// `poll`/`ppoll` calls (blocking waits).
    pub poll_calls: u64,
    /// Datagrams whose payload was spliced from its memory ([`Sock::send_spliced`]).
    pub tx_spliced: u64,
}

/// A non-blocking UDP socket with batched IO.
#[derive(Debug)]
pub struct Sock {
    sock: UdpSocket,
    /// The kernel's receive buffer size (`SO_RCVBUF` as read back), 0 if unknown.
    rcvbuf: usize,
    /// Bound to an IPv6 address (its senders' addresses are `sockaddr_in6`).
    ipv6: bool,
    /// The peer it is `connect`ed to (see [`Sock::connect_beside`]): datagrams go without
    /// an address, to that peer only.
    peer: Option<SocketAddr>,
    /// The pipe [`Sock::send_spliced`] moves pages through (read end, write end), made
    /// at its first use.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pipe: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>,
    /// Counters.
    pub stats: SockStats,
}

/// The sender's address of a received datagram (IPv4 or IPv6).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn socket_addr(a: nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    use nix::sys::socket::SockaddrLike;
    let _ = a.family();
    if let Some(v4) = a.as_sockaddr_in() {
        Some(SocketAddr::V4((*v4).into()))
    } else {
        a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
    }
}

/// Most datagrams one batched receive call ([`Sock::recv_batch`]) returns.
pub const RECV_BATCH_MAX: usize = 32;

/// Widest receive call whose iovecs are set up for that width only (see
/// `Sock::recv_raw`): the device's probe after a one-datagram receive (`RX_PROBE`).
const RECV_NARROW: usize = 4;

/// `recvmmsg` message headers kept between calls. `nix`'s `MultiHeaders` holds raw
/// pointers (it is not `Send`), so it cannot live in the device, which must be; it is
/// kept per thread instead (preallocating it on every call cost ~2,500 instructions and
/// three allocations). The kernel writes each header's address length on return, and
/// `nix` does not reset it: the headers are kept for one address family (the
/// socket's: every sender of an IPv4 socket has a 16-byte address, of an IPv6 one a
/// 28-byte address), and built anew for a socket of the other family.
#[cfg(any(target_os = "linux", target_os = "android"))]
struct RxHeaders {
    ipv6: bool,
    hdrs: nix::sys::socket::MultiHeaders<nix::sys::socket::SockaddrStorage>,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl RxHeaders {
    fn new(ipv6: bool) -> RxHeaders {
        RxHeaders {
            ipv6,
            hdrs: nix::sys::socket::MultiHeaders::preallocate(RECV_BATCH_MAX, None),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
thread_local! {
    static RX_HEADERS: std::cell::RefCell<Option<RxHeaders>> = const { std::cell::RefCell::new(None) };
}

/// `ppoll` (Linux, Android) or `poll` of `fds` for `timeout` (see [`Sock::wait`]);
/// an interruption counts as a wake-up.
pub(crate) fn poll_fds(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let r = {
        use nix::sys::time::TimeSpec;
        let t = timeout.map(|d| TimeSpec::from_duration(d.min(Duration::from_secs(1 << 30))));
        nix::poll::ppoll(fds, t, None)
    };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let r = {
        use nix::poll::{poll, PollTimeout};
        let t = match timeout {
            None => PollTimeout::NONE,
            Some(d) if d.is_zero() => PollTimeout::ZERO,
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        poll(fds, t)
    };
    match r {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(e) => Err(to_io(e)),
    }
}

fn to_io(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Sock {
    /// A duplicate of the socket's descriptor (same socket), for a thread that only polls
    /// it (see [`crate::watch`]).
    pub fn duplicate(&self) -> io::Result<std::os::fd::OwnedFd> {
        Ok(self.sock.try_clone()?.into())
    }

    /// Binds `addr`, non-blocking.
    pub fn bind(addr: SocketAddr) -> io::Result<Sock> {
        let sock = UdpSocket::bind(addr)?;
        Sock::setup(sock, addr.is_ipv6(), None)
    }

    /// Non-blocking, with big kernel buffers.
    fn setup(sock: UdpSocket, ipv6: bool, peer: Option<SocketAddr>) -> io::Result<Sock> {
        sock.set_nonblocking(true)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use nix::sys::socket::{setsockopt, sockopt};
            // Bigger kernel buffers absorb bursts (a window of datagrams); the forced variant
            // needs CAP_NET_ADMIN, the plain one is capped by net.core.[rw]mem_max.
            let size = 4 << 20;
            if setsockopt(&sock, sockopt::RcvBufForce, &size).is_err() {
                let _ = setsockopt(&sock, sockopt::RcvBuf, &size);
            }
            if setsockopt(&sock, sockopt::SndBufForce, &size).is_err() {
                let _ = setsockopt(&sock, sockopt::SndBuf, &size);
            }
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let rcvbuf =
            nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::RcvBuf).unwrap_or(0);
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let rcvbuf = 0;
        Ok(Sock {
            sock,
            rcvbuf,
            ipv6,
            peer,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            pipe: None,
            stats: SockStats::default(),
        })
    }

    /// A socket on this socket's address, `connect`ed to `peer` (Linux and Android;
    /// elsewhere `Unsupported`). `others`: the other sockets on the address (those
    /// connected beside it before). The kernel delivers `peer`'s datagrams to the new
    /// socket (a connected socket matches a datagram's source as well, so it is preferred
    /// over this one), and sends on it skip the route look-up of an addressed send: about
    /// 0.3–0.8 µs less per one-way trip on loopback (`examples/udp_floor.rs`). Datagrams
    /// of other peers keep coming to this socket; the owner must read every one.
    ///
    /// Sockets can share an address only if every one of them has `SO_REUSEPORT` set
    /// when the next binds (the kernel's check passes at the first socket it meets that
    /// has it). They have it only for that moment (set on all, the new one bound, cleared
    /// on all), so outside those moments any other socket that tries to bind the address
    /// fails with `AddrInUse`, as when it was bound. Not inside them: a socket of a
    /// process of the same user (the kernel's condition for `SO_REUSEPORT`) that sets
    /// `SO_REUSEPORT` and binds the address meanwhile succeeds and stays bound (a thread
    /// binding in a loop while 16 sockets were connected 200 times did, thousands of
    /// times), and may then take datagrams meant for the device's own socket. No option
    /// closes that window; set `UdpConfig::connect_peers` to 0 where such processes run.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn connect_beside(&self, others: &[&Sock], peer: SocketAddr) -> io::Result<Sock> {
        use nix::sys::socket::{
            bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
        };
        use std::os::fd::AsRawFd;
        let local = self.local_addr()?;
        if local.is_ipv6() != peer.is_ipv6() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("peer {peer} is not of the socket's address family ({local})"),
            ));
        }
        let family = if local.is_ipv6() {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        let fd = socket(family, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None).map_err(to_io)?;
        let all = || std::iter::once(self).chain(others.iter().copied());
        let set = |s: &Sock, on: bool| setsockopt(&s.sock, sockopt::ReusePort, &on).map_err(to_io);
        setsockopt(&fd, sockopt::ReusePort, &true).map_err(to_io)?;
        let mut r = all().try_for_each(|s| set(s, true));
        if r.is_ok() {
            r = bind(fd.as_raw_fd(), &SockaddrStorage::from(local)).map_err(to_io);
        }
        // Cleared on every socket whatever happened (on the new one too: the kernel's
        // check would pass at it).
        let cleared = all().map(|s| set(s, false)).fold(Ok(()), Result::and);
        let cleared_new = setsockopt(&fd, sockopt::ReusePort, &false).map_err(to_io);
        r?;
        cleared?;
        cleared_new?;
        let sock = UdpSocket::from(fd);
        sock.connect(peer)?;
        Sock::setup(sock, local.is_ipv6(), Some(peer))
    }

    /// See the Linux version: unsupported here.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub fn connect_beside(&self, _others: &[&Sock], _peer: SocketAddr) -> io::Result<Sock> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "connected sockets beside the device's need SO_REUSEPORT semantics of Linux",
        ))
    }

    /// The peer this socket is connected to, if it is.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The kernel's receive buffer size in bytes (what `SO_RCVBUF` reads back; the
    /// kernel counts its own overhead in it), 0 if unknown.
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Waits until the socket is readable (or writable, with `want_write`) or `timeout`
    /// passes (`None`: no limit). `ppoll` on Linux and Android, to the microsecond (a
    /// delayed ACK's deadline is a fraction of a millisecond away); elsewhere `poll`,
    /// rounded up to whole milliseconds so that it never spins.
    pub fn wait(&mut self, want_write: bool, timeout: Option<Duration>) -> io::Result<()> {
        let mut flags = PollFlags::POLLIN;
        if want_write {
            flags |= PollFlags::POLLOUT;
        }
        self.stats.poll_calls += 1;
        poll_fds(&mut [PollFd::new(self.sock.as_fd(), flags)], timeout)
    }

    /// The socket's descriptor (for `poll(2)` with others).
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Sends `msgs`, each a datagram gathered from two pieces (headers, payload: the
    /// payload goes from where it lies, no staging copy), with
    /// `sendmsg` for one and `sendmmsg` for several (Linux and Android; elsewhere one
    /// datagram per call, its pieces concatenated). Returns how many were sent from the
    /// front: fewer than `msgs.len()` when the socket would block (`WouldBlock` if none
    /// was); any other error is the first datagram's (the kernel refused it: unreachable,
    /// too big), which the caller drops and counts with [`Sock::count_refused`].
    pub fn send_gather(&mut self, msgs: &[(SocketAddr, [IoSlice<'_>; 2])]) -> io::Result<usize> {
        if msgs.is_empty() {
            return Ok(0);
        }
        self.stats.send_calls += 1;
        let r = loop {
            match self.send_raw(msgs) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        if let Ok(n) = r {
            self.stats.tx_datagrams += n as u64;
        }
        r
    }

    /// Sends one datagram to the connected peer: `head` copied, then `payload` spliced
    /// from where it lies (`head` written into a pipe, `payload` added with `vmsplice`,
    /// both moved into the socket with one `splice`): the kernel takes references to the
    /// payload's pages instead of copying them, and on loopback the receiver's copy out
    /// of the datagram is the only one. Worth it for large payloads only (three system
    /// calls per datagram instead of a share of one `sendmmsg`). When `payload` spans at
    /// most [`SPLICE_PAGES`] pages, the datagram goes to the socket in one piece, and
    /// its checksum is left to the device as for any datagram (in more pieces the kernel
    /// checksums it in software, and a loopback receiver verifies it while copying).
    ///
    /// **The payload's memory is read when the datagram is received, not now**: it must
    /// not change until the peer has taken the datagram in. The device splices only a
    /// served RDMA read's data from a registered region, which RDMA rules already forbid
    /// changing while the read is in progress; a read completes when all its data has
    /// been received, so only duplicates can be in flight after that, and their bytes are
    /// dropped. A deregistration does not recall datagrams in flight: the device sends a
    /// spliced read's final status only once all its data is acknowledged, and fails the
    /// read if its key went meanwhile.
    ///
    /// `WouldBlock` with nothing sent when the socket's buffer is full. After any error
    /// a datagram the socket took in part is ended short (the peer drops it for its
    /// length; the reliability layer sends the frame again) and the pipe is made anew.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn send_spliced(&mut self, head: &[u8], payload: &[u8]) -> io::Result<()> {
        use nix::fcntl::{splice, vmsplice, SpliceFFlags};
        use nix::sys::socket::{send, MsgFlags};
        use std::os::fd::AsRawFd;
        if self.peer.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a spliced send needs a connected socket",
            ));
        }
        if self.pipe.is_none() {
            use nix::fcntl::OFlag;
            let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(to_io)?;
            // Room for a whole datagram's pages (best effort: the loop below copes with
            // less).
            let _ = nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_SETPIPE_SZ(256 << 10));
            self.pipe = Some((r, w));
        }
        let Some((r, w)) = &self.pipe else {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        };
        self.stats.send_calls += 1;
        let total = head.len() + payload.len();
        let mut moved = 0;
        let r = (|| -> nix::Result<()> {
            if nix::unistd::write(w, head)? != head.len() {
                return Err(nix::errno::Errno::EAGAIN);
            }
            let (mut queued, mut off) = (head.len(), 0);
            while moved < total {
                if off < payload.len() {
                    let n = vmsplice(w, &[IoSlice::new(&payload[off..])], SpliceFFlags::empty())?;
                    off += n;
                    queued += n;
                }
                let mut f = SpliceFFlags::SPLICE_F_NONBLOCK;
                if off < payload.len() {
                    f |= SpliceFFlags::SPLICE_F_MORE;
                }
                match splice(r, None, &self.sock, None, queued - moved, f)? {
                    0 => return Err(nix::errno::Errno::EPIPE),
                    m => moved += m,
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                self.stats.tx_datagrams += 1;
                self.stats.tx_spliced += 1;
                Ok(())
            }
            Err(e) => {
                if moved > 0 {
                    // End the datagram begun short (its length no longer matches its
                    // header).
                    let _ = send(self.sock.as_raw_fd(), &[], MsgFlags::MSG_DONTWAIT);
                }
                self.pipe = None;
                Err(to_io(e))
            }
        }
    }

    /// See the Linux version: unsupported here (the device never calls it, see
    /// [`PEEK`]).
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub fn send_spliced(&mut self, _head: &[u8], _payload: &[u8]) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "spliced sends need Linux",
        ))
    }

    /// Counts a datagram the kernel refused (dropped; the reliability layer sends it again).
    pub fn count_refused(&mut self) {
        self.stats.tx_errors += 1;
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn send_raw(&mut self, msgs: &[(SocketAddr, [IoSlice<'_>; 2])]) -> io::Result<usize> {
        use nix::sys::socket::{
            sendmmsg, sendmsg, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage,
        };
        use std::os::fd::AsRawFd;
        let fd = self.sock.as_raw_fd();
        // A connected socket sends to its peer without an address (an address would make
        // the kernel look the route up again).
        let connected = self.peer.is_some();
        if let [(a, iov)] = msgs {
            // (The address is converted only when it is passed.)
            let storage;
            let to = if connected {
                None
            } else {
                storage = SockaddrStorage::from(*a);
                Some(&storage)
            };
            return sendmsg(fd, iov, &[], MsgFlags::MSG_DONTWAIT, to)
                .map(|_| 1)
                .map_err(to_io);
        }
        let addrs: Vec<Option<SockaddrStorage>> = msgs
            .iter()
            .map(|(a, _)| (!connected).then(|| SockaddrStorage::from(*a)))
            .collect();
        let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(msgs.len(), None);
        let cmsgs: [ControlMessage<'_>; 0] = [];
        let iovs = msgs.iter().map(|(_, iov)| iov);
        let res =
            sendmmsg(fd, &mut hdrs, iovs, &addrs, cmsgs, MsgFlags::MSG_DONTWAIT).map_err(to_io)?;
        Ok(res.count().clamp(1, msgs.len()))
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn send_raw(&mut self, msgs: &[(SocketAddr, [IoSlice<'_>; 2])]) -> io::Result<usize> {
        match msgs.first() {
            Some((a, iov)) => {
                let d: Vec<u8> = iov.iter().flat_map(|s| s.iter().copied()).collect();
                match self.peer {
                    Some(_) => self.sock.send(&d).map(|_| 1),
                    None => self.sock.send_to(&d, a).map(|_| 1),
                }
            }
            None => Ok(0),
        }
    }

    /// Looks at the next datagram without taking it (`MSG_PEEK`): its sender and its full
    /// length, its first bytes copied into `head`. `None`: nothing waiting (or an error
    /// about an earlier datagram, or an interruption). Linux and Android only (see
    /// [`PEEK`]).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn peek(&mut self, head: &mut [u8]) -> io::Result<Option<(SocketAddr, usize)>> {
        use nix::sys::socket::MsgFlags;
        self.stats.recv_calls += 1;
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC | MsgFlags::MSG_DONTWAIT;
        let mut iov = [io::IoSliceMut::new(head)];
        self.recv_msg(&mut iov, flags)
    }

    /// Takes the next datagram, its bytes scattered over `head` then `body` (so that its
    /// payload lands where it belongs, without a copy through a receive buffer): its
    /// sender and its full length (longer than both buffers: it was cut, counted).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn recv_split(
        &mut self,
        head: &mut [u8],
        body: &mut [u8],
    ) -> io::Result<Option<(SocketAddr, usize)>> {
        self.recv_scattered(&mut [io::IoSliceMut::new(head), io::IoSliceMut::new(body)])
    }

    /// Takes the next datagram without looking at it first, its bytes scattered over
    /// `head`, then `body` (where a payload is expected), then `spare` (the rest of a
    /// datagram longer than expected): its sender and its full length (longer than the
    /// three buffers: it was cut, counted). One system call where [`Sock::peek`] and
    /// [`Sock::recv_split`] make two.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn recv_split3(
        &mut self,
        head: &mut [u8],
        body: &mut [u8],
        spare: &mut [u8],
    ) -> io::Result<Option<(SocketAddr, usize)>> {
        self.recv_scattered(&mut [
            io::IoSliceMut::new(head),
            io::IoSliceMut::new(body),
            io::IoSliceMut::new(spare),
        ])
    }

    /// Takes the next datagram into the buffers of `iov` in order (one system call): its
    /// sender and its full length; a datagram longer than the buffers is cut and counted.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn recv_scattered(
        &mut self,
        iov: &mut [io::IoSliceMut<'_>],
    ) -> io::Result<Option<(SocketAddr, usize)>> {
        use nix::sys::socket::MsgFlags;
        self.stats.recv_calls += 1;
        let cap: usize = iov.iter().map(|b| b.len()).sum();
        let r = self.recv_msg(iov, MsgFlags::MSG_TRUNC | MsgFlags::MSG_DONTWAIT)?;
        if let Some((_, len)) = r {
            self.stats.rx_datagrams += 1;
            if len > cap {
                self.stats.rx_truncated += 1;
            }
        }
        Ok(r)
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn recv_msg(
        &mut self,
        iov: &mut [io::IoSliceMut<'_>],
        flags: nix::sys::socket::MsgFlags,
    ) -> io::Result<Option<(SocketAddr, usize)>> {
        use nix::errno::Errno;
        use nix::sys::socket::{recvmsg, SockaddrStorage};
        use std::os::fd::AsRawFd;
        let fd = self.sock.as_raw_fd();
        let r = match recvmsg::<SockaddrStorage>(fd, iov, None, flags) {
            Ok(r) => r,
            Err(Errno::EAGAIN | Errno::EINTR | Errno::ECONNREFUSED) => return Ok(None),
            Err(e) => return Err(to_io(e)),
        };
        let addr = r.address.and_then(socket_addr);
        Ok(addr.map(|a| (a, r.bytes)))
    }

    /// One receive call (`recvmmsg` of up to `bufs.len()` datagrams where available;
    /// `recvfrom` for a single buffer, which needs no message-header arrays, and
    /// elsewhere), without waiting. Datagram *j* of the call lands in `bufs[j]`;
    /// `got` is cleared and gets `(j, sender, length)` of each datagram kept (a datagram
    /// longer than its buffer is counted and dropped). Returns how many datagrams the call
    /// returned, 0 when nothing was waiting; errors that report an earlier datagram's fate
    /// (`ECONNREFUSED`) and interruptions also give 0.
    pub fn recv_batch(
        &mut self,
        bufs: &mut [Vec<u8>],
        got: &mut Vec<(usize, SocketAddr, usize)>,
    ) -> io::Result<usize> {
        got.clear();
        self.stats.recv_calls += 1;
        match self.recv_raw(bufs, got) {
            Ok(n) => {
                self.stats.rx_datagrams += got.len() as u64;
                Ok(n)
            }
            Err(e) if nothing_received(&e) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// [`Sock::recv_batch`] with the one buffer `b`, without the `got` list: what it
    /// returns, with its one entry (sender, length) when the datagram was kept. Counts
    /// alike.
    pub fn recv_single(
        &mut self,
        b: &mut [u8],
    ) -> io::Result<(usize, Option<(SocketAddr, usize)>)> {
        self.stats.recv_calls += 1;
        match self.sock.recv_from(b) {
            Ok((len, _)) if len >= b.len() => {
                // Cut (see `recv_one`): dropped and counted.
                self.stats.rx_truncated += 1;
                Ok((1, None))
            }
            Ok((len, a)) => {
                self.stats.rx_datagrams += 1;
                Ok((1, Some((a, len))))
            }
            Err(e) if nothing_received(&e) => Ok((0, None)),
            Err(e) => Err(e),
        }
    }

    /// `recvfrom` into `b`. The buffers are longer than any datagram the device sends
    /// ([`RX_BUF`] above the largest path's, [`RX_BUF_LOOPBACK`] above UDP's 65,507-byte
    /// limit), so a datagram that fills `b` was cut: dropped and counted.
    fn recv_one(
        &mut self,
        b: &mut [u8],
        got: &mut Vec<(usize, SocketAddr, usize)>,
    ) -> io::Result<usize> {
        let (len, a) = self.sock.recv_from(b)?;
        if len >= b.len() {
            self.stats.rx_truncated += 1;
        } else {
            got.push((0, a, len));
        }
        Ok(1)
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn recv_raw(
        &mut self,
        bufs: &mut [Vec<u8>],
        got: &mut Vec<(usize, SocketAddr, usize)>,
    ) -> io::Result<usize> {
        if let [b] = bufs {
            return self.recv_one(b, got);
        }
        // A narrow call (a probe of a few datagrams) sets up iovecs for its width only.
        if bufs.len() <= RECV_NARROW {
            return self.recv_mmsg::<RECV_NARROW>(bufs, got);
        }
        self.recv_mmsg::<RECV_BATCH_MAX>(bufs, got)
    }

    /// [`Sock::recv_raw`] of up to `N` (at most [`RECV_BATCH_MAX`]) datagrams with
    /// `recvmmsg`: the first `min(N, bufs.len())` buffers.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn recv_mmsg<const N: usize>(
        &mut self,
        bufs: &mut [Vec<u8>],
        got: &mut Vec<(usize, SocketAddr, usize)>,
    ) -> io::Result<usize> {
        use nix::sys::socket::{recvmmsg, MsgFlags};
        use std::io::IoSliceMut;
        use std::os::fd::AsRawFd;
        let fd = self.sock.as_raw_fd();
        let ipv6 = self.ipv6;
        // The iovecs on the stack (at most RECV_BATCH_MAX datagrams a call; a caller with
        // more buffers calls again), the message headers from this thread's cache: no
        // allocation per call.
        let w = bufs.len().min(N).min(RECV_BATCH_MAX);
        RX_HEADERS.with(|cell| {
            let mut cache = cell.borrow_mut();
            if cache.as_ref().is_some_and(|h| h.ipv6 != ipv6) {
                *cache = None;
            }
            let hdrs = cache.get_or_insert_with(|| RxHeaders::new(ipv6));
            let mut iovs: [[IoSliceMut<'_>; 1]; N] =
                std::array::from_fn(|_| [IoSliceMut::new(&mut [])]);
            for (v, b) in iovs.iter_mut().zip(bufs.iter_mut()) {
                v[0] = IoSliceMut::new(&mut b[..]);
            }
            let cap = iovs[0][0].len();
            let res = recvmmsg(
                fd,
                &mut hdrs.hdrs,
                iovs[..w].iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            )
            .map_err(to_io)?;
            let mut n = 0;
            for (j, r) in res.enumerate() {
                n += 1;
                if r.flags.contains(MsgFlags::MSG_TRUNC) || r.bytes > cap {
                    self.stats.rx_truncated += 1;
                    continue;
                }
                let addr = r.address.and_then(socket_addr);
                if let Some(a) = addr {
                    got.push((j, a, r.bytes));
                }
            }
            Ok(n)
        })
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn recv_raw(
        &mut self,
        bufs: &mut [Vec<u8>],
        got: &mut Vec<(usize, SocketAddr, usize)>,
    ) -> io::Result<usize> {
        match bufs.first_mut() {
            Some(b) => self.recv_one(b, got),
            None => Ok(0),
        }
    }
}

/// A receive error that means "nothing received": no datagram waiting, a signal, or
/// (on a connected socket) an ICMP port-unreachable left by an earlier send.
fn nothing_received(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::ConnectionRefused
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `n` datagrams of distinct lengths from a fresh socket to `to`; returns the
    /// sender's address.
    fn send_some(to: SocketAddr, n: usize) -> SocketAddr {
        let any = if to.is_ipv6() {
            "[::1]:0"
        } else {
            "127.0.0.1:0"
        };
        let s = UdpSocket::bind(any).expect("bind");
        for i in 0..n {
            s.send_to(&vec![i as u8; 10 + i], to).expect("send");
        }
        s.local_addr().expect("addr")
    }

    /// Batched receives on an IPv4 and an IPv6 socket of one thread, alternately (the
    /// thread keeps one set of message headers): every datagram arrives with its own
    /// sender's address and length, and nothing is left behind.
    /// Takes one datagram from `s`, waiting up to a second: its sender and bytes.
    fn take_one(s: &mut Sock) -> Option<(SocketAddr, Vec<u8>)> {
        let mut bufs = vec![vec![0u8; 64]];
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(1) {
            s.recv_batch(&mut bufs, &mut got).expect("recv");
            if let Some(&(j, from, len)) = got.first() {
                return Some((from, bufs[j][..len].to_vec()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    /// Sockets connected beside the device's take their peers' datagrams (and only
    /// those), send from the device's address, and leave the address exclusive: neither
    /// a plain socket nor one with `SO_REUSEPORT` can bind it afterwards.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn sockets_connected_beside_take_their_peers_datagrams_and_keep_the_address() {
        use nix::sys::socket::sockopt;
        let mut l = Sock::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let at = l.local_addr().expect("addr");
        let peers: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let addr = |i: usize| peers[i].local_addr().expect("addr");
        let mut c0 = l.connect_beside(&[], addr(0)).expect("connect beside");
        let mut c1 = l.connect_beside(&[&c0], addr(1)).expect("connect beside");
        assert_eq!(
            (c0.local_addr().expect("addr"), c0.peer()),
            (at, Some(addr(0)))
        );
        assert_eq!(
            (c1.local_addr().expect("addr"), c1.peer()),
            (at, Some(addr(1)))
        );
        for _ in 0..2 {
            let e = UdpSocket::bind(at).expect_err("taken");
            assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
            let e = reuseport_bind(at).expect_err("taken");
            assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        }
        for (i, p) in peers.iter().enumerate() {
            p.send_to(format!("from {i}").as_bytes(), at).expect("send");
        }
        assert_eq!(take_one(&mut c0), Some((addr(0), b"from 0".to_vec())));
        assert_eq!(take_one(&mut c1), Some((addr(1), b"from 1".to_vec())));
        assert_eq!(take_one(&mut l), Some((addr(2), b"from 2".to_vec())));
        // Sent without an address, from the device's.
        let sent = c1
            .send_gather(&[(addr(1), [IoSlice::new(b"to "), IoSlice::new(b"1")])])
            .expect("send");
        assert_eq!(sent, 1);
        let mut buf = [0u8; 16];
        peers[1]
            .set_read_timeout(Some(Duration::from_secs(1)))
            .expect("timeout");
        let (n, from) = peers[1].recv_from(&mut buf).expect("recv");
        assert_eq!((&buf[..n], from), (&b"to 1"[..], at));
        for s in [&l, &c0, &c1] {
            let on = nix::sys::socket::getsockopt(&s.sock, sockopt::ReusePort).expect("get");
            assert!(!on, "SO_REUSEPORT cleared");
        }
    }

    /// A spliced send is one datagram of exactly the head and the payload, whether the
    /// payload fits the socket in one piece ([`SPLICE_PAGES`]) or not, from anywhere in
    /// a page; a socket that is not connected refuses it.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_spliced_datagram_is_the_head_then_the_payload() {
        let mut l = Sock::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let at = l.local_addr().expect("addr");
        let mut rx = Sock::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let to = rx.local_addr().expect("addr");
        let mut c = l.connect_beside(&[], to).expect("connect beside");
        let data: Vec<u8> = (0..80_000u32).map(|i| (i * 7 + i / 4099) as u8).collect();
        let mut bufs = vec![vec![0u8; RX_BUF_LOOPBACK]];
        let mut got = Vec::new();
        // 40 bytes; 15 pages from a page boundary (one piece); 17 pages (more pieces).
        let base = (4096 - data.as_ptr() as usize % 4096) % 4096;
        for (start, len) in [(3, 40), (base, 15 * 4096), (base + 100, 65_000 - 48)] {
            let head: Vec<u8> = (0..48).map(|i| i as u8 ^ len as u8).collect();
            c.send_spliced(&head, &data[start..start + len])
                .expect("spliced");
            let t = std::time::Instant::now();
            while got.is_empty() && t.elapsed() < Duration::from_secs(1) {
                rx.recv_batch(&mut bufs, &mut got).expect("recv");
            }
            let &(j, from, n) = got.first().expect("a datagram");
            assert_eq!((from, n), (at, 48 + len));
            assert_eq!(bufs[j][..48], head[..]);
            assert!(
                bufs[j][48..n] == data[start..start + len],
                "payload of {len}"
            );
            got.clear();
        }
        assert_eq!(c.stats.tx_spliced, 3);
        let e = l
            .send_spliced(&[0; 8], &data[..100])
            .expect_err("not connected");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// Binds `at` with `SO_REUSEPORT` set first.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn reuseport_bind(at: SocketAddr) -> io::Result<()> {
        use nix::sys::socket::{
            bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
        };
        use std::os::fd::AsRawFd;
        let fd = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::empty(),
            None,
        )
        .map_err(to_io)?;
        setsockopt(&fd, sockopt::ReusePort, &true).map_err(to_io)?;
        bind(fd.as_raw_fd(), &SockaddrStorage::from(at)).map_err(to_io)
    }

    #[test]
    fn batched_receives_on_both_families_report_the_right_senders() {
        let mut socks = [
            Sock::bind("127.0.0.1:0".parse().expect("v4")).expect("bind v4"),
            Sock::bind("[::1]:0".parse().expect("v6")).expect("bind v6"),
        ];
        let mut bufs = vec![vec![0u8; 256]; 8];
        let mut got = Vec::new();
        for round in 0..3 {
            for s in &mut socks {
                let to = s.local_addr().expect("addr");
                let from = send_some(to, 3 + round);
                // Loopback delivery is synchronous: all are queued now.
                let n = s.recv_batch(&mut bufs, &mut got).expect("recv");
                assert_eq!(n, 3 + round, "{to}");
                for (i, &(j, a, len)) in got.iter().enumerate() {
                    assert_eq!((j, a, len), (i, from, 10 + i), "{to}");
                    assert!(bufs[j][..len].iter().all(|&b| b == i as u8));
                }
                assert_eq!(s.recv_batch(&mut bufs, &mut got).expect("recv"), 0);
                assert!(got.is_empty());
            }
        }
    }

    /// Narrow calls (`RECV_NARROW` buffers or fewer, iovecs for that width only) on both
    /// families: each takes as many datagrams as it has buffers, in order, with their
    /// senders and lengths, and the next call the rest.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn narrow_batches_on_both_families_take_their_width_in_order() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let mut s = Sock::bind(bind.parse().expect("addr")).expect("bind");
            let to = s.local_addr().expect("addr");
            for width in 2..=RECV_NARROW {
                let from = send_some(to, width + 1);
                let mut bufs = vec![vec![0u8; 256]; width];
                let mut got = Vec::new();
                assert_eq!(s.recv_batch(&mut bufs, &mut got).expect("recv"), width);
                for (i, &(j, a, len)) in got.iter().enumerate() {
                    assert_eq!((j, a, len), (i, from, 10 + i), "{to} width {width}");
                    assert!(bufs[j][..len].iter().all(|&b| b == i as u8));
                }
                assert_eq!(s.recv_batch(&mut bufs, &mut got).expect("recv"), 1);
                assert_eq!(got, [(0, from, 10 + width)]);
                assert_eq!(s.recv_batch(&mut bufs, &mut got).expect("recv"), 0);
            }
        }
    }

    /// `recv_single` takes one datagram with its sender and length (counted as
    /// `recv_batch` counts it), drops and counts one its buffer cuts, and finds nothing
    /// in an empty socket.
    #[test]
    fn a_single_receive_takes_one_datagram_and_counts_like_a_batch() {
        let mut s = Sock::bind("127.0.0.1:0".parse().expect("v4")).expect("bind");
        let to = s.local_addr().expect("addr");
        let from = send_some(to, 2);
        let mut b = vec![0u8; 64];
        assert_eq!(s.recv_single(&mut b).expect("recv"), (1, Some((from, 10))));
        assert!(b[..10].iter().all(|&x| x == 0));
        assert_eq!((s.stats.recv_calls, s.stats.rx_datagrams), (1, 1));
        // The second (11 bytes) does not fit 11 bytes of buffer: cut, dropped.
        let mut small = vec![0u8; 11];
        assert_eq!(s.recv_single(&mut small).expect("recv"), (1, None));
        assert_eq!(s.stats.rx_truncated, 1);
        assert_eq!(s.recv_single(&mut b).expect("recv"), (0, None));
        assert_eq!((s.stats.recv_calls, s.stats.rx_datagrams), (3, 1));
    }

    /// More buffers than one call takes: a call receives at most `RECV_BATCH_MAX`
    /// datagrams, the next call the rest.
    #[test]
    fn a_batch_wider_than_the_headers_is_received_in_two_calls() {
        let mut s = Sock::bind("127.0.0.1:0".parse().expect("v4")).expect("bind");
        let to = s.local_addr().expect("addr");
        let total = RECV_BATCH_MAX + 5;
        let from = send_some(to, total);
        let mut bufs = vec![vec![0u8; 256]; RECV_BATCH_MAX + 16];
        let mut got = Vec::new();
        assert_eq!(
            s.recv_batch(&mut bufs, &mut got).expect("recv"),
            RECV_BATCH_MAX
        );
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &(j, a, len))| (j, a, len) == (i, from, 10 + i)));
        assert_eq!(s.recv_batch(&mut bufs, &mut got).expect("recv"), 5);
        assert_eq!(got[4], (4, from, 10 + RECV_BATCH_MAX + 4));
    }
}
