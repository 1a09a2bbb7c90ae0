//! Small RAII helpers over the raw verbs for the integration tests: just enough to open a
//! device, create CQs/QPs/SRQs/MRs, connect RC QPs and poll completions. The safe API proper
//! belongs to the transport crate; these helpers panic on any unexpected verbs failure.

#![allow(dead_code)] // each test binary uses a different subset

use std::ffi::CStr;
use std::io::Write as _;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::time::{Duration, Instant};

use tagmatch_verbs_sys::*;

/// Set to `1` to turn "no RDMA device" from a skip into a failure (the VM test sets it).
pub const REQUIRE_ENV: &str = "TAGMATCH_REQUIRE_RDMA_DEVICE";
/// Set to `1` to turn "no device with tag matching (`max_num_tags > 0`)" into a failure.
pub const REQUIRE_TM_ENV: &str = "TAGMATCH_REQUIRE_TM_DEVICE";
/// Optional device name to test (default: the first device).
pub const DEVICE_ENV: &str = "TAGMATCH_RDMA_DEVICE";
/// Optional GID index to use (default: the first RoCE v2 IPv4-mapped GID, else the first GID).
pub const GID_INDEX_ENV: &str = "TAGMATCH_RDMA_GID_INDEX";

/// How long any single wait for a completion may take (TCG guests are slow).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Linux errno values used by the tests.
pub const ENOENT: i32 = 2;
/// Operation not supported.
pub const EOPNOTSUPP: i32 = 95;

/// Writes one line to the real stderr, bypassing libtest's output capture, so that skip
/// reasons and capability reports are visible in a plain `cargo test`.
pub fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

fn env_is_one(key: &str) -> bool {
    std::env::var(key).is_ok_and(|v| v.trim() == "1")
}

/// Reports a skipped test, or fails it when `require_env` is set to `1`.
pub fn skip(test: &str, reason: &str, require_env: &str) {
    if env_is_one(require_env) {
        panic!("{test}: {reason}, and {require_env}=1 requires it");
    }
    say(&format!("SKIPPED {test}: {reason}"));
}

/// The last OS error as text.
pub fn os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// An owned verbs object, destroyed with `free` on drop.
pub struct Owned<T> {
    /// The raw object (never null).
    pub ptr: *mut T,
    free: unsafe extern "C" fn(*mut T) -> c_int,
}

impl<T> Owned<T> {
    /// Wraps `ptr` (a fresh object from a create call) or panics with the OS error if null.
    pub fn new(ptr: *mut T, free: unsafe extern "C" fn(*mut T) -> c_int, what: &str) -> Self {
        assert!(!ptr.is_null(), "{what} failed: {}", os_error());
        Owned { ptr, free }
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from the create call matching `free` and is destroyed exactly once;
        // objects are dropped before the objects they depend on (declaration order).
        let rc = unsafe { (self.free)(self.ptr) };
        if rc != 0 && !std::thread::panicking() {
            say(&format!("warning: destroying a verbs object returned {rc}"));
        }
    }
}

/// The device list from `ibv_get_device_list`.
pub struct Devices {
    list: *mut *mut ibv_device,
    len: usize,
}

impl Devices {
    /// Lists devices; `Err` carries the reason there are none.
    pub fn get() -> Result<Devices, String> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out pointer.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(format!("ibv_get_device_list failed: {}", os_error()));
        }
        let devices = Devices {
            list,
            len: usize::try_from(n).unwrap_or(0),
        };
        if devices.len == 0 {
            return Err("ibv_get_device_list returned no RDMA device".into());
        }
        Ok(devices)
    }

    /// The devices in list order.
    pub fn iter(&self) -> impl Iterator<Item = *mut ibv_device> + '_ {
        // SAFETY: the list holds `len` valid device pointers until it is freed in drop.
        (0..self.len).map(move |i| unsafe { *self.list.add(i) })
    }
}

impl Drop for Devices {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { ibv_free_device_list(self.list) };
    }
}

