//! `tagmatch demo`: the first command of the README.
//!
//! By default it starts two endpoints in this process, runs every subprotocol of the EFA
//! RDM protocol between them through the `tagmatch` facade (eager, medium, long-CTS,
//! long-read and runting-read messages; emulated eager, long-CTS and long-read writes;
//! emulated short and long-CTS reads; direct RDMA read and write; atomics; CQ data and
//! delivery complete), checks every byte, and prints a table: subprotocol, bytes,
//! packets, time, result. `--transport udp` spawns this binary again as the responder and
//! runs the same over loopback UDP between the two processes; `--transport verbs [--device
//! NAME]` (with the `verbs` feature) runs it between endpoints of this process on an RDMA
//! device, where the subprotocols that need RDMA the device lacks must use exactly their
//! emulated fallback (shown in the result column). Exits non-zero if anything failed.
//!
//! `tagmatch demo --packets` is the packet-level demo: one representative packet of every
//! EFA type (`PacketType::ALL`, every field nonzero, optional headers spread over the set)
//! and of every TM opcode, decoded to JSON and encoded back.
use tagmatch_wire::efa::{
    ConnidPlace, Field, Packet, PacketType, PayloadKind, RawAddr, RawAddrHdr, Repr, RmaIov,
    UserRecvQp,
};
use tagmatch_wire::tm::{Rvh, TmOpcode, TmRepr, Tmh};

use crate::format::Format;
use crate::{input, Error};

/// Arguments of `tagmatch demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `mem` (two endpoints in this process), `udp` (two processes on loopback) or
    /// `verbs` (endpoints in this process on one RDMA device; needs the `verbs` feature).
    #[arg(long, default_value = "mem")]
    pub transport: String,
    /// `--transport verbs`: the RDMA device (e.g. `mlx5_0`, `rxe0`; default: the first).
    #[arg(long, value_name = "NAME", default_value = "")]
    pub device: String,
    /// The packet-level demo: round-trip a packet of every EFA and TM type.
    #[arg(long)]
    pub packets: bool,
    /// With `--packets`: also print each packet's hex.
    #[arg(long)]
    pub hex: bool,
    /// Internal: be the UDP responder process (prints its address, serves until told).
    #[arg(long, hide = true)]
    pub responder: bool,
}

static IOVS: [RmaIov; 2] = [
    RmaIov::new(0x7F00_0000_1000, 0x1000, 0xAB_CDEF),
    RmaIov::new(0x7F00_0000_8000, 0x20, 0x1234),
];

/// One packet of the conformance set.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its format.
    pub format: Format,
    /// The type's name (`EAGER_TAGRTM`, `RNDV`, …).
    pub name: &'static str,
    /// The type ID or opcode.
    pub id: u8,
    /// The packet.
    pub bytes: Vec<u8>,
    /// Length of its headers.
    pub header_len: usize,
    /// Whether parsing the bytes gave back the representation they were emitted from.
    pub parsed_back: bool,
}

/// A nonzero value for every field that fits its width.
fn field_value(f: Field) -> u64 {
    match f {
        Field::MsgId => 0x11,
        Field::Tag => 0x1122_3344_5566_7788,
        Field::MsgLength => 0x10_0000,
        Field::SegOffset => 0x2000,
        Field::SegLength => 4,
        Field::SendId => 5,
        Field::RecvId => 7,
        Field::TxId => 9,
        Field::CreditRequest => 16,
        Field::ReadIovCount => IOVS.len() as u64,
        Field::RmaIovCount => IOVS.len() as u64,
        Field::RecvLength => 0x1000,
        Field::RuntLength => 4,
        Field::AtomicDatatype => 7,
        Field::AtomicOp => 2,
        Field::OpId => 3,
        Field::RefKind => 1,
        Field::ProvErrno => 42,
        Field::NextraP3 => 4,
    }
}

fn raw_addr(addr_len: u32) -> RawAddrHdr {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[15] = 1;
    RawAddrHdr {
        addr_len,
        addr: RawAddr {
            gid,
            qpn: 16,
            qkey: 0xA1B2_C3D4,
            next: 0,
        },
    }
}

