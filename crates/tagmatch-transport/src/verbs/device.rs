//! Owned verbs resources: device list, [`Context`], [`Pd`], memory regions ([`Mr`],
//! [`OwnedMr`]), completion queues ([`Cq`]), shared receive queues ([`Srq`]) and RC queue
//! pairs ([`Qp`]).
//!
//! Every object keeps its parents alive through reference-counted handles (a QP holds its
//! PD, CQs and SRQ; an SRQ its PD and CQ; a PD and a CQ their context), so whatever order
//! the owner drops them in, each object is destroyed before the objects it depends on:
//! QP → SRQ → CQ → MR → PD → context.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::rc::Rc;

use tagmatch_verbs_sys as sys;

use super::{Error, Result};

fn last_os_error(call: &'static str) -> Error {
    Error::Verbs {
        call,
        err: std::io::Error::last_os_error(),
    }
}

/// Reports a failed `ibv_destroy_*`/`ibv_dereg_*` (a destructor cannot return it).
fn destroyed(call: &'static str, rc: c_int) {
    if rc != 0 {
        tracing::warn!(rc, "{call} failed");
    }
}

fn check_rc(call: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Verbs {
            call,
            err: std::io::Error::from_raw_os_error(rc.abs()),
        })
    }
}

/// Names of the RDMA devices present (`rxe0`, `mlx5_0`, ...), in `ibv_get_device_list`
/// order. `Err(Error::NoDevice)` when there is none.
pub fn device_names() -> Result<Vec<String>> {
    let list = DeviceList::get()?;
    Ok(list.iter().map(device_name).collect())
}

/// The list of `ibv_get_device_list`, freed on drop.
struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out pointer for the duration of the call.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        let Some(list) = NonNull::new(list) else {
            return Err(Error::NoDevice(format!(
                "ibv_get_device_list failed: {}",
                std::io::Error::last_os_error()
            )));
        };
        let list = DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
        };
        if list.len == 0 {
            return Err(Error::NoDevice(
                "ibv_get_device_list returned no RDMA device".into(),
            ));
        }
        Ok(list)
    }

    fn iter(&self) -> impl Iterator<Item = *mut sys::ibv_device> + '_ {
        // SAFETY: the list holds `len` valid device pointers until it is freed in drop,
        // which the borrow of `self` prevents.
        (0..self.len).map(move |i| unsafe { *self.list.as_ptr().add(i) })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed exactly once; opened
        // contexts stay valid after the list is freed (libibverbs reference-counts devices).
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) };
    }
}

fn device_name(dev: *mut sys::ibv_device) -> String {
    // SAFETY: `dev` is a listed device; its name is a NUL-terminated string it owns.
    unsafe { CStr::from_ptr(sys::ibv_get_device_name(dev)) }
        .to_string_lossy()
        .into_owned()
}

/// The tag-matching part of the device capabilities (`struct ibv_tm_caps`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TmCapsInfo {
    /// Largest rendezvous request (TMH + RVH + optional data) the hardware parses.
    pub max_rndv_hdr_size: u32,
    /// Tagged buffers the matching list can hold; 0 means no tag matching.
    pub max_num_tags: u32,
    /// `IBV_TM_CAP_*` flags.
    pub flags: u32,
    /// Outstanding list operations.
    pub max_ops: u32,
    /// SGEs per tagged buffer.
    pub max_sge: u32,
}

impl TmCapsInfo {
    /// Tag matching over RC is available (`max_num_tags > 0` and `IBV_TM_CAP_RC`).
    pub fn rc_tm(&self) -> bool {
        self.max_num_tags > 0 && self.flags & sys::IBV_TM_CAP_RC != 0
    }

    /// The model's view of these capabilities.
    pub fn to_model(&self) -> tagmatch_engine::tm_srq::TmCaps {
        tagmatch_engine::tm_srq::TmCaps {
            max_num_tags: self.max_num_tags,
            max_ops: self.max_ops,
            max_rndv_hdr_size: self.max_rndv_hdr_size,
        }
    }
}

/// What `ibv_query_device_ex` and `ibv_query_port` said about the opened device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Kernel device name.
    pub name: String,
    /// Firmware version string.
    pub fw_ver: String,
    /// `max_qp_wr`.
    pub max_qp_wr: u32,
    /// `max_srq_wr`.
    pub max_srq_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `max_mr_size`.
    pub max_mr_size: u64,
    /// `max_qp_rd_atom` (outstanding RDMA reads per QP).
    pub max_qp_rd_atom: u32,
    /// Tag-matching capabilities.
    pub tm: TmCapsInfo,
    /// Port used (1).
    pub port: u8,
    /// The port is Ethernet (RoCE, addressed by GID) rather than InfiniBand (by LID).
    pub ethernet: bool,
    /// Port LID (InfiniBand).
    pub lid: u16,
    /// `active_mtu` in bytes.
    pub active_mtu: u32,
    /// GID index used as source GID.
    pub gid_index: u8,
    /// That GID.
    pub gid: [u8; 16],
}

struct CtxInner {
    ctx: NonNull<sys::ibv_context>,
    caps: DeviceCaps,
    active_mtu: sys::ibv_mtu,
}

impl Drop for CtxInner {
    fn drop(&mut self) {
        // SAFETY: the context came from ibv_open_device and every child object holds an
        // `Rc` of this, so it is closed exactly once, after all of them were destroyed.
        unsafe { sys::ibv_close_device(self.ctx.as_ptr()) };
    }
}

/// An open device (port 1) with its capabilities. Cloning shares the context.
#[derive(Clone)]
pub struct Context {
    inner: Rc<CtxInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.inner.caps.name)
            .finish_non_exhaustive()
    }
}

/// Environment variable naming the device to open (default: the first one).
pub const DEVICE_ENV: &str = "TAGMATCH_RDMA_DEVICE";
/// Environment variable forcing a GID index (default: the first RoCE v2 IPv4-mapped GID).
pub const GID_INDEX_ENV: &str = "TAGMATCH_RDMA_GID_INDEX";

