//! The kernel's floor for the UDP device's 8-byte latency: a bare UDP ping-pong between two
//! busy-polling threads on loopback, with nothing of tagmatch in it, so that
//! `tagmatch perf client --test tag_lat` can be read against what the system calls alone
//! cost on the same machine.
//!
//! ```text
//! cargo run --release -p tagmatch-transport --example udp_floor -- [MODE] [ROUND_TRIPS]
//! ```
//!
//! `MODE` is how the two sockets address each other:
//! - `unconnected` (default; what the UDP device does: one socket for every peer):
//!   `send_to` / `recv_from`, a route look-up per datagram on each side;
//! - `connected`: each socket `connect`ed to the other, `send` / `recv` (the route is
//!   cached in the socket, and the receive path finds it by the early demultiplexing of
//!   connected sockets);
//! - `connected-sendto`: connected sockets, but sending with an explicit address (the
//!   send looks the route up again): separates the send side's share from the receive's;
//! - `reuseport`: what a device with one connected socket per peer pays: each side binds
//!   an unconnected listener and a connected socket to the same port (`SO_REUSEPORT`;
//!   the kernel delivers the peer's datagrams to the connected one), sends on the
//!   connected socket and busy-polls both, the connected one first.
//!
//! Prints the median and 99th percentile of half the round trip (the one-way latency
//! `ucx_perftest` and `tagmatch perf` report), over `ROUND_TRIPS` (default 200,000) after
//! 10,000 unmeasured ones.

use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Unconnected,
    Connected,
    ConnectedSendTo,
    ReusePort,
}

/// One side's socket and how it reaches its peer.
struct Side {
    sock: UdpSocket,
    peer: SocketAddr,
    mode: Mode,
    /// `reuseport`: the unconnected socket on the same port (`sock` is the connected one).
    listener: Option<UdpSocket>,
}

impl Side {
    fn send(&self, buf: &[u8]) -> std::io::Result<usize> {
        match self.mode {
            Mode::Connected | Mode::ReusePort => self.sock.send(buf),
            Mode::Unconnected | Mode::ConnectedSendTo => self.sock.send_to(buf, self.peer),
        }
    }

    /// Busy-polls until a datagram arrives.
    fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let r = match self.mode {
                Mode::Unconnected => self.sock.recv_from(buf).map(|(n, _)| n),
                Mode::Connected | Mode::ConnectedSendTo => self.sock.recv(buf),
                Mode::ReusePort => match self.sock.recv(buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self
                        .listener
                        .as_ref()
                        .map_or(Err(e), |l| l.recv_from(buf).map(|(n, _)| n)),
                    r => r,
                },
            };
            match r {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e),
            }
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = match args.next().as_deref() {
        None | Some("unconnected") => Mode::Unconnected,
        Some("connected") => Mode::Connected,
        Some("connected-sendto") => Mode::ConnectedSendTo,
        Some("reuseport") => Mode::ReusePort,
        Some(other) => {
            return Err(format!(
                "mode {other:?}: expected unconnected, connected, connected-sendto or reuseport"
            )
            .into())
        }
    };
    let n: usize = match args.next() {
        Some(a) => a.parse().map_err(|e| format!("round trips {a:?}: {e}"))?,
        None => 200_000,
    };
    if n == 0 {
        return Err("round trips: expected at least 1".into());
    }
    let reuse = mode == Mode::ReusePort;
    let a = bind("127.0.0.1:0".parse()?, reuse)?;
    let b = bind("127.0.0.1:0".parse()?, reuse)?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    let (a, b, la, lb) = if reuse {
        // The listeners stay unconnected; the connected sockets share their ports.
        let (ca, cb) = (bind(a_addr, true)?, bind(b_addr, true)?);
        (ca, cb, Some(a), Some(b))
    } else {
        (a, b, None, None)
    };
    if mode != Mode::Unconnected {
        a.connect(b_addr)?;
        b.connect(a_addr)?;
    }
    for s in [Some(&a), Some(&b), la.as_ref(), lb.as_ref()]
        .into_iter()
        .flatten()
    {
        s.set_nonblocking(true)?;
    }
    let a = Side {
        sock: a,
        peer: b_addr,
        mode,
        listener: la,
    };
    let b = Side {
        sock: b,
        peer: a_addr,
        mode,
        listener: lb,
    };
    const WARM: usize = 10_000;
    // 8 bytes of payload behind a 32-byte header, about what the device sends.
    const LEN: usize = 40;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = [0u8; 64];
        for _ in 0..WARM + n {
            let got = b.recv(&mut buf)?;
            b.send(&buf[..got])?;
        }
        Ok(())
    });
    let mut buf = [0u8; 64];
    let mut half = Vec::with_capacity(n);
    for i in 0..WARM + n {
        let start = Instant::now();
        a.send(&buf[..LEN])?;
        a.recv(&mut buf)?;
        if i >= WARM {
            half.push(start.elapsed().as_nanos() as f64 / 2000.0);
        }
    }
    echo.join().map_err(|_| "echo thread panicked")??;
    half.sort_by(f64::total_cmp);
    let p50 = half[half.len() / 2];
    let p99 = half[(half.len() * 99 / 100).min(half.len() - 1)];
    let name = match mode {
        Mode::Unconnected => "unconnected",
        Mode::Connected => "connected",
        Mode::ConnectedSendTo => "connected-sendto",
        Mode::ReusePort => "reuseport",
    };
    println!("{name}: one-way latency p50 {p50:.3} us, p99 {p99:.3} us ({n} round trips)");
    Ok(())
}

/// A UDP socket bound to `addr`, with `SO_REUSEPORT` set first if `reuse`.
fn bind(addr: SocketAddr, reuse: bool) -> std::io::Result<UdpSocket> {
    use nix::sys::socket::{
        bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    let SocketAddr::V4(v4) = addr else {
        return Err(std::io::Error::other("IPv4 only"));
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    if reuse {
        setsockopt(&fd, sockopt::ReusePort, &true)?;
    }
    use std::os::fd::AsRawFd;
    bind(fd.as_raw_fd(), &SockaddrIn::from(v4))?;
    Ok(UdpSocket::from(fd))
}