fn efa_sample(t: PacketType, index: usize) -> Result<Sample, String> {
    let layout = t.layout();
    let mut repr = Repr::new(t);
    for at in layout.fields {
        if !at.field.is_derived() {
            repr.fields.set(at.field, field_value(at.field));
        }
    }
    if layout.rma_iov {
        repr.rma_iov = &IOVS;
    }
    // Spread the optional headers over the set: REQ types cycle through connid + CQ data,
    // a current raw address, and a libfabric 1.10 raw address (addr_len 32) + CQ data.
    match layout.connid {
        ConnidPlace::ReqOptional => match index % 3 {
            0 => {
                repr.connid = Some(0xA1B2_C3D4);
                repr.cq_data = Some(0xCAFE_BABE_1234_5678);
            }
            1 => repr.raw_addr = Some(raw_addr(RawAddrHdr::DEFAULT_ADDR_LEN)),
            _ => {
                repr.raw_addr = Some(raw_addr(32));
                repr.cq_data = Some(u64::MAX);
            }
        },
        ConnidPlace::Handshake => {
            repr.connid = Some(0xA1B2_C3D4);
            let h = &mut repr.handshake;
            h.extra_info.set_word(0, 0x25b);
            h.host_id = Some(0x0123_4567_89ab_cdef);
            h.device_version = Some(0xEFA1);
            h.user_recv_qp = Some(UserRecvQp { qpn: 3, qkey: 4 });
            h.hmem_p2p = Some(1);
        }
        ConnidPlace::Fixed(_) | ConnidPlace::CtsDataTrailer => repr.connid = Some(0xA1B2_C3D4),
    }
    let mut payload = Vec::new();
    match layout.payload {
        PayloadKind::ReadIov => payload.extend_from_slice(RmaIov::slice_as_bytes(&IOVS)),
        PayloadKind::ReadIovRunt => {
            payload.extend_from_slice(RmaIov::slice_as_bytes(&IOVS));
            payload.extend_from_slice(b"runt");
        }
        PayloadKind::BufCompare => {
            payload.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0])
        }
        PayloadKind::Data if t.is_req() || t == PacketType::CtsData => {
            payload.extend_from_slice(b"demo")
        }
        PayloadKind::Data => {}
    }
    repr.payload = &payload;
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut bytes)
        .map_err(|e| format!("{}: emit: {e}", t.name()))?;
    let parsed_back = Packet::new_checked(&bytes[..])
        .map(|p| Repr::parse(&p) == repr)
        .unwrap_or(false);
    Ok(Sample {
        format: Format::Efa,
        name: t.name(),
        id: t.id(),
        header_len: repr.header_len(),
        bytes,
        parsed_back,
    })
}

fn tm_sample(op: TmOpcode) -> Result<Sample, String> {
    let payload: &[u8] = match op {
        TmOpcode::Fin => &[],
        _ => b"tm payload",
    };
    let repr = TmRepr {
        tmh: Tmh {
            opcode: op,
            reserved: if op == TmOpcode::Rndv {
                [1, 2, 3]
            } else {
                [0; 3]
            },
            app_ctx: 0xAABB_CCDD,
            tag: u64::MAX - op as u64,
        },
        rvh: op.has_rvh().then_some(Rvh {
            va: 0x7f00_1234_5678,
            rkey: 0x1234,
            len: 65536,
        }),
        payload,
    };
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut bytes)
        .map_err(|e| format!("{}: emit: {e}", op.name()))?;
    let parsed_back = TmRepr::parse_bytes(&bytes).is_ok_and(|p| p == repr);
    Ok(Sample {
        format: Format::Tm,
        name: op.name(),
        id: op as u8,
        header_len: repr.buffer_len() - payload.len(),
        bytes,
        parsed_back,
    })
}

/// The conformance set: every EFA packet type, then TM EAGER, RNDV, FIN and NO_TAG.
pub fn samples() -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for (i, t) in PacketType::ALL.iter().enumerate() {
        out.push(efa_sample(*t, i)?);
    }
    for op in [
        TmOpcode::Eager,
        TmOpcode::Rndv,
        TmOpcode::Fin,
        TmOpcode::NoTag,
    ] {
        out.push(tm_sample(op)?);
    }
    Ok(out)
}