impl Context {
    /// Opens the device named `name`, or (with `None`) the one named by
    /// `TAGMATCH_RDMA_DEVICE`, else the first device.
    pub fn open(name: Option<&str>) -> Result<Context> {
        let env = std::env::var(DEVICE_ENV).ok();
        let wanted = name.or(env.as_deref());
        let list = DeviceList::get()?;
        let dev = list
            .iter()
            .find(|&d| wanted.is_none_or(|w| device_name(d) == w))
            .ok_or_else(|| Error::NoDevice(format!("no RDMA device named {wanted:?}")))?;
        Self::open_device(dev)
    }

    fn open_device(dev: *mut sys::ibv_device) -> Result<Context> {
        let name = device_name(dev);
        // SAFETY: `dev` is a listed device (the list is alive in the caller).
        let ctx = NonNull::new(unsafe { sys::ibv_open_device(dev) })
            .ok_or_else(|| last_os_error("ibv_open_device"))?;
        // From here on the context is closed by CtxInner's drop, also on error.
        let mut inner = CtxInner {
            ctx,
            caps: DeviceCaps {
                name,
                fw_ver: String::new(),
                max_qp_wr: 0,
                max_srq_wr: 0,
                max_sge: 0,
                max_mr_size: 0,
                max_qp_rd_atom: 0,
                tm: TmCapsInfo::default(),
                port: 1,
                ethernet: false,
                lid: 0,
                active_mtu: 0,
                gid_index: 0,
                gid: [0; 16],
            },
            active_mtu: sys::IBV_MTU_1024,
        };
        let mut attr = sys::ibv_device_attr_ex::default();
        let input = sys::ibv_query_device_ex_input::default();
        // SAFETY: live context; input and output are valid structs of the expected types.
        let rc = unsafe { sys::ibv_query_device_ex(ctx.as_ptr(), &input, &mut attr) };
        check_rc("ibv_query_device_ex", rc)?;
        let mut port_attr = sys::ibv_port_attr::default();
        // SAFETY: live context; output struct of the full (non-compat) layout.
        let rc = unsafe { sys::ibv_query_port(ctx.as_ptr(), 1, &mut port_attr) };
        check_rc("ibv_query_port", rc)?;
        let (gid_index, gid) = pick_gid(ctx.as_ptr(), 1, &port_attr)?;
        let o = &attr.orig_attr;
        let fw: Vec<u8> = o
            .fw_ver
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let c = &mut inner.caps;
        c.fw_ver = String::from_utf8_lossy(&fw).into_owned();
        c.max_qp_wr = u32::try_from(o.max_qp_wr).unwrap_or(0);
        c.max_srq_wr = u32::try_from(o.max_srq_wr).unwrap_or(0);
        c.max_sge = u32::try_from(o.max_sge).unwrap_or(0);
        c.max_mr_size = o.max_mr_size;
        c.max_qp_rd_atom = u32::try_from(o.max_qp_rd_atom).unwrap_or(0);
        let t = attr.tm_caps;
        c.tm = TmCapsInfo {
            max_rndv_hdr_size: t.max_rndv_hdr_size,
            max_num_tags: t.max_num_tags,
            flags: t.flags,
            max_ops: t.max_ops,
            max_sge: t.max_sge,
        };
        c.ethernet = u32::from(port_attr.link_layer) == sys::IBV_LINK_LAYER_ETHERNET;
        c.lid = port_attr.lid;
        c.active_mtu = match port_attr.active_mtu {
            sys::IBV_MTU_256 => 256,
            sys::IBV_MTU_512 => 512,
            sys::IBV_MTU_1024 => 1024,
            sys::IBV_MTU_2048 => 2048,
            sys::IBV_MTU_4096 => 4096,
            _ => 0,
        };
        c.gid_index = gid_index;
        c.gid = gid;
        inner.active_mtu = port_attr.active_mtu;
        Ok(Context {
            inner: Rc::new(inner),
        })
    }

    /// The capabilities queried at open.
    pub fn caps(&self) -> &DeviceCaps {
        &self.inner.caps
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.inner.caps.name
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_context {
        self.inner.ctx.as_ptr()
    }

    pub(crate) fn active_mtu_enum(&self) -> sys::ibv_mtu {
        self.inner.active_mtu
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        // SAFETY: live context.
        let pd = NonNull::new(unsafe { sys::ibv_alloc_pd(self.raw()) })
            .ok_or_else(|| last_os_error("ibv_alloc_pd"))?;
        Ok(Pd {
            inner: Rc::new(PdInner {
                pd,
                ctx: self.clone(),
            }),
        })
    }
}

fn pick_gid(
    ctx: *mut sys::ibv_context,
    port: u8,
    port_attr: &sys::ibv_port_attr,
) -> Result<(u8, [u8; 16])> {
    let query = |index: c_int| -> Result<[u8; 16]> {
        let mut gid = sys::ibv_gid::default();
        // SAFETY: live context and output union.
        let rc = unsafe { sys::ibv_query_gid(ctx, port, index, &mut gid) };
        check_rc("ibv_query_gid", rc)?;
        // SAFETY: every bit pattern is a valid `[u8; 16]`.
        Ok(unsafe { gid.raw })
    };
    if let Some(index) = std::env::var(GID_INDEX_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u8>().ok())
    {
        return Ok((index, query(c_int::from(index))?));
    }
    let mut fallback = None;
    let len = u32::try_from(port_attr.gid_tbl_len).unwrap_or(0).min(256);
    for index in 0..len {
        let mut entry = sys::ibv_gid_entry::default();
        // SAFETY: live context and output struct.
        let rc = unsafe { sys::ibv_query_gid_ex(ctx, u32::from(port), index, &mut entry, 0) };
        if rc != 0 {
            continue;
        }
        // SAFETY: every bit pattern is a valid `[u8; 16]`.
        let raw = unsafe { entry.gid.raw };
        if raw == [0; 16] {
            continue;
        }
        let ipv4_mapped = raw[..10] == [0; 10] && raw[10..12] == [0xff, 0xff];
        let index = u8::try_from(index).unwrap_or(u8::MAX);
        if entry.gid_type == sys::IBV_GID_TYPE_ROCE_V2 && ipv4_mapped {
            return Ok((index, raw));
        }
        fallback.get_or_insert((index, raw));
    }
    match fallback {
        Some(f) => Ok(f),
        // InfiniBand ports may have no queryable GID entry list; GID 0 is always valid.
        None => Ok((0, query(0)?)),
    }
}

struct PdInner {
    pd: NonNull<sys::ibv_pd>,
    ctx: Context,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd; every MR, SRQ and QP of this PD holds an `Rc` of
        // it, so they are all gone and the PD is freed exactly once.
        unsafe { sys::ibv_dealloc_pd(self.pd.as_ptr()) };
    }
}

