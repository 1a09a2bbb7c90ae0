//! `tagmatch demo`: the first command of the README.
//!
//! By default it starts two endpoints in this process, runs every subprotocol of the EFA
//! RDM protocol between them through the `tagmatch` facade (the handshake; eager, medium,
//! long-CTS, long-read and runting-read messages; the read-nack fallback of a long-read to
//! long-CTS; emulated eager, long-CTS and long-read writes; emulated short and long-CTS
//! reads; direct RDMA read and write; atomics; CQ data and delivery complete), checks every
//! byte, and prints a table: subprotocol, bytes, packets, time, result, then a note of the
//! HANDSHAKE packets sent and the packets dropped for a connid not their sender's.
//! `--transport udp` spawns this binary again as the responder (killed if the demo stops
//! early) and runs the same over loopback UDP between the two processes; `--transport verbs
//! [--device NAME]` (with the `verbs` feature) runs it between endpoints of this process on
//! an RDMA device, where the subprotocols that need RDMA the device lacks must use exactly
//! their emulated fallback (shown in the result column). The read-nack row needs a
//! responder whose registration fails: in process, the fabric fails it on demand; over
//! UDP, a second responder process whose device registers at most its region and 1 MiB
//! (`UdpConfig::max_registered_bytes`) receives the row's 2 MiB; over verbs the row is
//! skipped (no RDMA read, so no long-read to refuse). Exits non-zero if anything failed.
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
    /// `mem` (two endpoints in this process; the default), `udp` (two processes on
    /// loopback) or `verbs` (endpoints in this process on one RDMA device; needs the
    /// `verbs` feature). Not with `--packets`.
    #[arg(long, value_name = "mem|udp|verbs")]
    pub transport: Option<String>,
    /// `--transport verbs`: the RDMA device (e.g. `mlx5_0`, `rxe0`; default: the first).
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// The packet-level demo: round-trip a packet of every EFA and TM type.
    #[arg(long)]
    pub packets: bool,
    /// With `--packets`: also print each packet's hex.
    #[arg(long)]
    pub hex: bool,
    /// Internal: be the UDP responder process (prints its address, serves until told).
    #[arg(long, hide = true)]
    pub responder: bool,
    /// Internal: the responder's UDP device registers at most this many bytes (the
    /// read-nack row's responder).
    #[arg(long, hide = true, value_name = "BYTES", requires = "responder")]
    pub responder_max_registered: Option<u64>,
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
        return live::responder_process(args.responder_max_registered);
    }
    if args.packets {
        // The packet-level demo runs no endpoints: a transport given with it would be
        // silently ignored, so it is refused instead.
        if let Some(t) = &args.transport {
            return Err(Error::new(
                "demo --packets",
                format!(
                    "--transport {t} goes with the live demo (without --packets); \
                     --packets only round-trips packets through decode and encode"
                ),
            ));
        }
        if args.device.is_some() {
            return Err(Error::new(
                "demo --packets",
                "--device goes with the live demo's --transport verbs, not with --packets",
            ));
        }
        return run_packets(&args);
    }
    if args.hex {
        return Err(Error::new("demo", "--hex goes with --packets"));
    }
    let transport = args.transport.as_deref().unwrap_or("mem");
    if args.device.is_some() && transport != "verbs" {
        return Err(Error::new("demo", "--device goes with --transport verbs"));
    }
    // The empty name asks the verbs layer for the first device.
    live::run(transport, args.device.as_deref().unwrap_or(""))
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
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::time::{Duration, Instant};

    use tagmatch::{
        Address, Completion, Endpoint, MemFabric, MemFaults, Peer, Protocol, RemoteKey, Request,
        SendOptions, UdpConfig, ANY_SOURCE, ANY_TAG,
    };
    use tagmatch_rdm::Config;

    use crate::{input, Error};

    const HELLO: u64 = 0xD3D0_0000_0000_0001;
    const QUIT: u64 = 0xD3D0_0000_0000_0002;
    const UNTAGGED_REPLY: u64 = 0xD3D0_0000_0000_0003;
    const REGION: usize = 4 << 20;
    /// What the read-nack row's UDP responder may register: its region and 1 MiB, not
    /// the 2 MiB receive buffer of a long-read.
    const NACK_REGISTERED: u64 = REGION as u64 + (1 << 20);
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

    /// `tagmatch demo --responder`: the UDP responder process; its device registers at
    /// most `max_registered` bytes (`UdpConfig::max_registered_bytes`) when given.
    pub fn responder_process(max_registered: Option<u64>) -> Result<(), Error> {
        let ctx = "demo --responder";
        let bind = "127.0.0.1:0".parse().map_err(|_| Error::new(ctx, "bind"))?;
        let ep = Endpoint::builder()
            .udp(bind)
            .udp_config(UdpConfig {
                max_registered_bytes: max_registered.unwrap_or(u64::MAX),
                ..UdpConfig::new(bind)
            })
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
        child: Option<ResponderChild>,
        /// The in-process fabric (`--transport mem`): its fault injection drives the
        /// read-nack row.
        fabric: Option<MemFabric>,
        /// `--transport udp`: the read-nack row's responder, a second process whose UDP
        /// device registers at most [`NACK_REGISTERED`] bytes, and the initiator's peer
        /// for it.
        nack: Option<(ResponderChild, Peer)>,
        next_tag: u64,
    }

    /// The UDP responder process. Dropping it kills the process (if it is still running)
    /// and reaps it, so that no way out of the demo, an error included, leaves it running
    /// until its own 120 s limit.
    struct ResponderChild(Child);

    impl ResponderChild {
        /// Waits up to `limit` for the responder to exit (after QUIT); its exit status, or
        /// why there is none (it is then killed on drop).
        fn finish(&mut self, limit: Duration) -> Result<ExitStatus, String> {
            let start = Instant::now();
            loop {
                match self.0.try_wait() {
                    Ok(Some(st)) => return Ok(st),
                    Ok(None) if start.elapsed() > limit => {
                        return Err(format!(
                            "did not exit within {} s of QUIT (killed)",
                            limit.as_secs()
                        ))
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                    Err(e) => return Err(format!("waiting for it: {e}")),
                }
            }
        }
    }

    impl Drop for ResponderChild {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                // Nothing more can be done about a failed kill: wait() below reaps it when
                // it does exit.
                let _ = self.0.kill();
            }
            let _ = self.0.wait();
        }
    }

    /// A fabric that delivers in order, at once, and fails nothing.
    const NO_FAULTS: MemFaults = MemFaults {
        reorder: false,
        max_delay: 0,
        send_again: 0,
        register_fail: 0,
    };

    /// The demo's test hook, not in `--help`: `TAGMATCH_DEMO_INJECT=fail:ROW` reports row
    /// ROW as failed (after running it), `abort` stops the demo with an error right after
    /// the handshake, before the responder is told to quit, and `abort:ROW` likewise right
    /// after row ROW ran (after the read-nack row over UDP, both responder processes are
    /// running). It lets tests check the exit status of a failed demo and that no responder
    /// process outlives one.
    const INJECT_VAR: &str = "TAGMATCH_DEMO_INJECT";

    /// What [`INJECT_VAR`] asks for.
    #[derive(Debug, PartialEq, Eq)]
    enum Inject {
        Nothing,
        Fail(String),
        Abort,
        AbortAfter(String),
    }

    fn inject() -> Result<Inject, Error> {
        match std::env::var(INJECT_VAR) {
            Err(std::env::VarError::NotPresent) => Ok(Inject::Nothing),
            Err(e) => Err(Error::new("demo", format!("{INJECT_VAR}: {e}"))),
            Ok(v) if v == "abort" => Ok(Inject::Abort),
            Ok(v) => match (v.strip_prefix("fail:"), v.strip_prefix("abort:")) {
                (Some(row), _) => Ok(Inject::Fail(row.to_owned())),
                (_, Some(row)) => Ok(Inject::AbortAfter(row.to_owned())),
                _ => Err(Error::new(
                    "demo",
                    format!(
                        "{INJECT_VAR}={v:?}: expected fail:ROW, abort:ROW (a row's name) or \
                         abort"
                    ),
                )),
            },
        }
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

        /// efa-rdm-protocol-v4 §4.7: "The receiver attempts to register a memory region
        /// for the RDMA operation but fails … the receiver sends a READ_NACK packet to the
        /// sender … The sender then switches to the long CTS protocol and sends a
        /// LONGCTS_RTM packet".
        ///
        /// A 2 MiB message (long-read) from a region the sender registered beforehand (so
        /// that the send itself registers nothing) to a responder that cannot register its
        /// receive buffer: in process, the fabric fails every registration during the
        /// send; over UDP, the message goes to the second responder process
        /// ([`Demo::nack`]), whose device may register its region and 1 MiB more. The
        /// message must arrive intact, by long-CTS, with one READ_NACK counted by the
        /// sender (and one by the responder, when it is in this process).
        fn read_nack(&mut self) -> Result<Option<Protocol>, String> {
            const LEN: usize = 2 << 20;
            let fabric = self.fabric.clone();
            let to = match (&fabric, &self.nack) {
                (Some(_), _) => self.eps[0].1,
                (None, Some((_, p))) => *p,
                (None, None) => {
                    return Err("needs a responder that cannot register (mem or udp)".into())
                }
            };
            self.next_tag += 1;
            let tag = self.next_tag;
            let data: Vec<u8> = (0..LEN).map(|x| (x as u64 * 17 + tag) as u8).collect();
            let want = digest(&data);
            let nacks = |d: &Demo| {
                (
                    d.eps[0].0.stats().rdm.read_nacks,
                    d.local.as_ref().map(|r| r.ep.stats().rdm.read_nacks),
                )
            };
            let before = nacks(self);
            let ep = &mut self.eps[0].0;
            let mr = ep.register(data).map_err(|e| e.to_string())?;
            let reply = ep.trecv(to, tag, 8).map_err(|e| e.to_string())?;
            if let Some(f) = &fabric {
                f.network().set_faults(MemFaults {
                    register_fail: 1000,
                    ..NO_FAULTS
                });
            }
            let done = ep
                .tsend_region(to, tag, &mr, 0..LEN)
                .and_then(|s| Ok((self.wait(0, s)?, self.wait(0, reply)?)));
            if let Some(f) = &fabric {
                f.network().set_faults(NO_FAULTS);
            }
            let released = self.eps[0].0.deregister(mr);
            let (sc, c) = done.map_err(|e| e.to_string())?;
            released.map_err(|e| format!("deregistering the send region: {e}"))?;
            check(c.data_u64(), want)?;
            let after = nacks(self);
            if after.0 != before.0 + 1 {
                return Err(format!(
                    "the sender counted {} READ_NACKs, expected 1",
                    after.0 - before.0
                ));
            }
            if let (Some(b), Some(a)) = (before.1, after.1) {
                if a != b + 1 {
                    return Err(format!(
                        "the responder counted {} READ_NACKs, expected 1",
                        a - b
                    ));
                }
            }
            Ok(sc.protocol)
        }

        /// efa-rdm-protocol-v4 §2.1: "Upon receiving the 1st packet from a peer, an
        /// endpoint must send back a handshake packet": after the HELLO exchange every
        /// initiator endpoint has sent one, and so has the responder to each of them (when
        /// it is in this process, where its counters can be read). The HANDSHAKE packets
        /// sent, or which endpoint sent none.
        fn handshakes(&self) -> Result<u64, String> {
            let mut sent = 0;
            for (i, (ep, _, _)) in self.eps.iter().enumerate() {
                let n = ep.stats().rdm.handshakes_sent;
                if n == 0 {
                    return Err(format!("initiator endpoint {i} sent no HANDSHAKE"));
                }
                sent += n;
            }
            if let Some(r) = &self.local {
                let n = r.ep.stats().rdm.handshakes_sent;
                if n < self.eps.len() as u64 {
                    return Err(format!(
                        "the responder sent {n} HANDSHAKEs to {} endpoints",
                        self.eps.len()
                    ));
                }
                sent += n;
            }
            Ok(sent)
        }

        /// The footnote on the handshake and the connid header: the HANDSHAKE packets
        /// sent, and of the packets received, those dropped because the connid they carry
        /// is not their sender's (efa-rdm-protocol-v4 §4.4: "the receiver needs to know the
        /// full address of the sender … the only unknown part is CONNID").
        fn protocol_note(&self) -> String {
            let (mut handshakes, mut rx, mut mismatched) = (0, 0, 0);
            let local = self.local.as_ref().map(|r| &r.ep);
            for ep in self.eps.iter().map(|e| &e.0).chain(local) {
                let r = ep.stats().rdm;
                handshakes += r.handshakes_sent;
                rx += r.rx_packets;
                mismatched += r.rx_connid_mismatch;
            }
            let whose = if local.is_some() {
                "both sides"
            } else {
                "the initiator (the responder process keeps its own counts)"
            };
            format!(
                "handshake: {handshakes} HANDSHAKE packets sent by {whose}; connid: checked on \
                 every packet carrying one, {mismatched} of {rx} received dropped as not \
                 their sender's"
            )
        }

        /// `--transport udp`: spawns the read-nack row's responder (its device registers at
        /// most [`NACK_REGISTERED`] bytes), makes it a peer of the first initiator
        /// endpoint and exchanges HELLO with it (the handshake: before it, a large send
        /// takes long-CTS at once, efa-rdm-protocol-v4 §2.1).
        fn nack_responder(&mut self) -> Result<(ResponderChild, Peer), String> {
            let (child, addr) =
                spawn_responder(Some(NACK_REGISTERED)).map_err(|e| e.to_string())?;
            let ep = &mut self.eps[0].0;
            let p = ep.insert_peer(&addr).map_err(|e| e.to_string())?;
            let r = ep.trecv(p, HELLO, 24).map_err(|e| e.to_string())?;
            let _ = ep.tsend(p, HELLO, Vec::new()).map_err(|e| e.to_string())?;
            self.wait(0, r)
                .map_err(|e| format!("the read-nack responder's HELLO: {e}"))?;
            Ok((child, p))
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

    /// Spawns `tagmatch demo --responder` (registering at most `max_registered` bytes
    /// when given) and reads its address.
    fn spawn_responder(max_registered: Option<u64>) -> Result<(ResponderChild, Address), Error> {
        let ctx = "demo --transport udp";
        let exe = std::env::current_exe().map_err(|e| Error::new(ctx, e))?;
        let mut cmd = Command::new(exe);
        cmd.args(["demo", "--responder"]);
        if let Some(n) = max_registered {
            cmd.arg(format!("--responder-max-registered={n}"));
        }
        let mut child = ResponderChild(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| Error::new(ctx, format!("spawning the responder: {e}")))?,
        );
        let out = child
            .0
            .stdout
            .take()
            .ok_or_else(|| Error::new(ctx, "the responder's standard output is not a pipe"))?;
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| Error::new(ctx, format!("reading the responder's address: {e}")))?;
        // On an error the child is killed and reaped as it drops.
        let a = line
            .trim()
            .parse::<Address>()
            .map_err(|e| Error::new(ctx, format!("responder printed {line:?}: {e}")))?;
        Ok((child, a))
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

    /// The read-nack row's name.
    const READ_NACK_ROW: &str = "read-nack → long-CTS";

    /// Runs the live demo.
    pub fn run(transport: &str, device: &str) -> Result<(), Error> {
        let ctx = "demo";
        let fe = |e: tagmatch::Error| Error::new(ctx, e);
        let inject = inject()?;
        let fabric = MemFabric::new();
        let mut demo = Demo {
            eps: Vec::new(),
            local: None,
            child: None,
            fabric: None,
            nack: None,
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
                demo.fabric = Some(fabric.clone());
                a
            }
            "udp" => {
                let (child, a) = spawn_responder(None)?;
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
            (READ_NACK_ROW, Protocol::LongCts, 2 << 20, |d| d.read_nack()),
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
        const HANDSHAKE_ROW: &str = "handshake";
        if let Inject::Fail(row) | Inject::AbortAfter(row) = &inject {
            if row != HANDSHAKE_ROW && !steps.iter().any(|s| s.0 == row) {
                return Err(Error::new(
                    ctx,
                    format!("{INJECT_VAR}: no row named {row:?}"),
                ));
            }
        }
        let injected = |name: &str, result: String| match &inject {
            Inject::Fail(row) if row == name => {
                format!("FAILED: injected by {INJECT_VAR} (ran: {result})")
            }
            _ => result,
        };
        let row = |name: &str, bytes: usize, packets: &str, us: &str, result: &str| {
            format!("{name:<28} {bytes:>9} {packets:>8} {us:>10}  {result}")
        };
        let measured = |packets: u64, us: f64| (packets.to_string(), format!("{us:.1}"));
        let mut lines = vec![format!(
            "{:<28} {:>9} {:>8} {:>10}  result",
            "subprotocol", "bytes", "packets¹", "time µs"
        )];
        let mut failed = 0;
        let mut skipped = 0;
        let mut fell_back = 0;
        let total = Instant::now();

        // HELLO from each endpoint: the handshake, and the responder's region key.
        let t = Instant::now();
        for i in 0..demo.eps.len() {
            let (ep, peer, _) = &mut demo.eps[i];
            let peer = *peer;
            let r = ep.trecv(peer, HELLO, 24).map_err(fe)?;
            let _ = ep.tsend(peer, HELLO, Vec::new()).map_err(fe)?;
            let c = demo.wait(i, r).map_err(fe)?;
            demo.eps[i].2 = RemoteKey::from_bytes(&c.data)
                .ok_or_else(|| Error::new(ctx, "the responder's HELLO reply is not a key"))?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6;
        let packets: u64 = (0..demo.eps.len()).map(|k| demo.packets(k)).sum();
        let result = injected(
            HANDSHAKE_ROW,
            match demo.handshakes() {
                Ok(_) => "ok".to_owned(),
                Err(e) => format!("FAILED: {e}"),
            },
        );
        if result.starts_with("FAILED") {
            failed += 1;
        }
        let (packets, us) = measured(packets, us);
        lines.push(row(HANDSHAKE_ROW, 0, &packets, &us, &result));
        if inject == Inject::Abort {
            // The responder (a child process with `--transport udp`) has not been told to
            // quit: this is the way out that must not leave it running.
            return Err(Error::new(
                ctx,
                format!("stopped after the handshake by {INJECT_VAR}=abort"),
            ));
        }

        // efa-rdm-protocol-v4 §2.1: without RDMA read/write on both sides the protocol uses
        // the emulated subprotocols; the demo then checks it used exactly that fallback.
        let features = demo.eps[0].0.features();
        let fallback = |want: Protocol| fallback(want, &features);
        for (name, want, bytes, step) in &steps {
            if *name == READ_NACK_ROW && transport == "udp" {
                // Before the row's clock and packet count: the second responder process,
                // and the handshake with it (so that the send chooses long-read).
                match demo.nack_responder() {
                    Ok(n) => demo.nack = Some(n),
                    Err(e) => {
                        failed += 1;
                        let result = injected(name, format!("FAILED: {e}"));
                        lines.push(row(name, *bytes, "-", "-", &result));
                        continue;
                    }
                }
            }
            if *name == READ_NACK_ROW && demo.fabric.is_none() && demo.nack.is_none() {
                // A verbs device has no RDMA read (the verbs device is RC with emulated
                // reads), so there is no long-read to refuse.
                let result = injected(
                    name,
                    format!(
                        "skipped: needs a responder whose registration fails and RDMA \
                         read (run with --transport mem or udp, not {transport})"
                    ),
                );
                if result.starts_with("FAILED") {
                    failed += 1;
                } else {
                    skipped += 1;
                }
                lines.push(row(name, *bytes, "-", "-", &result));
                continue;
            }
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
            let result = injected(name, result);
            if result.starts_with("FAILED") {
                failed += 1;
            }
            let (packets, us) = measured(after - before, us);
            lines.push(row(name, *bytes, &packets, &us, &result));
            if matches!(&inject, Inject::AbortAfter(r) if r == name) {
                // As `abort`, later: the responders have not been told to quit.
                return Err(Error::new(
                    ctx,
                    format!("stopped after {name} by {INJECT_VAR}=abort:{name}"),
                ));
            }
        }
        // Tell the responders to stop, and let them finish.
        let (ep, peer, _) = &mut demo.eps[0];
        let q = ep.tsend(*peer, QUIT, Vec::new()).map_err(fe)?;
        demo.wait(0, q).map_err(fe)?;
        let mut nack = demo.nack.take();
        if let Some((_, p)) = &nack {
            let q = demo.eps[0].0.tsend(*p, QUIT, Vec::new()).map_err(fe)?;
            demo.wait(0, q).map_err(fe)?;
        }
        for (ep, _, _) in &mut demo.eps {
            ep.flush(Duration::from_secs(2)).map_err(fe)?;
        }
        let rows = steps.len() + 1;
        let mut responder_failed = false;
        let children = demo
            .child
            .as_mut()
            .into_iter()
            .chain(nack.as_mut().map(|n| &mut n.0));
        for child in children {
            match child.finish(Duration::from_secs(10)) {
                Ok(st) if st.success() => {}
                Ok(st) => {
                    responder_failed = true;
                    lines.push(format!("FAILED: the responder process exited with {st}"));
                }
                Err(e) => {
                    responder_failed = true;
                    lines.push(format!("FAILED: the responder process {e}"));
                }
            }
        }
        lines.push(
            "¹ EFA RDM packets the initiator's endpoints sent and received; direct write and \
             direct read move their data by RDMA, without any"
                .to_owned(),
        );
        lines.push(demo.protocol_note());
        let by_fallback = if fell_back > 0 {
            format!(", {fell_back} of them by their fallback (the device has no RDMA)")
        } else {
            String::new()
        };
        let skips = if skipped > 0 {
            format!(", {skipped} skipped")
        } else {
            String::new()
        };
        lines.push(format!(
            "{} of {rows} subprotocols ok over {transport}{by_fallback}{skips} in {:.0} ms",
            rows - failed - skipped,
            total.elapsed().as_secs_f64() * 1e3
        ));
        input::print_line(&lines.join("\n")).map_err(|e| Error::new(ctx, e))?;
        match (failed, responder_failed) {
            (0, false) => Ok(()),
            (0, true) => Err(Error::new(ctx, "the responder process failed")),
            (n, _) => Err(Error::new(ctx, format!("{n} subprotocol(s) failed"))),
        }
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