/// Decodes a sample to JSON and encodes it back; `Ok` when the bytes come back unchanged
/// and the JSON names the right type.
pub fn round_trip(s: &Sample) -> Result<(), String> {
    if !s.parsed_back {
        return Err("parse did not give back the emitted representation".into());
    }
    let json = s.format.decode(&s.bytes)?;
    if json["type"] != s.name || json["type_id"] != s.id {
        return Err(format!("decoded as {} {}", json["type"], json["type_id"]));
    }
    let again = s.format.encode(&json)?;
    if again != s.bytes {
        return Err(format!(
            "re-encoded to {} instead of {}",
            crate::hex::format(&again),
            crate::hex::format(&s.bytes)
        ));
    }
    Ok(())
}

/// Runs `tagmatch demo`.
pub fn run(args: Args) -> Result<(), Error> {
    if args.responder {
        return live::responder_process();
    }
    if args.packets {
        return run_packets(&args);
    }
    if args.hex {
        return Err(Error::new("demo", "--hex goes with --packets"));
    }
    if !args.device.is_empty() && args.transport != "verbs" {
        return Err(Error::new("demo", "--device goes with --transport verbs"));
    }
    live::run(&args.transport, &args.device)
}

/// Runs `tagmatch demo --packets`.
fn run_packets(args: &Args) -> Result<(), Error> {
    let fail = |e: String| Error::new("demo --packets", e);
    let samples = samples().map_err(fail)?;
    let mut lines = vec![format!(
        "{:<4} {:<18} {:>7} {:>5} {:>10}  round-trip",
        "wire", "type", "type_id", "bytes", "header_len"
    )];
    let mut failed = 0usize;
    for s in &samples {
        let status = match round_trip(s) {
            Ok(()) => "ok".to_owned(),
            Err(e) => {
                failed += 1;
                format!("FAILED: {e}")
            }
        };
        let mut line = format!(
            "{:<4} {:<18} {:>7} {:>5} {:>10}  {status}",
            s.format.name(),
            s.name,
            s.id,
            s.bytes.len(),
            s.header_len
        );
        if args.hex {
            line.push_str("  ");
            line.push_str(&crate::hex::format(&s.bytes));
        }
        lines.push(line);
    }
    lines.push(format!(
        "{} of {} packet types round-trip",
        samples.len() - failed,
        samples.len()
    ));
    input::print_line(&lines.join("\n")).map_err(fail)?;
    if failed > 0 {
        return Err(fail(format!(
            "{failed} of {} round trips failed",
            samples.len()
        )));
    }
    Ok(())
}

/// The live demo: two endpoints, every subprotocol, a table.
mod live {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use tagmatch::{
        Address, Completion, Endpoint, MemFabric, Peer, Protocol, RemoteKey, Request, SendOptions,
        ANY_SOURCE, ANY_TAG,
    };
    use tagmatch_rdm::Config;

    use crate::{input, Error};

    const HELLO: u64 = 0xD3D0_0000_0000_0001;
    const QUIT: u64 = 0xD3D0_0000_0000_0002;
    const UNTAGGED_REPLY: u64 = 0xD3D0_0000_0000_0003;
    const REGION: usize = 4 << 20;
    const LIMIT: Duration = Duration::from_secs(10);