/// A protection domain. Cloning shares it.
#[derive(Clone)]
pub struct Pd {
    inner: Rc<PdInner>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").finish_non_exhaustive()
    }
}

/// Access rights of a registration (`IBV_ACCESS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access(u32);

impl Access {
    /// Local read only (send sources).
    pub const LOCAL: Access = Access(0);
    /// The device may write (receive buffers, RDMA-read destinations).
    pub const LOCAL_WRITE: Access = Access(sys::IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA-read (rendezvous sources).
    pub const REMOTE_READ: Access = Access(sys::IBV_ACCESS_REMOTE_READ);
    /// Peers may RDMA-write.
    pub const REMOTE_WRITE: Access =
        Access(sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_LOCAL_WRITE);
    /// Everything above.
    pub const ALL: Access = Access(
        sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_READ | sys::IBV_ACCESS_REMOTE_WRITE,
    );

    /// Both sets of rights.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl Pd {
    pub(crate) fn raw(&self) -> *mut sys::ibv_pd {
        self.inner.pd.as_ptr()
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Registers a caller buffer for as long as the borrow lasts.
    pub fn register<'a>(&self, buf: &'a mut [u8], access: Access) -> Result<Mr<'a>> {
        let raw = self.reg(buf.as_mut_ptr(), buf.len(), access)?;
        Ok(Mr {
            raw,
            _buf: PhantomData,
        })
    }

    /// Allocates `len` zeroed bytes and registers them; the result owns both.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<OwnedMr> {
        OwnedMr::new(self, vec![0u8; len], access)
    }

    fn reg(&self, ptr: *mut u8, len: usize, access: Access) -> Result<RawMr> {
        let access = c_int::try_from(access.0).map_err(|_| Error::Invalid("access".into()))?;
        // SAFETY: `ptr` is valid for `len` bytes; the callers (`Mr`, `OwnedMr`) keep the
        // memory alive and unmoved until the registration is dropped.
        let mr = unsafe { sys::ibv_reg_mr(self.raw(), ptr.cast::<c_void>(), len, access) };
        let mr = NonNull::new(mr).ok_or_else(|| last_os_error("ibv_reg_mr"))?;
        Ok(RawMr {
            mr,
            addr: ptr,
            len,
            _pd: self.clone(),
        })
    }
}

/// A registration (deregistered on drop, before the memory can go).
struct RawMr {
    mr: NonNull<sys::ibv_mr>,
    addr: *mut u8,
    len: usize,
    _pd: Pd,
}

impl Drop for RawMr {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr, deregistered exactly once; the PD is alive (held).
        destroyed("ibv_dereg_mr", unsafe {
            sys::ibv_dereg_mr(self.mr.as_ptr())
        });
    }
}

impl RawMr {
    fn lkey(&self) -> u32 {
        // SAFETY: the MR is live while `self` is.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: the MR is live while `self` is.
        unsafe { (*self.mr.as_ptr()).rkey }
    }

    fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        let end = offset.checked_add(len).ok_or(Error::OutOfBounds {
            offset,
            len,
            region: self.len,
        })?;
        if end > self.len {
            return Err(Error::OutOfBounds {
                offset,
                len,
                region: self.len,
            });
        }
        Ok(Sge {
            addr: self.addr as u64 + offset as u64,
            len: u32::try_from(len).map_err(|_| Error::Invalid("SGE longer than 4 GiB".into()))?,
            lkey: self.lkey(),
        })
    }
}

/// A scatter/gather element inside a registered region (bounds checked when made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the region.
    pub lkey: u32,
}

impl Sge {
    pub(crate) fn raw(self) -> sys::ibv_sge {
        sys::ibv_sge {
            addr: self.addr,
            length: self.len,
            lkey: self.lkey,
        }
    }
}

/// Where a peer may RDMA-read or write: address, remote key, length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u32,
}

/// A registration of a caller's buffer, borrowed for `'a`.
pub struct Mr<'a> {
    raw: RawMr,
    _buf: PhantomData<&'a mut [u8]>,
}

impl std::fmt::Debug for Mr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("len", &self.raw.len)
            .field("lkey", &self.raw.lkey())
            .finish_non_exhaustive()
    }
}

impl Mr<'_> {
    /// Registered length.
    pub fn len(&self) -> usize {
        self.raw.len
    }
    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey()
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.raw.rkey()
    }
    /// An SGE for `len` bytes at `offset`; `Err(OutOfBounds)` outside the region.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        self.raw.sge(offset, len)
    }
    /// What a peer needs to access `len` bytes at `offset`; bounds checked.
    pub fn remote(&self, offset: usize, len: usize) -> Result<RemoteBuf> {
        let s = self.raw.sge(offset, len)?;
        Ok(RemoteBuf {
            va: s.addr,
            rkey: self.raw.rkey(),
            len: s.len,
        })
    }
}