/// The kernel name of a device (`rxe0`, `mlx5_0`, ...).
pub fn device_name(dev: *mut ibv_device) -> String {
    // SAFETY: `dev` is a listed device; the name is a NUL-terminated string owned by it.
    unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
        .to_string_lossy()
        .into_owned()
}

/// An open device: context, protection domain, port 1 and the GID to address it by.
pub struct Ctx {
    /// Protection domain (dropped before the context).
    pub pd: Owned<ibv_pd>,
    /// The device context.
    pub ctx: Owned<ibv_context>,
    /// Device name.
    pub name: String,
    /// Port number used (1).
    pub port: u8,
    /// Attributes of that port.
    pub port_attr: ibv_port_attr,
    /// GID index used as source GID.
    pub gid_index: u8,
    /// That GID.
    pub gid: [u8; 16],
    /// `ibv_query_device_ex` result.
    pub attr: ibv_device_attr_ex,
}

impl Ctx {
    /// Opens `dev`, queries it and port 1, picks a GID and allocates a PD.
    pub fn open(dev: *mut ibv_device) -> Ctx {
        let name = device_name(dev);
        // SAFETY: `dev` is a listed device.
        let ctx = Owned::new(
            unsafe { ibv_open_device(dev) },
            ibv_close_device,
            "ibv_open_device",
        );
        let mut attr = ibv_device_attr_ex::default();
        let input = ibv_query_device_ex_input::default();
        // SAFETY: valid context, input and output structs of the right types.
        let rc = unsafe { ibv_query_device_ex(ctx.ptr, &input, &mut attr) };
        assert_eq!(rc, 0, "{name}: ibv_query_device_ex: {}", errno_text(rc));
        let port = 1u8;
        let mut port_attr = ibv_port_attr::default();
        // SAFETY: valid context and output struct.
        let rc = unsafe { ibv_query_port(ctx.ptr, port, &mut port_attr) };
        assert_eq!(rc, 0, "{name}: ibv_query_port: {}", errno_text(rc));
        let (gid_index, gid) = pick_gid(ctx.ptr, port, &port_attr, &name);
        // SAFETY: valid context.
        let pd = Owned::new(
            unsafe { ibv_alloc_pd(ctx.ptr) },
            ibv_dealloc_pd,
            "ibv_alloc_pd",
        );
        Ctx {
            pd,
            ctx,
            name,
            port,
            port_attr,
            gid_index,
            gid,
            attr,
        }
    }

    /// Whether the port is RoCE (addressed by GID) rather than InfiniBand (by LID).
    pub fn is_ethernet(&self) -> bool {
        u32::from(self.port_attr.link_layer) == IBV_LINK_LAYER_ETHERNET
    }

    /// The device's tag-matching capabilities.
    pub fn tm_caps(&self) -> ibv_tm_caps {
        self.attr.tm_caps
    }
}

/// `rc` as an errno description.
pub fn errno_text(rc: c_int) -> String {
    format!("{rc} ({})", std::io::Error::from_raw_os_error(rc.abs()))
}

