//! The socket: non-blocking UDP with batched system calls (`sendmmsg`/`recvmmsg` through
//! `nix` on Linux and Android; one datagram per call elsewhere; a lone datagram goes with
//! `sendto`, which needs no message-header arrays) and `ppoll` (`poll` elsewhere) for
//! readiness. Datagrams are received into the caller's buffers and handed over in place.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags};

/// Receive buffer size: the largest datagram of a 9000-byte path plus slack.
pub const RX_BUF: usize = 9216;
/// Receive buffer size on a loopback address: the largest UDP datagram (the loopback
/// interface's MTU is 64 KiB, so nothing is fragmented).
pub const RX_BUF_LOOPBACK: usize = 65536;

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
}

/// A non-blocking UDP socket with batched IO.
#[derive(Debug)]
pub struct Sock {
    sock: UdpSocket,
    /// The kernel's receive buffer size (`SO_RCVBUF` as read back), 0 if unknown.
    rcvbuf: usize,
    /// Counters.
    pub stats: SockStats,
}

fn to_io(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Sock {
    /// A duplicate of the socket's descriptor (same socket), for a thread that only polls
    /// it (see [`super::watch`]).
    pub fn duplicate(&self) -> io::Result<std::os::fd::OwnedFd> {
        Ok(self.sock.try_clone()?.into())
    }

    /// Binds `addr`, non-blocking.
    pub fn bind(addr: SocketAddr) -> io::Result<Sock> {
        let sock = UdpSocket::bind(addr)?;
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
            stats: SockStats::default(),
        })
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
        let mut fds = [PollFd::new(self.sock.as_fd(), flags)];
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let r = {
            use nix::sys::time::TimeSpec;
            let t = timeout.map(|d| TimeSpec::from_duration(d.min(Duration::from_secs(1 << 30))));
            nix::poll::ppoll(&mut fds, t, None)
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
            poll(&mut fds, t)
        };
        match r {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(to_io(e)),
        }
    }

    /// Sends datagrams from the front of `q` until it is empty or the socket would block.
    /// Datagrams the kernel refuses are dropped and counted.
    pub fn send_all(
        &mut self,
        q: &mut std::collections::VecDeque<(SocketAddr, Vec<u8>)>,
        batch: usize,
    ) -> io::Result<()> {
        while !q.is_empty() {
            let n = q.len().min(batch.max(1));
            self.stats.send_calls += 1;
            let r = match q.front() {
                Some((a, d)) if n == 1 => self.sock.send_to(d, a).map(|_| 1),
                _ => self.send_batch(q.range(..n)),
            };
            match r {
                Ok(sent) => {
                    let sent = sent.clamp(1, n);
                    self.stats.tx_datagrams += sent as u64;
                    q.drain(..sent);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // The first datagram of the batch was refused (EHOSTUNREACH, EMSGSIZE,
                    // ...): drop it; the reliability layer retransmits.
                    self.stats.tx_errors += 1;
                    q.pop_front();
                }
            }
        }
        Ok(())
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn send_batch<'a>(
        &mut self,
        items: impl Iterator<Item = &'a (SocketAddr, Vec<u8>)>,
    ) -> io::Result<usize> {
        use nix::sys::socket::{sendmmsg, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage};
        use std::io::IoSlice;
        use std::os::fd::AsRawFd;
        let items: Vec<&(SocketAddr, Vec<u8>)> = items.collect();
        let iovs: Vec<[IoSlice<'_>; 1]> = items.iter().map(|(_, d)| [IoSlice::new(d)]).collect();
        let addrs: Vec<Option<SockaddrStorage>> = items
            .iter()
            .map(|(a, _)| Some(SockaddrStorage::from(*a)))
            .collect();
        let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(items.len(), None);
        let cmsgs: [ControlMessage<'_>; 0] = [];
        let res = sendmmsg(
            self.sock.as_raw_fd(),
            &mut hdrs,
            &iovs,
            &addrs,
            cmsgs,
            MsgFlags::MSG_DONTWAIT,
        )
        .map_err(to_io)?;
        Ok(res.count())
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn send_batch<'a>(
        &mut self,
        mut items: impl Iterator<Item = &'a (SocketAddr, Vec<u8>)>,
    ) -> io::Result<usize> {
        match items.next() {
            Some((a, d)) => self.sock.send_to(d, a).map(|_| 1),
            None => Ok(0),
        }
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
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionRefused
                ) =>
            {
                Ok(0)
            }
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
        use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders, SockaddrLike, SockaddrStorage};
        use std::io::IoSliceMut;
        use std::os::fd::AsRawFd;
        let fd = self.sock.as_raw_fd();
        let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(bufs.len(), None);
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
            .iter_mut()
            .map(|b| [IoSliceMut::new(&mut b[..])])
            .collect();
        let cap = iovs.first().map_or(0, |v| v[0].len());
        let res = recvmmsg(fd, &mut hdrs, iovs.iter_mut(), MsgFlags::MSG_DONTWAIT, None)
            .map_err(to_io)?;
        let mut n = 0;
        for (j, r) in res.enumerate() {
            n += 1;
            if r.flags.contains(MsgFlags::MSG_TRUNC) || r.bytes > cap {
                self.stats.rx_truncated += 1;
                continue;
            }
            let addr = r.address.and_then(|a: SockaddrStorage| {
                let _ = a.family();
                if let Some(v4) = a.as_sockaddr_in() {
                    Some(SocketAddr::V4((*v4).into()))
                } else {
                    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
                }
            });
            if let Some(a) = addr {
                got.push((j, a, r.bytes));
            }
        }
        Ok(n)
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