/// A registration that owns its memory (a heap buffer that never moves). Transport
/// operations take it by value and hand it back in their completion, so the device can
/// never touch memory Rust has freed or lent out.
///
/// The transport never issues RDMA writes and registers its buffers without
/// [`Access::REMOTE_WRITE`]; a region registered *with* it can be changed by a peer at any
/// time, so only hand its [`OwnedMr::remote`] descriptor to peers you trust not to write
/// while you read it.
pub struct OwnedMr {
    // Declared first: deregistered before `buf` is freed.
    raw: RawMr,
    buf: Box<[u8]>,
}

impl std::fmt::Debug for OwnedMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedMr")
            .field("len", &self.raw.len)
            .field("lkey", &self.raw.lkey())
            .finish_non_exhaustive()
    }
}

impl OwnedMr {
    /// Registers `buf` (taking it over).
    pub fn new(pd: &Pd, buf: Vec<u8>, access: Access) -> Result<OwnedMr> {
        let mut buf = buf.into_boxed_slice();
        let raw = pd.reg(buf.as_mut_ptr(), buf.len(), access)?;
        Ok(OwnedMr { raw, buf })
    }

    /// Registered length.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey()
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.raw.rkey()
    }
    /// An SGE for `len` bytes at `offset`; `Err(OutOfBounds)` outside the region.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        self.raw.sge(offset, len)
    }
    /// What a peer needs to access `len` bytes at `offset`; bounds checked.
    pub fn remote(&self, offset: usize, len: usize) -> Result<RemoteBuf> {
        let s = self.raw.sge(offset, len)?;
        Ok(RemoteBuf {
            va: s.addr,
            rkey: self.raw.rkey(),
            len: s.len,
        })
    }
    /// The bytes. Only call this while no operation of the device targets the region (the
    /// transport only hands the region back once its operation completed).
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
    /// The bytes, mutably (same rule as [`OwnedMr::as_slice`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Copies `len` bytes at `offset` out while the device may write *other* parts of the
    /// region (receive pools): reads through the raw pointer, no reference to the whole
    /// buffer is formed. Panics when out of bounds.
    pub(crate) fn copy_out(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset.checked_add(len).is_some_and(|e| e <= self.buf.len()));
        let mut out = vec![0u8; len];
        // SAFETY: in bounds (checked above); the device finished writing these bytes (their
        // receive completion was polled) and does not touch them until they are reposted.
        unsafe {
            ptr::copy_nonoverlapping(self.raw.addr.add(offset), out.as_mut_ptr(), len);
        }
        out
    }

    /// Copies `src` in at `offset` (same rule as [`OwnedMr::copy_out`]): for a slot of a
    /// send pool that no posted operation uses. Panics when out of bounds.
    pub(crate) fn copy_in(&mut self, offset: usize, src: &[u8]) {
        assert!(offset
            .checked_add(src.len())
            .is_some_and(|e| e <= self.buf.len()));
        // SAFETY: in bounds (checked above); no posted operation reads or writes this slot.
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), self.raw.addr.add(offset), src.len());
        }
    }
}

/// One work completion, from a basic or an extended CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// Work request id (for a TM receive: the tagged buffer's `recv_wr_id`).
    pub wr_id: u64,
    /// `IBV_WC_*` status.
    pub status: u32,
    /// `IBV_WC_*` opcode.
    pub opcode: u32,
    /// Bytes received.
    pub byte_len: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// `IBV_WC_*` flags.
    pub wc_flags: u32,
    /// Tag and `app_ctx` of tag-matching completions (extended CQ with TM info only).
    pub tm: Option<(u64, u32)>,
}

impl Wc {
    /// The status as text (`ibv_wc_status_str`).
    pub fn status_str(&self) -> String {
        status_str(self.status)
    }
}

/// `ibv_wc_status_str`.
pub fn status_str(status: u32) -> String {
    // SAFETY: ibv_wc_status_str returns a static NUL-terminated string for any value.
    unsafe { CStr::from_ptr(sys::ibv_wc_status_str(status)) }
        .to_string_lossy()
        .into_owned()
}

struct CqInner {
    cq: NonNull<sys::ibv_cq>,
    ex: Option<NonNull<sys::ibv_cq_ex>>,
    tm_info: bool,
    /// The completion channel, destroyed after the CQ.
    _chan: Option<CompChannel>,
    _ctx: Context,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_cq(_ex) and destroyed exactly once; QPs and SRQs
        // completing on it hold an `Rc` of it, so they were destroyed first.
        destroyed("ibv_destroy_cq", unsafe {
            sys::ibv_destroy_cq(self.cq.as_ptr())
        });
    }
}

/// A completion queue, basic or extended. Cloning shares it.
#[derive(Clone)]
pub struct Cq {
    inner: Rc<CqInner>,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("extended", &self.inner.ex.is_some())
            .finish_non_exhaustive()
    }
}

impl Cq {
    /// A basic CQ of at least `cqe` entries.
    pub fn new(ctx: &Context, cqe: u32) -> Result<Cq> {
        Cq::basic(ctx, cqe, None)
    }

    /// A basic CQ of at least `cqe` entries that reports to `channel` when armed with
    /// [`Cq::req_notify`], so that its owner can sleep in `poll(2)` on the channel's fd.
    pub fn with_channel(ctx: &Context, cqe: u32, channel: &CompChannel) -> Result<Cq> {
        Cq::basic(ctx, cqe, Some(channel))
    }

    fn basic(ctx: &Context, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        let n = c_int::try_from(cqe).map_err(|_| Error::Invalid("cqe".into()))?;
        let ch = channel.map_or(ptr::null_mut(), |c| c.inner.ch.as_ptr());
        // SAFETY: live context; `ch` is null or a live channel of the same context, kept
        // alive by the CQ (it holds the channel's handle).
        let cq = unsafe { sys::ibv_create_cq(ctx.raw(), n, ptr::null_mut(), ch, 0) };
        let cq = NonNull::new(cq).ok_or_else(|| last_os_error("ibv_create_cq"))?;
        Ok(Cq {
            inner: Rc::new(CqInner {
                cq,
                ex: None,
                tm_info: false,
                _chan: channel.cloned(),
                _ctx: ctx.clone(),
            }),
        })
    }