fn pick_gid(
    ctx: *mut ibv_context,
    port: u8,
    port_attr: &ibv_port_attr,
    name: &str,
) -> (u8, [u8; 16]) {
    if let Some(index) = std::env::var(GID_INDEX_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u8>().ok())
    {
        let mut gid = ibv_gid::default();
        // SAFETY: valid context and output union.
        let rc = unsafe { ibv_query_gid(ctx, port, c_int::from(index), &mut gid) };
        assert_eq!(rc, 0, "{name}: ibv_query_gid({index}) failed");
        // SAFETY: every bit pattern is a valid `[u8; 16]`.
        return (index, unsafe { gid.raw });
    }
    let mut fallback = None;
    for index in 0..u32::try_from(port_attr.gid_tbl_len).unwrap_or(0).min(256) {
        let mut entry = ibv_gid_entry::default();
        // SAFETY: valid context and output struct.
        let rc = unsafe { ibv_query_gid_ex(ctx, u32::from(port), index, &mut entry, 0) };
        if rc != 0 {
            continue;
        }
        // SAFETY: every bit pattern is a valid `[u8; 16]`.
        let raw = unsafe { entry.gid.raw };
        if raw == [0; 16] {
            continue;
        }
        let ipv4_mapped = raw[..10] == [0; 10] && raw[10..12] == [0xff, 0xff];
        if entry.gid_type == IBV_GID_TYPE_ROCE_V2 && ipv4_mapped {
            return (index as u8, raw);
        }
        fallback.get_or_insert((index as u8, raw));
    }
    // InfiniBand ports may have no queryable GID entry list: GID 0 is always valid there.
    fallback.unwrap_or_else(|| {
        let mut gid = ibv_gid::default();
        // SAFETY: valid context and output union.
        let rc = unsafe { ibv_query_gid(ctx, port, 0, &mut gid) };
        assert_eq!(rc, 0, "{name}: no usable GID");
        // SAFETY: every bit pattern is a valid `[u8; 16]`.
        (0, unsafe { gid.raw })
    })
}

/// Lists devices, or reports a skip (a failure under `TAGMATCH_REQUIRE_RDMA_DEVICE=1`).
pub fn devices_or_skip(test: &str) -> Option<Devices> {
    match Devices::get() {
        Ok(devices) => Some(devices),
        Err(reason) => {
            skip(test, &format!("no RDMA device ({reason})"), REQUIRE_ENV);
            None
        }
    }
}

/// Opens the device named by `TAGMATCH_RDMA_DEVICE`, else the first one, or reports a skip.
pub fn open_or_skip(test: &str) -> Option<Ctx> {
    let devices = devices_or_skip(test)?;
    let wanted = std::env::var(DEVICE_ENV).ok();
    let dev = devices
        .iter()
        .find(|&d| wanted.as_deref().is_none_or(|w| device_name(d) == w));
    match dev {
        Some(dev) => Some(Ctx::open(dev)),
        None => {
            skip(
                test,
                &format!("no RDMA device named {wanted:?}"),
                REQUIRE_ENV,
            );
            None
        }
    }
}

/// Opens the first device whose `tm_caps.max_num_tags > 0` (RC tag matching), or reports a
/// skip (a failure under `TAGMATCH_REQUIRE_TM_DEVICE=1`).
pub fn open_tm_or_skip(test: &str) -> Option<Ctx> {
    let devices = match Devices::get() {
        Ok(devices) => devices,
        Err(reason) => {
            skip(test, &format!("no RDMA device ({reason})"), REQUIRE_TM_ENV);
            return None;
        }
    };
    let mut seen = Vec::new();
    for dev in devices.iter() {
        let ctx = Ctx::open(dev);
        let caps = ctx.tm_caps();
        if caps.max_num_tags > 0 && caps.flags & IBV_TM_CAP_RC != 0 {
            return Some(ctx);
        }
        seen.push(format!("{}: max_num_tags={}", ctx.name, caps.max_num_tags));
    }
    skip(
        test,
        &format!(
            "needs tag-matching hardware (a device with tm_caps.max_num_tags > 0, e.g. \
             ConnectX-5+); found {}",
            seen.join(", ")
        ),
        REQUIRE_TM_ENV,
    );
    None
}

/// A registered buffer; the MR is deregistered before the buffer is freed.
pub struct Mr {
    /// The memory region.
    pub mr: Owned<ibv_mr>,
    /// The registered bytes.
    pub buf: Vec<u8>,
}