    /// FNV-1a of the bytes: what the responder answers for each message.
    fn digest(b: &[u8]) -> u64 {
        b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
            (h ^ *x as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// The responder: answers every tagged message with its digest (same tag), untagged
    /// ones with their digest on tag UNTAGGED_REPLY, HELLO with the key of its 4 MiB
    /// region, and serves RMA and atomics on that region. It receives with mprobe + mrecv
    /// (a buffer of the message's exact size).
    pub struct Responder {
        ep: Endpoint,
        key: RemoteKey,
        /// Registered for the endpoint's lifetime.
        _region: tagmatch::MemoryRegion,
        pending: Vec<Request>,
        done: bool,
    }

    impl Responder {
        pub fn new(mut ep: Endpoint) -> Result<Responder, tagmatch::Error> {
            let region = ep.register(vec![0u8; REGION])?;
            Ok(Responder {
                ep,
                key: region.remote_key(),
                _region: region,
                pending: Vec::new(),
                done: false,
            })
        }

        pub fn step(&mut self) -> Result<(), tagmatch::Error> {
            self.ep.progress()?;
            while let Some(m) = self.ep.tmprobe(ANY_SOURCE, ANY_TAG) {
                let len = m.info.len as usize;
                self.pending.push(self.ep.mrecv(m, len)?);
            }
            while let Some(m) = self.ep.mprobe(ANY_SOURCE) {
                let len = m.info.len as usize;
                self.pending.push(self.ep.mrecv(m, len)?);
            }
            while let Some(c) = self.ep.poll_completion() {
                let Some(i) = self.pending.iter().position(|r| *r == c.request) else {
                    c.into_result()?;
                    continue;
                };
                let _ = self.pending.swap_remove(i);
                let c = c.into_result()?;
                let from = c
                    .source()
                    .ok_or(tagmatch::Error::UnknownRequest(c.request))?;
                match c.tag {
                    QUIT => self.done = true,
                    HELLO => {
                        let _ = self.ep.tsend(from, HELLO, self.key.to_bytes().to_vec())?;
                    }
                    0 => {
                        let d = digest(&c.data).to_le_bytes().to_vec();
                        let _ = self.ep.tsend(from, UNTAGGED_REPLY, d)?;
                    }
                    t => {
                        let d = digest(&c.data).to_le_bytes().to_vec();
                        let _ = self.ep.tsend(from, t, d)?;
                    }
                }
            }
            Ok(())
        }
    }

    /// `tagmatch demo --responder`: the UDP responder process.
    pub fn responder_process() -> Result<(), Error> {
        let ctx = "demo --responder";
        let ep = Endpoint::builder()
            .udp("127.0.0.1:0".parse().map_err(|_| Error::new(ctx, "bind"))?)
            .build()
            .map_err(|e| Error::new(ctx, e))?;
        let mut r = Responder::new(ep).map_err(|e| Error::new(ctx, e))?;
        input::print_line(&r.ep.address().to_string()).map_err(|e| Error::new(ctx, e))?;
        let start = Instant::now();
        while !r.done {
            r.step().map_err(|e| Error::new(ctx, e))?;
            if start.elapsed() > Duration::from_secs(120) {
                return Err(Error::new(ctx, "no QUIT from the demo within 120 s"));
            }
            if r.ep.stats().ready_completions == 0 {
                r.ep.progress_timeout(Duration::from_millis(1))
                    .map_err(|e| Error::new(ctx, e))?;
            }
        }
        r.ep.flush(Duration::from_secs(2))
            .map_err(|e| Error::new(ctx, e))?;
        Ok(())
    }

    /// The initiator's endpoints (default, emulated RMA, runting read) and the responder
    /// (in this process, or a child process).
    struct Demo {
        eps: Vec<(Endpoint, Peer, RemoteKey)>,
        local: Option<Responder>,
        child: Option<Child>,
        next_tag: u64,
    }

    impl Demo {
        fn pump(&mut self, i: usize) -> Result<(), tagmatch::Error> {
            self.eps[i].0.progress()?;
            if let Some(r) = &mut self.local {
                r.step()?;
            }
            Ok(())
        }

        fn wait(&mut self, i: usize, req: Request) -> Result<Completion, tagmatch::Error> {
            let start = Instant::now();
            loop {
                if let Some(c) = self.eps[i].0.take_completion(req) {
                    return c.into_result();
                }
                self.pump(i)?;
                if start.elapsed() > LIMIT {
                    return Err(tagmatch::Error::Timeout {
                        request: req,
                        limit_ms: LIMIT.as_millis(),
                    });
                }
            }
        }

        fn packets(&self, i: usize) -> u64 {
            let s = self.eps[i].0.stats().rdm;
            s.tx_packets + s.rx_packets
        }

        /// A message of `len` bytes: sent, answered with its digest.
        fn message(
            &mut self,
            i: usize,
            len: usize,
            opts: Option<SendOptions>,
            tagged: bool,
        ) -> Result<Option<Protocol>, String> {
            self.next_tag += 1;
            let tag = self.next_tag;
            let data: Vec<u8> = (0..len).map(|x| (x as u64 * 31 + tag) as u8).collect();
            let want = digest(&data);
            let (ep, peer, _) = &mut self.eps[i];
            let peer = *peer;
            let reply_tag = if tagged { tag } else { UNTAGGED_REPLY };
            let reply = ep.trecv(peer, reply_tag, 8).map_err(|e| e.to_string())?;
            let s = match (tagged, opts) {
                (true, Some(o)) => ep.tsend_with(peer, tag, data, o),
                (true, None) => ep.tsend(peer, tag, data),
                (false, _) => ep.send(peer, data),
            }
            .map_err(|e| e.to_string())?;
            let sc = self.wait(i, s).map_err(|e| e.to_string())?;
            let c = self.wait(i, reply).map_err(|e| e.to_string())?;
            check(c.data_u64(), want).map(|()| sc.protocol)
        }

        fn write_then_check(
            &mut self,
            i: usize,
            len: usize,
            off: u64,
        ) -> Result<Option<Protocol>, String> {
            let data: Vec<u8> = (0..len).map(|x| (x as u64 * 7 + off) as u8).collect();
            let (ep, peer, key) = &mut self.eps[i];
            let (peer, key) = (*peer, *key);
            let w = ep
                .write(peer, data.clone(), key.at(off))
                .map_err(|e| e.to_string())?;
            let wc = self.wait(i, w).map_err(|e| e.to_string())?;
            // Read it back through the default endpoint (direct read).
            let (ep0, p0, k0) = &mut self.eps[0];
            let r = ep0.read(*p0, len, k0.at(off)).map_err(|e| e.to_string())?;
            let back = self.wait(0, r).map_err(|e| e.to_string())?;
            if back.data != data {
                return Err("read back differs from what was written".into());
            }
            Ok(wc.protocol)
        }

        fn read_check(
            &mut self,
            i: usize,
            len: usize,
            off: u64,
        ) -> Result<Option<Protocol>, String> {
            let data: Vec<u8> = (0..len).map(|x| (x as u64 * 13 + off) as u8).collect();
            let (ep0, p0, k0) = &mut self.eps[0];
            let w = ep0
                .write(*p0, data.clone(), k0.at(off))
                .map_err(|e| e.to_string())?;
            self.wait(0, w).map_err(|e| e.to_string())?;
            let (ep, peer, key) = &mut self.eps[i];
            let r = ep
                .read(*peer, len, key.at(off))
                .map_err(|e| e.to_string())?;
            let c = self.wait(i, r).map_err(|e| e.to_string())?;
            if c.data != data {
                return Err("read bytes differ from the region's".into());
            }
            Ok(c.protocol)
        }

        fn atomics(&mut self) -> Result<Option<Protocol>, String> {
            let (ep, peer, key) = &mut self.eps[0];
            let (peer, at) = (*peer, key.at(REGION as u64 - 8));
            let s = ep
                .compare_swap_u64(peer, at, 0, 0)
                .map_err(|e| e.to_string())?;
            let base = self
                .wait(0, s)
                .map_err(|e| e.to_string())?
                .data_u64()
                .unwrap_or(0);
            for k in 0..3u64 {
                let f = self.eps[0]
                    .0
                    .fetch_add_u64(peer, at, 5)
                    .map_err(|e| e.to_string())?;
                let c = self.wait(0, f).map_err(|e| e.to_string())?;
                check(c.data_u64(), base.wrapping_add(5 * k))?;
            }
            let cs = self.eps[0]
                .0
                .compare_swap_u64(peer, at, base.wrapping_add(15), 42)
                .map_err(|e| e.to_string())?;
            let c = self.wait(0, cs).map_err(|e| e.to_string())?;
            check(c.data_u64(), base.wrapping_add(15))?;
            Ok(c.protocol)
        }
    }

    fn check(got: Option<u64>, want: u64) -> Result<(), String> {
        match got {
            Some(g) if g == want => Ok(()),
            Some(g) => Err(format!("expected {want:#x}, got {g:#x}")),
            None => Err("short reply".into()),
        }
    }

    fn configs() -> [Config; 3] {
        let default = Config::default();
        // Emulated RMA, and no long-read write: long-CTS write.
        let emulated = Config {
            direct_read: false,
            direct_write: false,
            min_read_write_size: u64::MAX,
            ..Config::default()
        };
        // Runting read for large messages, emulated RMA with long-read write.
        let runt = Config {
            runt_size: 16 << 10,
            direct_read: false,
            direct_write: false,
            ..Config::default()
        };
        [default, emulated, runt]
    }

    fn spawn_responder() -> Result<(Child, Address), Error> {
        let ctx = "demo --transport udp";
        let exe = std::env::current_exe().map_err(|e| Error::new(ctx, e))?;
        let mut child = Command::new(exe)
            .args(["demo", "--responder"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::new(ctx, format!("spawning the responder: {e}")))?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| Error::new(ctx, "no responder stdout"))?;
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| Error::new(ctx, format!("reading the responder's address: {e}")))?;
        match line.trim().parse::<Address>() {
            Ok(a) => Ok((child, a)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(Error::new(ctx, format!("responder printed {line:?}: {e}")))
            }
        }
    }

    /// The builder on the verbs device `device` (empty: the first).
    #[cfg(feature = "verbs")]
    fn verbs_builder(b: tagmatch::Builder, device: &str) -> Result<tagmatch::Builder, Error> {
        Ok(b.verbs(device))
    }

    /// Without the `verbs` feature: the error that says how to get it.
    #[cfg(not(feature = "verbs"))]
    fn verbs_builder(_: tagmatch::Builder, _: &str) -> Result<tagmatch::Builder, Error> {
        Err(Error::new("demo", crate::NO_VERBS))
    }

    /// The subprotocol a demo step expecting `want` must use instead on a device with
    /// `features` (efa-rdm-protocol-v4 §2.1: without RDMA read or write the emulated
    /// subprotocols are used), and why; `None` when `want` itself is expected.
    pub(super) fn fallback(
        want: Protocol,
        features: &tagmatch::Features,
    ) -> Option<(Protocol, &'static str)> {
        let (read, write) = (features.rdma_read, features.rdma_write);
        match want {
            Protocol::LongRead | Protocol::RuntRead if !read => {
                Some((Protocol::LongCts, "no RDMA read"))
            }
            Protocol::DirectRead if !read => Some((Protocol::LongCtsRead, "no RDMA read")),
            Protocol::LongReadWrite if !read => Some((Protocol::LongCtsWrite, "no RDMA read")),
            // The direct-write step (100 kB, default configuration: long-read write from
            // `min_read_write_size` = 64 KiB) is emulated by long-read write where the
            // device can still read (e.g. an EFA device with RDMA read only), else by
            // long-CTS write.
            Protocol::DirectWrite if !write && read => {
                Some((Protocol::LongReadWrite, "no RDMA write"))
            }
            Protocol::DirectWrite if !write => {
                Some((Protocol::LongCtsWrite, "no RDMA read or write"))
            }
            _ => None,
        }
    }

    /// Runs the live demo.
    pub fn run(transport: &str, device: &str) -> Result<(), Error> {
        let ctx = "demo";
        let fe = |e: tagmatch::Error| Error::new(ctx, e);
        let fabric = MemFabric::new();
        let mut demo = Demo {
            eps: Vec::new(),
            local: None,
            child: None,
            next_tag: 0,
        };
        let target = match transport {
            "mem" => {
                // The demo shows the EFA subprotocols: no in-process fast path.
                let ep = Endpoint::builder()
                    .mem(&fabric)
                    .fast_path(false)
                    .build()
                    .map_err(fe)?;
                let r = Responder::new(ep).map_err(fe)?;
                let a = r.ep.address();
                demo.local = Some(r);
                a
            }
            "udp" => {
                let (child, a) = spawn_responder()?;
                demo.child = Some(child);
                a
            }
            "verbs" => {
                let ep = verbs_builder(Endpoint::builder(), device)?
                    .build()
                    .map_err(fe)?;
                let r = Responder::new(ep).map_err(fe)?;
                let a = r.ep.address();
                demo.local = Some(r);
                a
            }
            other => {
                return Err(Error::new(
                    ctx,
                    format!("--transport {other:?}: expected mem, udp or verbs"),
                ))
            }
        };
        for cfg in configs() {
            let b = Endpoint::builder().rdm_config(cfg).wait_limit(LIMIT);
            let mut ep = match transport {
                "mem" => b.mem(&fabric).fast_path(false).build(),
                "verbs" => verbs_builder(b, device)?.build(),
                _ => b
                    .udp("127.0.0.1:0".parse().map_err(|_| Error::new(ctx, "bind"))?)
                    .build(),
            }
            .map_err(fe)?;
            let peer = ep.insert_peer(&target).map_err(fe)?;
            demo.eps.push((
                ep,
                peer,
                RemoteKey {
                    addr: 0,
                    key: 0,
                    len: 0,
                },
            ));
        }
        // HELLO from each endpoint: the handshake, and the responder's region key.
        for i in 0..demo.eps.len() {
            let (ep, peer, _) = &mut demo.eps[i];
            let peer = *peer;
            let r = ep.trecv(peer, HELLO, 24).map_err(fe)?;
            let _ = ep.tsend(peer, HELLO, Vec::new()).map_err(fe)?;
            let c = demo.wait(i, r).map_err(fe)?;
            demo.eps[i].2 = RemoteKey::from_bytes(&c.data)
                .ok_or_else(|| Error::new(ctx, "the responder's HELLO reply is not a key"))?;
        }

        type Step = fn(&mut Demo) -> Result<Option<Protocol>, String>;
        let steps: Vec<(&str, Protocol, usize, Step)> = vec![
            ("eager", Protocol::Eager, 8, |d| d.message(0, 8, None, true)),
            ("eager + CQ data + DC", Protocol::Eager, 64, |d| {
                d.message(
                    0,
                    64,
                    Some(SendOptions {
                        cq_data: Some(0xC0FFEE),
                        delivery_complete: true,
                    }),
                    true,
                )
            }),
            ("eager untagged", Protocol::Eager, 32, |d| {
                d.message(0, 32, None, false)
            }),
            ("medium", Protocol::Medium, 20_000, |d| {
                d.message(0, 20_000, None, true)
            }),
            ("long-CTS", Protocol::LongCts, 300_000, |d| {
                d.message(0, 300_000, None, true)
            }),
            ("long-CTS + DC", Protocol::LongCts, 300_000, |d| {
                d.message(
                    0,
                    300_000,
                    Some(SendOptions {
                        cq_data: None,
                        delivery_complete: true,
                    }),
                    true,
                )
            }),
            ("long-read", Protocol::LongRead, 2 << 20, |d| {
                d.message(0, 2 << 20, None, true)
            }),
            ("runting read", Protocol::RuntRead, 2 << 20, |d| {
                d.message(2, 2 << 20, None, true)
            }),
            ("direct write", Protocol::DirectWrite, 100_000, |d| {
                d.write_then_check(0, 100_000, 4096)
            }),
            ("direct read", Protocol::DirectRead, 100_000, |d| {
                d.read_check(0, 100_000, 8192)
            }),
            ("eager write", Protocol::EagerWrite, 512, |d| {
                d.write_then_check(1, 512, 64)
            }),
            ("long-CTS write", Protocol::LongCtsWrite, 200_000, |d| {
                d.write_then_check(1, 200_000, 300_000)
            }),
            ("long-read write", Protocol::LongReadWrite, 200_000, |d| {
                d.write_then_check(2, 200_000, 600_000)
            }),
            ("short read", Protocol::ShortRead, 512, |d| {
                d.read_check(1, 512, 900_000)
            }),
            ("long-CTS read", Protocol::LongCtsRead, 200_000, |d| {
                d.read_check(1, 200_000, 1_000_000)
            }),
            ("atomics (cswap, fetch-add)", Protocol::Atomic, 40, |d| {
                d.atomics()
            }),
        ];
        let mut lines = vec![format!(
            "{:<28} {:>9} {:>8} {:>10}  result",
            "subprotocol", "bytes", "packets", "time µs"
        )];
        let mut failed = 0;
        let mut fell_back = 0;
        // efa-rdm-protocol-v4 §2.1: without RDMA read/write on both sides the protocol uses
        // the emulated subprotocols; the demo then checks it used exactly that fallback.
        let features = demo.eps[0].0.features();
        let fallback = |want: Protocol| fallback(want, &features);
        let total = Instant::now();
        for (name, want, bytes, step) in &steps {
            let before: u64 = (0..demo.eps.len()).map(|k| demo.packets(k)).sum();
            let t = Instant::now();
            let r = step(&mut demo);
            let us = t.elapsed().as_secs_f64() * 1e6;
            let after: u64 = (0..demo.eps.len()).map(|k| demo.packets(k)).sum();
            let result = match (r, fallback(*want)) {
                (Ok(Some(p)), _) if p == *want => "ok".to_owned(),
                (Ok(Some(p)), Some((f, why))) if p == f => {
                    fell_back += 1;
                    format!("ok: {p:?} ({why} on this device)")
                }
                (Ok(p), Some((f, why))) => {
                    format!("FAILED: used {p:?}, expected {f:?} ({why} on this device)")
                }
                (Ok(p), None) => format!("FAILED: used {p:?}, expected {want:?}"),
                (Err(e), _) => format!("FAILED: {e}"),
            };
            if result.starts_with("FAILED") {
                failed += 1;
            }
            lines.push(format!(
                "{name:<28} {bytes:>9} {:>8} {us:>10.1}  {result}",
                after - before
            ));
        }
        // Tell the responder to stop, and let it finish.
        let (ep, peer, _) = &mut demo.eps[0];
        let q = ep.tsend(*peer, QUIT, Vec::new()).map_err(fe)?;
        demo.wait(0, q).map_err(fe)?;
        for (ep, _, _) in &mut demo.eps {
            ep.flush(Duration::from_secs(2)).map_err(fe)?;
        }
        if let Some(mut child) = demo.child.take() {
            let st = child.wait().map_err(|e| Error::new(ctx, e))?;
            if !st.success() {
                failed += 1;
                lines.push(format!("responder process exited with {st}"));
            }
        }
        let by_fallback = if fell_back > 0 {
            format!(", {fell_back} of them by their fallback (the device has no RDMA)")
        } else {
            String::new()
        };
        lines.push(format!(
            "{} of {} subprotocols ok over {transport}{by_fallback} in {:.0} ms",
            steps.len() - failed.min(steps.len()),
            steps.len(),
            total.elapsed().as_secs_f64() * 1e3
        ));
        input::print_line(&lines.join("\n")).map_err(|e| Error::new(ctx, e))?;
        if failed > 0 {
            return Err(Error::new(ctx, format!("{failed} subprotocol(s) failed")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback the live demo expects follows the protocol's choice for each step on a
    /// device with RDMA read and write, with neither, and with RDMA read only (an EFA
    /// device without RDMA write emulates a 100 kB direct write by long-read write).
    #[test]
    fn live_demo_fallbacks_follow_the_device_features() {
        use tagmatch::{Features, Protocol as P};
        let with = |rdma_read, rdma_write| Features {
            rdma_read,
            rdma_write,
            ..Features::default()
        };
        let wants = [
            P::Eager,
            P::LongCts,
            P::LongRead,
            P::RuntRead,
            P::DirectRead,
            P::DirectWrite,
            P::LongReadWrite,
            P::LongCtsWrite,
        ];
        for w in wants {
            assert_eq!(live::fallback(w, &with(true, true)), None, "{w:?}");
        }
        let got = |f: &Features| wants.map(|w| live::fallback(w, f).map(|(p, _)| p));
        assert_eq!(
            got(&with(false, false)),
            [
                None,
                None,
                Some(P::LongCts),
                Some(P::LongCts),
                Some(P::LongCtsRead),
                Some(P::LongCtsWrite),
                Some(P::LongCtsWrite),
                None
            ]
        );
        assert_eq!(
            got(&with(true, false)),
            [
                None,
                None,
                None,
                None,
                None,
                Some(P::LongReadWrite),
                None,
                None
            ]
        );
    }

    #[test]
    fn every_type_round_trips() {
        let samples = samples().unwrap();
        assert_eq!(samples.len(), PacketType::ALL.len() + 4);
        for s in &samples {
            assert_eq!(round_trip(s), Ok(()), "{}", s.name);
        }
    }
}