    /// Arms the CQ (`ibv_req_notify_cq`): its channel gets one event at the next
    /// completion. Poll once more after arming — a completion that arrived before it does
    /// not raise an event.
    pub fn req_notify(&self) -> Result<()> {
        // SAFETY: live CQ.
        let rc = unsafe { sys::ibv_req_notify_cq(self.raw(), 0) };
        check_rc("ibv_req_notify_cq", rc)
    }

    /// An extended CQ (`ibv_create_cq_ex`) reporting the QP number and, with `tm_info`,
    /// the tag-matching info of TM completions.
    pub fn new_ex(ctx: &Context, cqe: u32, tm_info: bool) -> Result<Cq> {
        let mut wc_flags = u64::from(sys::IBV_WC_EX_WITH_BYTE_LEN | sys::IBV_WC_EX_WITH_QP_NUM);
        if tm_info {
            wc_flags |= u64::from(sys::IBV_WC_EX_WITH_TM_INFO);
        }
        let mut attr = sys::ibv_cq_init_attr_ex {
            cqe,
            wc_flags,
            ..Default::default()
        };
        // SAFETY: live context and a valid attribute struct.
        let ex = unsafe { sys::ibv_create_cq_ex(ctx.raw(), &mut attr) };
        let ex = NonNull::new(ex).ok_or_else(|| last_os_error("ibv_create_cq_ex"))?;
        // SAFETY: `ex` is a live extended CQ; the conversion is a pointer cast.
        let cq = unsafe { sys::ibv_cq_ex_to_cq(ex.as_ptr()) };
        let Some(cq) = NonNull::new(cq) else {
            // SAFETY: destroy the extended CQ we just created (its base is the same object).
            unsafe { sys::ibv_destroy_cq(ex.as_ptr().cast::<sys::ibv_cq>()) };
            return Err(Error::Invalid("ibv_cq_ex_to_cq returned null".into()));
        };
        Ok(Cq {
            inner: Rc::new(CqInner {
                cq,
                ex: Some(ex),
                tm_info,
                _chan: None,
                _ctx: ctx.clone(),
            }),
        })
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_cq {
        self.inner.cq.as_ptr()
    }

    /// Whether this is an extended CQ.
    pub fn is_extended(&self) -> bool {
        self.inner.ex.is_some()
    }

    /// Polls up to `max` completions into `out`; returns how many.
    pub fn poll(&self, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        match self.inner.ex {
            None => self.poll_basic(out, max),
            Some(ex) => self.poll_ex(ex, out, max),
        }
    }

    fn poll_basic(&self, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        let mut wcs = [sys::ibv_wc::default(); 16];
        let want = c_int::try_from(max.min(wcs.len())).unwrap_or(16);
        // SAFETY: live CQ; `wcs` has room for `want` completions.
        let n = unsafe { sys::ibv_poll_cq(self.raw(), want, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(Error::Verbs {
                call: "ibv_poll_cq",
                err: std::io::Error::from_raw_os_error(-n),
            });
        }
        let n = usize::try_from(n).unwrap_or(0);
        out.extend(wcs[..n].iter().map(|w| Wc {
            wr_id: w.wr_id,
            status: w.status,
            opcode: w.opcode,
            byte_len: w.byte_len,
            qp_num: w.qp_num,
            wc_flags: w.wc_flags,
            tm: None,
        }));
        Ok(n)
    }

    fn poll_ex(&self, ex: NonNull<sys::ibv_cq_ex>, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        let ex = ex.as_ptr();
        let mut attr = sys::ibv_poll_cq_attr::default();
        // SAFETY: live extended CQ; a successful start_poll is always paired with end_poll.
        let rc = unsafe { sys::ibv_start_poll(ex, &mut attr) };
        if rc == libc_enoent() {
            return Ok(0);
        }
        check_rc("ibv_start_poll", rc)?;
        let mut n = 0;
        loop {
            // SAFETY: between start_poll and end_poll the current completion is readable;
            // only fields requested at creation (byte_len, qp_num, tm_info) are read.
            let wc = unsafe {
                let tm = self.inner.tm_info.then(|| {
                    let mut info = sys::ibv_wc_tm_info::default();
                    sys::ibv_wc_read_tm_info(ex, &mut info);
                    (info.tag, info.priv_)
                });
                Wc {
                    wr_id: (*ex).wr_id,
                    status: (*ex).status,
                    opcode: sys::ibv_wc_read_opcode(ex),
                    byte_len: sys::ibv_wc_read_byte_len(ex),
                    qp_num: sys::ibv_wc_read_qp_num(ex),
                    wc_flags: sys::ibv_wc_read_wc_flags(ex),
                    tm,
                }
            };
            out.push(wc);
            n += 1;
            if n >= max {
                break;
            }
            // SAFETY: inside a started poll.
            let rc = unsafe { sys::ibv_next_poll(ex) };
            if rc != 0 {
                break;
            }
        }
        // SAFETY: ends the poll started above.
        unsafe { sys::ibv_end_poll(ex) };
        Ok(n)
    }
}

const fn libc_enoent() -> c_int {
    2
}

/// Kind of shared receive queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqKind {
    /// A plain SRQ (`IBV_SRQT_BASIC`).
    Basic,
    /// A tag-matching SRQ (`IBV_SRQT_TM`) with its capacities.
    Tm {
        /// Tagged buffers.
        max_num_tags: u32,
        /// Outstanding list operations.
        max_ops: u32,
    },
}

struct SrqInner {
    srq: NonNull<sys::ibv_srq>,
    kind: SrqKind,
    _cq: Option<Cq>,
    _pd: Pd,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_srq_ex, destroyed exactly once; QPs attached to it
        // hold an `Rc` of it and were destroyed first.
        destroyed("ibv_destroy_srq", unsafe {
            sys::ibv_destroy_srq(self.srq.as_ptr())
        });
    }
}