impl Mr {
    /// Registers `len` zeroed bytes with local write and remote read/write access.
    pub fn new(ctx: &Ctx, len: usize) -> Mr {
        let mut buf = vec![0u8; len];
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        // SAFETY: `buf` is valid for `len` bytes, its heap allocation never moves, and it
        // outlives the MR (`mr` is dropped first).
        let mr = unsafe {
            ibv_reg_mr(
                ctx.pd.ptr,
                buf.as_mut_ptr().cast::<c_void>(),
                len,
                access as c_int,
            )
        };
        Mr {
            mr: Owned::new(mr, ibv_dereg_mr, "ibv_reg_mr"),
            buf,
        }
    }

    /// Start address of the buffer as a verbs address.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is live.
        unsafe { (*self.mr.ptr).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the MR is live.
        unsafe { (*self.mr.ptr).rkey }
    }

    /// A scatter/gather entry for `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: usize) -> ibv_sge {
        assert!(offset + len <= self.buf.len());
        ibv_sge {
            addr: self.addr() + offset as u64,
            length: len as u32,
            lkey: self.lkey(),
        }
    }

    /// Reads the buffer after the device wrote it (the NIC writes behind the compiler's back).
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        (offset..offset + len)
            // SAFETY: in bounds; volatile because the device, not Rust, wrote the bytes.
            .map(|i| unsafe { ptr::read_volatile(self.buf.as_ptr().add(i)) })
            .collect()
    }
}

/// A basic CQ.
pub fn cq(ctx: &Ctx, cqe: i32) -> Owned<ibv_cq> {
    // SAFETY: valid context; no channel.
    let cq = unsafe { ibv_create_cq(ctx.ctx.ptr, cqe, ptr::null_mut(), ptr::null_mut(), 0) };
    Owned::new(cq, ibv_destroy_cq, "ibv_create_cq")
}

/// An extended CQ (`ibv_create_cq_ex`).
pub struct ExtCq {
    /// The CQ as a plain `ibv_cq` (for QP/SRQ creation and destruction).
    pub cq: Owned<ibv_cq>,
    /// The extended CQ.
    pub ex: *mut ibv_cq_ex,
    /// The `wc_flags` it was created with.
    pub wc_flags: u64,
}

impl ExtCq {
    /// Creates an extended CQ; `Err(errno)` if the device refuses.
    pub fn new(ctx: &Ctx, cqe: u32, wc_flags: u64) -> Result<ExtCq, i32> {
        let mut attr = ibv_cq_init_attr_ex {
            cqe,
            wc_flags,
            ..Default::default()
        };
        // SAFETY: valid context and attribute struct.
        let ex = unsafe { ibv_create_cq_ex(ctx.ctx.ptr, &mut attr) };
        if ex.is_null() {
            return Err(os_error().raw_os_error().unwrap_or(0));
        }
        // SAFETY: `ex` is a live extended CQ.
        let cq = unsafe { ibv_cq_ex_to_cq(ex) };
        Ok(ExtCq {
            cq: Owned::new(cq, ibv_destroy_cq, "ibv_cq_ex_to_cq"),
            ex,
            wc_flags,
        })
    }
}

/// One completion read through the extended-CQ API.
#[derive(Debug, Clone, Copy)]
pub struct ExWc {
    /// Work request id.
    pub wr_id: u64,
    /// `IBV_WC_*` status.
    pub status: ibv_wc_status,
    /// `IBV_WC_*` opcode.
    pub opcode: ibv_wc_opcode,
    /// Byte length (receives).
    pub byte_len: u32,
    /// `IBV_WC_*` flags.
    pub wc_flags: u32,
    /// Tag-matching info, when the CQ was created `WITH_TM_INFO`.
    pub tm: Option<ibv_wc_tm_info>,
}

