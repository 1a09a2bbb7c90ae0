//! The socket: non-blocking UDP with batched system calls (`sendmmsg`/`recvmmsg` through
//! `nix` on Linux and Android; one datagram per call elsewhere) and `poll` for readiness.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

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
}

/// A non-blocking UDP socket with batched IO.
#[derive(Debug)]
pub struct Sock {
    sock: UdpSocket,
    rx_bufs: Vec<Vec<u8>>,
    /// The kernel's receive buffer size (`SO_RCVBUF` as read back), 0 if unknown.
    rcvbuf: usize,
    /// Counters.
    pub stats: SockStats,
}

fn to_io(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Sock {
    /// Binds `addr`, non-blocking, with room for `batch` datagrams of at most `rx_len`
    /// bytes per receive call.
    pub fn bind(addr: SocketAddr, batch: usize, rx_len: usize) -> io::Result<Sock> {
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
            rx_bufs: vec![vec![0u8; rx_len.max(1)]; batch.max(1)],
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
    /// passes (`None`: no limit). Rounds up to whole milliseconds, so it never spins.
    pub fn wait(&self, want_write: bool, timeout: Option<Duration>) -> io::Result<()> {
        let mut flags = PollFlags::POLLIN;
        if want_write {
            flags |= PollFlags::POLLOUT;
        }
        let t = match timeout {
            None => PollTimeout::NONE,
            Some(d) if d.is_zero() => PollTimeout::ZERO,
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(self.sock.as_fd(), flags)];
        match poll(&mut fds, t) {
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
            match self.send_batch(q.range(..n)) {
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

    /// Receives what is waiting (at most `max_calls` batched calls) into `out`.
    pub fn recv_all(
        &mut self,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
        max_calls: usize,
    ) -> io::Result<()> {
        for _ in 0..max_calls {
            self.stats.recv_calls += 1;
            match self.recv_batch(out) {
                Ok(n) if n < self.rx_bufs.len() => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // ECONNREFUSED and friends report an earlier datagram's fate: ignore.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn recv_batch(&mut self, out: &mut Vec<(SocketAddr, Vec<u8>)>) -> io::Result<usize> {
        use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders, SockaddrLike, SockaddrStorage};
        use std::io::IoSliceMut;
        use std::os::fd::AsRawFd;
        let fd = self.sock.as_raw_fd();
        let mut got: Vec<(Option<SocketAddr>, usize, bool)> = Vec::new();
        {
            let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(self.rx_bufs.len(), None);
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
                .rx_bufs
                .iter_mut()
                .map(|b| [IoSliceMut::new(&mut b[..])])
                .collect();
            let res = recvmmsg(fd, &mut hdrs, iovs.iter_mut(), MsgFlags::MSG_DONTWAIT, None)
                .map_err(to_io)?;
            for r in res {
                let addr = r.address.and_then(|a: SockaddrStorage| {
                    let _ = a.family();
                    if let Some(v4) = a.as_sockaddr_in() {
                        Some(SocketAddr::V4((*v4).into()))
                    } else {
                        a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
                    }
                });
                got.push((addr, r.bytes, r.flags.contains(MsgFlags::MSG_TRUNC)));
            }
        }
        let n = got.len();
        for (i, (addr, len, trunc)) in got.into_iter().enumerate() {
            if trunc || len > self.rx_bufs[i].len() {
                self.stats.rx_truncated += 1;
                continue;
            }
            if let Some(a) = addr {
                self.stats.rx_datagrams += 1;
                out.push((a, self.rx_bufs[i][..len].to_vec()));
            }
        }
        Ok(n)
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn recv_batch(&mut self, out: &mut Vec<(SocketAddr, Vec<u8>)>) -> io::Result<usize> {
        let (len, a) = self.sock.recv_from(&mut self.rx_bufs[0])?;
        self.stats.rx_datagrams += 1;
        out.push((a, self.rx_bufs[0][..len].to_vec()));
        Ok(1)
    }
}