/// A shared receive queue, basic or tag-matching. Cloning shares it.
#[derive(Clone)]
pub struct Srq {
    inner: Rc<SrqInner>,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq")
            .field("kind", &self.inner.kind)
            .finish_non_exhaustive()
    }
}

impl Srq {
    /// A basic SRQ of `max_wr` single-SGE receives.
    pub fn basic(pd: &Pd, max_wr: u32) -> Result<Srq> {
        let mut attr = sys::ibv_srq_init_attr_ex {
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge: 1,
                srq_limit: 0,
            },
            comp_mask: sys::IBV_SRQ_INIT_ATTR_TYPE | sys::IBV_SRQ_INIT_ATTR_PD,
            srq_type: sys::IBV_SRQT_BASIC,
            pd: pd.raw(),
            ..Default::default()
        };
        // SAFETY: live context and PD; valid attribute struct.
        let srq = unsafe { sys::ibv_create_srq_ex(pd.context().raw(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| last_os_error("ibv_create_srq_ex(BASIC)"))?;
        Ok(Srq {
            inner: Rc::new(SrqInner {
                srq,
                kind: SrqKind::Basic,
                _cq: None,
                _pd: pd.clone(),
            }),
        })
    }

    /// A tag-matching SRQ completing on `cq` (which should be extended with TM info).
    /// Devices without tag matching refuse (`Err`, typically `EOPNOTSUPP`/`EINVAL`).
    pub fn tm(pd: &Pd, cq: &Cq, max_wr: u32, max_num_tags: u32, max_ops: u32) -> Result<Srq> {
        let mut attr = sys::ibv_srq_init_attr_ex {
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge: 1,
                srq_limit: 0,
            },
            comp_mask: sys::IBV_SRQ_INIT_ATTR_TYPE
                | sys::IBV_SRQ_INIT_ATTR_PD
                | sys::IBV_SRQ_INIT_ATTR_CQ
                | sys::IBV_SRQ_INIT_ATTR_TM,
            srq_type: sys::IBV_SRQT_TM,
            pd: pd.raw(),
            cq: cq.raw(),
            tm_cap: sys::ibv_tm_cap {
                max_num_tags,
                max_ops,
            },
            ..Default::default()
        };
        // SAFETY: live context, PD and CQ; valid attribute struct.
        let srq = unsafe { sys::ibv_create_srq_ex(pd.context().raw(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| last_os_error("ibv_create_srq_ex(TM)"))?;
        Ok(Srq {
            inner: Rc::new(SrqInner {
                srq,
                kind: SrqKind::Tm {
                    max_num_tags,
                    max_ops,
                },
                _cq: Some(cq.clone()),
                _pd: pd.clone(),
            }),
        })
    }

    /// The kind.
    pub fn kind(&self) -> SrqKind {
        self.inner.kind
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_srq {
        self.inner.srq.as_ptr()
    }

    /// Posts one receive of `sge` (which must stay registered and unused until its
    /// completion: the transport guarantees that for its pools).
    pub(crate) fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<()> {
        post_one_recv(wr_id, sge, "ibv_post_srq_recv", |wr, bad| {
            // SAFETY: live SRQ; `wr` and its SGE are valid for the call (the provider copies
            // them); the buffer stays registered until the SRQ is destroyed or the
            // completion.
            unsafe { sys::ibv_post_srq_recv(self.raw(), wr, bad) }
        })
    }

    /// `ibv_post_srq_ops` of one work request.
    pub(crate) fn post_op(&self, wr: &mut sys::ibv_ops_wr) -> Result<()> {
        let mut bad = ptr::null_mut();
        // SAFETY: live TM-SRQ; `wr` (and the SGE it may point to) is valid for the call.
        let rc = unsafe { sys::ibv_post_srq_ops(self.raw(), wr, &mut bad) };
        check_rc("ibv_post_srq_ops", rc)
    }
}

/// What a peer needs to connect to a QP (exchanged over the side channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// QP number.
    pub qpn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// GID (RoCE).
    pub gid: [u8; 16],
    /// Initial packet sequence number.
    pub psn: u32,
}

struct QpInner {
    qp: NonNull<sys::ibv_qp>,
    _send_cq: Cq,
    _recv_cq: Cq,
    _srq: Option<Srq>,
    pd: Pd,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_qp, destroyed exactly once, before its CQs, SRQ and
        // PD (held by this struct).
        destroyed("ibv_destroy_qp", unsafe {
            sys::ibv_destroy_qp(self.qp.as_ptr())
        });
    }
}

/// An RC queue pair.
pub struct Qp {
    inner: QpInner,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp").field("qpn", &self.qpn()).finish()
    }
}

/// Send queue depth and read depth of an RC QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// `max_send_wr`.
    pub max_send_wr: u32,
    /// Receive queue depth when there is no SRQ.
    pub max_recv_wr: u32,
    /// Outstanding RDMA reads (initiator and responder).
    pub max_rd_atomic: u8,
}

impl Qp {
    /// An RC QP sending on `send_cq`, receiving on `recv_cq`, with receives from `srq` when
    /// given.
    pub fn rc(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, srq: Option<&Srq>, caps: QpCaps) -> Result<Qp> {
        Qp::create(
            pd,
            send_cq,
            recv_cq,
            srq,
            caps,
            sys::IBV_QPT_RC,
            "ibv_create_qp(RC)",
        )
    }