/// Polls one completion from an extended CQ (`ibv_start_poll`/`ibv_end_poll`).
pub fn poll_ex(cq: &ExtCq, what: &str) -> ExWc {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut attr = ibv_poll_cq_attr::default();
        // SAFETY: live extended CQ; every successful start_poll is paired with end_poll.
        let rc = unsafe { ibv_start_poll(cq.ex, &mut attr) };
        if rc == 0 {
            // SAFETY: between start_poll and end_poll the current completion is readable;
            // only fields requested in `wc_flags` (or always present) are read.
            let wc = unsafe {
                let tm = (cq.wc_flags & u64::from(IBV_WC_EX_WITH_TM_INFO) != 0).then(|| {
                    let mut info = ibv_wc_tm_info::default();
                    ibv_wc_read_tm_info(cq.ex, &mut info);
                    info
                });
                let wc = ExWc {
                    wr_id: (*cq.ex).wr_id,
                    status: (*cq.ex).status,
                    opcode: ibv_wc_read_opcode(cq.ex),
                    byte_len: ibv_wc_read_byte_len(cq.ex),
                    wc_flags: ibv_wc_read_wc_flags(cq.ex),
                    tm,
                };
                ibv_end_poll(cq.ex);
                wc
            };
            return wc;
        }
        assert_eq!(rc, ENOENT, "{what}: ibv_start_poll: {}", errno_text(rc));
        assert!(
            Instant::now() < deadline,
            "{what}: no completion within {TIMEOUT:?}"
        );
        std::thread::yield_now();
    }
}

/// Polls one completion from a basic CQ.
pub fn poll(cq: &Owned<ibv_cq>, what: &str) -> ibv_wc {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut wc = ibv_wc::default();
        // SAFETY: live CQ, room for one completion.
        let n = unsafe { ibv_poll_cq(cq.ptr, 1, &mut wc) };
        assert!(n >= 0, "{what}: ibv_poll_cq returned {n}");
        if n == 1 {
            return wc;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no completion within {TIMEOUT:?}"
        );
        std::thread::yield_now();
    }
}

/// Text of a work-completion status.
pub fn status_str(status: ibv_wc_status) -> String {
    // SAFETY: ibv_wc_status_str returns a static NUL-terminated string for any value.
    unsafe { CStr::from_ptr(ibv_wc_status_str(status)) }
        .to_string_lossy()
        .into_owned()
}

/// Polls one completion and checks it succeeded with `opcode`.
pub fn poll_ok(cq: &Owned<ibv_cq>, opcode: ibv_wc_opcode, what: &str) -> ibv_wc {
    let wc = poll(cq, what);
    assert_eq!(
        wc.status,
        IBV_WC_SUCCESS,
        "{what}: completion status {} ({})",
        wc.status,
        status_str(wc.status)
    );
    assert_eq!(wc.opcode, opcode, "{what}: completion opcode");
    wc
}

/// An RC QP. With `srq`, its receives come from that SRQ.
pub fn rc_qp(
    ctx: &Ctx,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
) -> Owned<ibv_qp> {
    let mut attr = ibv_qp_init_attr {
        send_cq,
        recv_cq,
        srq,
        cap: ibv_qp_cap {
            max_send_wr: 128,
            max_recv_wr: if srq.is_null() { 128 } else { 0 },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
        ..Default::default()
    };
    // SAFETY: valid PD and attribute struct whose CQs/SRQ are live.
    let qp = unsafe { ibv_create_qp(ctx.pd.ptr, &mut attr) };
    Owned::new(qp, ibv_destroy_qp, "ibv_create_qp(RC)")
}

/// What a peer needs to connect to a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// Port LID (InfiniBand).
    pub lid: u16,
    /// GID (RoCE).
    pub gid: [u8; 16],
    /// Initial packet sequence number.
    pub psn: u32,
}

impl Endpoint {
    /// This side of `qp`.
    pub fn of(ctx: &Ctx, qp: &Owned<ibv_qp>) -> Endpoint {
        Endpoint {
            // SAFETY: the QP is live.
            qpn: unsafe { (*qp.ptr).qp_num },
            lid: ctx.port_attr.lid,
            gid: ctx.gid,
            psn: 0x1000,
        }
    }

    /// One-line text form for exchanging between processes.
    pub fn to_line(self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!("{} {} {} {}", self.qpn, self.lid, gid, self.psn)
    }