    fn create(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: Option<&Srq>,
        caps: QpCaps,
        qp_type: sys::ibv_qp_type,
        call: &'static str,
    ) -> Result<Qp> {
        let mut attr = sys::ibv_qp_init_attr {
            send_cq: send_cq.raw(),
            recv_cq: recv_cq.raw(),
            srq: srq.map_or(ptr::null_mut(), Srq::raw),
            cap: sys::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: if srq.is_some() { 0 } else { caps.max_recv_wr },
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type,
            sq_sig_all: 0,
            ..Default::default()
        };
        // SAFETY: live PD, CQs and SRQ; valid attribute struct.
        let qp = unsafe { sys::ibv_create_qp(pd.raw(), &mut attr) };
        let qp = NonNull::new(qp).ok_or_else(|| last_os_error(call))?;
        Ok(Qp {
            inner: QpInner {
                qp,
                _send_cq: send_cq.clone(),
                _recv_cq: recv_cq.clone(),
                _srq: srq.cloned(),
                pd: pd.clone(),
            },
        })
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: the QP is live while `self` is.
        unsafe { (*self.inner.qp.as_ptr()).qp_num }
    }

    /// A UD QP (datagrams addressed by [`Ah`], QP number and qkey) sending on `send_cq`,
    /// receiving on `recv_cq` into its own receive queue of `caps.max_recv_wr` entries.
    /// Receive buffers must leave [`UD_GRH_LEN`] bytes in front of the payload for the GRH.
    pub fn ud(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Qp> {
        Qp::create(
            pd,
            send_cq,
            recv_cq,
            None,
            caps,
            sys::IBV_QPT_UD,
            "ibv_create_qp(UD)",
        )
    }

    /// Moves a UD QP through INIT (port, P_Key index 0, `qkey`), RTR and RTS.
    pub fn activate_ud(&self, qkey: u32) -> Result<()> {
        let caps = self.inner.pd.context().caps();
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: caps.port,
            qkey,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE | sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_QKEY,
            "ibv_modify_qp(UD INIT)",
        )?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            ..Default::default()
        };
        self.modify(&mut attr, sys::IBV_QP_STATE, "ibv_modify_qp(UD RTR)")?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            sq_psn: 0,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE | sys::IBV_QP_SQ_PSN,
            "ibv_modify_qp(UD RTS)",
        )
    }

    /// Posts one receive of `sge` on the QP's own receive queue (a QP without SRQ). Same
    /// rule as [`Srq::post_recv`]: the buffer stays registered and unused until its
    /// completion.
    pub(crate) fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<()> {
        post_one_recv(wr_id, sge, "ibv_post_recv", |wr, bad| {
            // SAFETY: live QP; `wr` and its SGE are valid for the call (the provider copies
            // them); the buffer stays registered until the QP is destroyed or the completion.
            unsafe { sys::ibv_post_recv(self.inner.qp.as_ptr(), wr, bad) }
        })
    }

    /// Posts a signaled UD SEND of `sge` to QP `remote_qpn` (qkey `remote_qkey`) behind
    /// `ah`. Same rule as [`Qp::post_send`].
    pub(crate) fn post_send_ud(
        &self,
        wr_id: u64,
        sge: Sge,
        ah: &Ah,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> Result<()> {
        let mut sge = sge.raw();
        let mut wr = sys::ibv_send_wr {
            wr_id,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: sys::IBV_WR_SEND,
            send_flags: sys::IBV_SEND_SIGNALED,
            ..Default::default()
        };
        wr.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: ah.ah.as_ptr(),
            remote_qpn,
            remote_qkey,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: live QP and address handle (borrowed for the call; the provider copies the
        // work request and resolves the AH before returning); `sge` as in `post`.
        let rc = unsafe { sys::ibv_post_send(self.inner.qp.as_ptr(), &mut wr, &mut bad) };
        check_rc("ibv_post_send(UD)", rc)
    }

    /// This side's endpoint with initial PSN `psn`.
    pub fn endpoint(&self, psn: u32) -> QpEndpoint {
        let caps = self.inner.pd.context().caps();
        QpEndpoint {
            qpn: self.qpn(),
            lid: caps.lid,
            gid: caps.gid,
            psn: psn & 0x00ff_ffff,
        }
    }

    fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32, call: &'static str) -> Result<()> {
        let mask = c_int::try_from(mask).map_err(|_| Error::Invalid("qp attr mask".into()))?;
        // SAFETY: live QP and a valid attribute struct.
        let rc = unsafe { sys::ibv_modify_qp(self.inner.qp.as_ptr(), attr, mask) };
        check_rc(call, rc)
    }

    /// Moves the QP through INIT, RTR and RTS towards `remote`.
    pub fn connect(&self, local: &QpEndpoint, remote: &QpEndpoint, rd_atomic: u8) -> Result<()> {
        let ctx = self.inner.pd.context();
        let caps = ctx.caps();
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: caps.port,
            qp_access_flags: sys::IBV_ACCESS_LOCAL_WRITE
                | sys::IBV_ACCESS_REMOTE_WRITE
                | sys::IBV_ACCESS_REMOTE_READ,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE
                | sys::IBV_QP_PKEY_INDEX
                | sys::IBV_QP_PORT
                | sys::IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            path_mtu: ctx.active_mtu_enum(),
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: rd_atomic,
            min_rnr_timer: 12,
            ..Default::default()
        };
        attr.ah_attr.port_num = caps.port;
        attr.ah_attr.dlid = remote.lid;
        if caps.ethernet || remote.lid == 0 {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = remote.gid;
            attr.ah_attr.grh.sgid_index = caps.gid_index;
            attr.ah_attr.grh.hop_limit = 1;
        }
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE
                | sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER,
            "ibv_modify_qp(RTR)",
        )?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: local.psn,
            max_rd_atomic: rd_atomic,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTS)",
        )
    }

    /// Posts a signaled SEND of `sge`. The memory must stay registered and unchanged until
    /// the completion (the transport's send pool and owned regions guarantee it).
    pub(crate) fn post_send(&self, wr_id: u64, sge: Sge) -> Result<()> {
        self.post(wr_id, sys::IBV_WR_SEND, sge, None)
    }

    /// Posts a signaled RDMA READ of `remote` into `sge` (same rule as
    /// [`Qp::post_send`], and nothing may read the destination before the completion).
    pub(crate) fn post_read(&self, wr_id: u64, sge: Sge, remote: RemoteBuf) -> Result<()> {
        self.post(wr_id, sys::IBV_WR_RDMA_READ, sge, Some(remote))
    }

    fn post(
        &self,
        wr_id: u64,
        opcode: sys::ibv_wr_opcode,
        sge: Sge,
        remote: Option<RemoteBuf>,
    ) -> Result<()> {
        let mut sge = sge.raw();
        let mut wr = sys::ibv_send_wr {
            wr_id,
            sg_list: &mut sge,
            num_sge: 1,
            opcode,
            send_flags: sys::IBV_SEND_SIGNALED,
            ..Default::default()
        };
        if let Some(r) = remote {
            wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: r.va,
                rkey: r.rkey,
            };
        }
        let mut bad = ptr::null_mut();
        // SAFETY: live QP; `wr` and `sge` are valid for the call (the provider copies them).
        let rc = unsafe { sys::ibv_post_send(self.inner.qp.as_ptr(), &mut wr, &mut bad) };
        check_rc("ibv_post_send", rc)
    }
}

/// Builds a one-SGE receive work request for `sge` and hands it to `post`
/// (`ibv_post_recv` or `ibv_post_srq_recv`).
fn post_one_recv(
    wr_id: u64,
    sge: Sge,
    call: &'static str,
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> c_int,
) -> Result<()> {
    let mut sge = sge.raw();
    let mut wr = sys::ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = ptr::null_mut();
    check_rc(call, post(&mut wr, &mut bad))
}

/// Bytes of Global Routing Header in front of every UD receive (`struct ibv_grh`).
pub const UD_GRH_LEN: usize = 40;

/// An address handle (`ibv_ah`): the path to one remote port, for UD sends.
pub struct Ah {
    ah: NonNull<sys::ibv_ah>,
    _pd: Pd,
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ah").finish_non_exhaustive()
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah, destroyed exactly once, before its PD (held).
        destroyed("ibv_destroy_ah", unsafe {
            sys::ibv_destroy_ah(self.ah.as_ptr())
        });
    }
}

impl Pd {
    /// An address handle towards the port with GID `gid` (RoCE) or LID `lid` (InfiniBand)
    /// on this device's port.
    pub fn create_ah(&self, gid: &[u8; 16], lid: u16) -> Result<Ah> {
        let caps = self.context().caps();
        let mut attr = sys::ibv_ah_attr {
            dlid: lid,
            port_num: caps.port,
            ..Default::default()
        };
        if caps.ethernet || lid == 0 {
            attr.is_global = 1;
            attr.grh.dgid.raw = *gid;
            attr.grh.sgid_index = caps.gid_index;
            attr.grh.hop_limit = 1;
        }
        // SAFETY: live PD; valid attribute struct (copied by the provider).
        let ah = unsafe { sys::ibv_create_ah(self.raw(), &mut attr) };
        let ah = NonNull::new(ah).ok_or_else(|| last_os_error("ibv_create_ah"))?;
        Ok(Ah {
            ah,
            _pd: self.clone(),
        })
    }
}

struct ChanInner {
    ch: NonNull<sys::ibv_comp_channel>,
    _ctx: Context,
}

impl Drop for ChanInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel, destroyed exactly once, after every CQ
        // using it (each holds this handle) and before its context (held).
        destroyed("ibv_destroy_comp_channel", unsafe {
            sys::ibv_destroy_comp_channel(self.ch.as_ptr())
        });
    }
}

/// A completion channel (`ibv_comp_channel`): a file descriptor that becomes readable when
/// an armed CQ of the channel gets a completion.
#[derive(Clone)]
pub struct CompChannel {
    inner: Rc<ChanInner>,
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl CompChannel {
    /// A channel on `ctx`.
    pub fn new(ctx: &Context) -> Result<CompChannel> {
        // SAFETY: live context.
        let ch = unsafe { sys::ibv_create_comp_channel(ctx.raw()) };
        let ch = NonNull::new(ch).ok_or_else(|| last_os_error("ibv_create_comp_channel"))?;
        Ok(CompChannel {
            inner: Rc::new(ChanInner {
                ch,
                _ctx: ctx.clone(),
            }),
        })
    }

    /// The channel's file descriptor (readable when an event is pending).
    pub fn fd(&self) -> std::os::fd::RawFd {
        // SAFETY: the channel is live while `self` is; `fd` is a plain field.
        unsafe { (*self.inner.ch.as_ptr()).fd }
    }

    /// A duplicate of the channel's descriptor, for a thread that only polls it (see
    /// [`crate::watch`]); the events are still taken through this channel.
    pub fn duplicate_fd(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        // SAFETY: the fd belongs to the live channel and stays open for this call; the
        // duplicate is an independent descriptor of the same file.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) };
        fd.try_clone_to_owned()
    }

    /// Waits at most `timeout` (`None`: without limit) for the channel's fd to become
    /// readable, then takes and acknowledges the pending event, if any. Returns whether
    /// there was one. `EINTR` counts as no event.
    pub fn wait(&self, timeout: Option<std::time::Duration>) -> Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let t = match timeout {
            None => PollTimeout::NONE,
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        // SAFETY: the fd belongs to the live channel and stays open for this call.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) };
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, t) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(false),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Verbs {
                    call: "poll(comp_channel)",
                    err: std::io::Error::from_raw_os_error(e as i32),
                })
            }
        }
        let mut cq = ptr::null_mut();
        let mut cq_ctx = ptr::null_mut();
        // SAFETY: live channel; the fd is readable, so the call returns at once with the
        // event's CQ (one of ours, alive: it holds this channel).
        let rc = unsafe { sys::ibv_get_cq_event(self.inner.ch.as_ptr(), &mut cq, &mut cq_ctx) };
        check_rc("ibv_get_cq_event", rc)?;
        // SAFETY: `cq` is the live CQ the event came from; one event taken, one acked (so
        // that destroying the CQ never waits for unacknowledged events).
        unsafe { sys::ibv_ack_cq_events(cq, 1) };
        Ok(true)
    }
}