    /// Parses [`Endpoint::to_line`].
    pub fn parse(line: &str) -> Endpoint {
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts.len(), 4, "bad endpoint line {line:?}");
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&parts[2][2 * i..2 * i + 2], 16).expect("gid hex");
        }
        Endpoint {
            qpn: parts[0].parse().expect("qpn"),
            lid: parts[1].parse().expect("lid"),
            gid,
            psn: parts[3].parse().expect("psn"),
        }
    }
}

fn modify(qp: &Owned<ibv_qp>, attr: &mut ibv_qp_attr, mask: u32, what: &str) {
    // SAFETY: live QP and attribute struct.
    let rc = unsafe { ibv_modify_qp(qp.ptr, attr, mask as c_int) };
    assert_eq!(rc, 0, "ibv_modify_qp({what}): {}", errno_text(rc));
}

/// Moves `qp` through INIT, RTR and RTS towards `remote`.
pub fn connect(ctx: &Ctx, qp: &Owned<ibv_qp>, local: &Endpoint, remote: &Endpoint) {
    let mut attr = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: ctx.port,
        qp_access_flags: IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
        ..Default::default()
    };
    modify(
        qp,
        &mut attr,
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
        "INIT",
    );

    let mut attr = ibv_qp_attr {
        qp_state: IBV_QPS_RTR,
        path_mtu: ctx.port_attr.active_mtu,
        dest_qp_num: remote.qpn,
        rq_psn: remote.psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..Default::default()
    };
    attr.ah_attr.port_num = ctx.port;
    attr.ah_attr.dlid = remote.lid;
    if ctx.is_ethernet() || remote.lid == 0 {
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid.raw = remote.gid;
        attr.ah_attr.grh.sgid_index = ctx.gid_index;
        attr.ah_attr.grh.hop_limit = 1;
    }
    modify(
        qp,
        &mut attr,
        IBV_QP_STATE
            | IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER,
        "RTR",
    );

    let mut attr = ibv_qp_attr {
        qp_state: IBV_QPS_RTS,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: local.psn,
        max_rd_atomic: 1,
        ..Default::default()
    };
    modify(
        qp,
        &mut attr,
        IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC,
        "RTS",
    );
}

/// Posts one signaled send work request (`remote` for RDMA read/write).
pub fn post_send(
    qp: &Owned<ibv_qp>,
    wr_id: u64,
    opcode: ibv_wr_opcode,
    sge: ibv_sge,
    remote: Option<(u64, u32)>,
) {
    let mut sge = sge;
    let mut wr = ibv_send_wr {
        wr_id,
        sg_list: &mut sge,
        num_sge: 1,
        opcode,
        send_flags: IBV_SEND_SIGNALED,
        ..Default::default()
    };
    if let Some((remote_addr, rkey)) = remote {
        wr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
    }
    let mut bad = ptr::null_mut();
    // SAFETY: live QP; `wr` and `sge` are valid for the call (the provider copies them).
    let rc = unsafe { ibv_post_send(qp.ptr, &mut wr, &mut bad) };
    assert_eq!(rc, 0, "ibv_post_send: {}", errno_text(rc));
}

/// Posts one receive on a QP's own receive queue.
pub fn post_recv(qp: &Owned<ibv_qp>, wr_id: u64, sge: ibv_sge) {
    let mut sge = sge;
    let mut wr = ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = ptr::null_mut();
    // SAFETY: live QP; `wr` and `sge` are valid for the call.
    let rc = unsafe { ibv_post_recv(qp.ptr, &mut wr, &mut bad) };
    assert_eq!(rc, 0, "ibv_post_recv: {}", errno_text(rc));
}

/// Posts one receive on an SRQ.
pub fn post_srq_recv(srq: &Owned<ibv_srq>, wr_id: u64, sge: ibv_sge) {
    let mut sge = sge;
    let mut wr = ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = ptr::null_mut();
    // SAFETY: live SRQ; `wr` and `sge` are valid for the call.
    let rc = unsafe { ibv_post_srq_recv(srq.ptr, &mut wr, &mut bad) };
    assert_eq!(rc, 0, "ibv_post_srq_recv: {}", errno_text(rc));
}

/// A basic SRQ through `ibv_create_srq_ex` (type BASIC).
pub fn basic_srq(ctx: &Ctx, max_wr: u32) -> Owned<ibv_srq> {
    let mut attr = ibv_srq_init_attr_ex {
        attr: ibv_srq_attr {
            max_wr,
            max_sge: 1,
            srq_limit: 0,
        },
        comp_mask: IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
        srq_type: IBV_SRQT_BASIC,
        pd: ctx.pd.ptr,
        ..Default::default()
    };
    // SAFETY: valid context and attribute struct.
    let srq = unsafe { ibv_create_srq_ex(ctx.ctx.ptr, &mut attr) };
    Owned::new(srq, ibv_destroy_srq, "ibv_create_srq_ex(BASIC)")
}

/// Tries to create a tag-matching SRQ completing on `cq`; `Err(errno)` if refused.
pub fn tm_srq(
    ctx: &Ctx,
    cq: *mut ibv_cq,
    max_wr: u32,
    tm_cap: ibv_tm_cap,
) -> Result<Owned<ibv_srq>, i32> {
    let mut attr = ibv_srq_init_attr_ex {
        attr: ibv_srq_attr {
            max_wr,
            max_sge: 1,
            srq_limit: 0,
        },
        comp_mask: IBV_SRQ_INIT_ATTR_TYPE
            | IBV_SRQ_INIT_ATTR_PD
            | IBV_SRQ_INIT_ATTR_CQ
            | IBV_SRQ_INIT_ATTR_TM,
        srq_type: IBV_SRQT_TM,
        pd: ctx.pd.ptr,
        cq,
        tm_cap,
        ..Default::default()
    };
    // SAFETY: valid context and attribute struct; the CQ is live.
    let srq = unsafe { ibv_create_srq_ex(ctx.ctx.ptr, &mut attr) };
    if srq.is_null() {
        return Err(os_error().raw_os_error().unwrap_or(0));
    }
    Ok(Owned::new(srq, ibv_destroy_srq, "ibv_create_srq_ex(TM)"))
}

/// Software framing used over plain RC when the device has no tag matching: the same
/// big-endian `ibv_tmh` (+ `ibv_rvh`) the hardware would parse.
pub fn tmh_bytes(op: ibv_tmh_op, app_ctx: u32, tag: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0] = op as u8;
    b[4..8].copy_from_slice(&app_ctx.to_be_bytes());
    b[8..16].copy_from_slice(&tag.to_be_bytes());
    b
}

/// `struct ibv_rvh` bytes.
pub fn rvh_bytes(va: u64, rkey: u32, len: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&va.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..16].copy_from_slice(&len.to_be_bytes());
    b
}

/// Parses `(opcode, app_ctx, tag)` out of TMH bytes.
pub fn parse_tmh(b: &[u8]) -> (u8, u32, u64) {
    (
        b[0],
        u32::from_be_bytes(b[4..8].try_into().unwrap()),
        u64::from_be_bytes(b[8..16].try_into().unwrap()),
    )
}

/// Parses `(va, rkey, len)` out of RVH bytes.
pub fn parse_rvh(b: &[u8]) -> (u64, u32, u32) {
    (
        u64::from_be_bytes(b[0..8].try_into().unwrap()),
        u32::from_be_bytes(b[8..12].try_into().unwrap()),
        u32::from_be_bytes(b[12..16].try_into().unwrap()),
    )
}

/// A deterministic byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Fills an MR's buffer (before handing it to the device).
pub fn fill(mr: &mut Mr, offset: usize, bytes: &[u8]) {
    mr.buf[offset..offset + bytes.len()].copy_from_slice(bytes);
}
