//! Device-level test helpers (included with `mod devmem;`): the endpoint's memory as a
//! plain map, and a registration made and awaited at once (both devices answer a
//! `Register` with `RegisterDone` before `submit` returns).
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use tagmatch_rdm::{MemHandle, MrKey, Transmit};
use tagmatch_transport::{DeviceEvent, MemoryAccess, RdmDevice};

/// The endpoint memory a device reads and writes: regions by handle.
#[derive(Default)]
pub struct Mem(pub HashMap<MemHandle, Vec<u8>>);

impl MemoryAccess for Mem {
    fn region(&self, mem: MemHandle) -> Option<&[u8]> {
        self.0.get(&mem).map(|v| &v[..])
    }
    fn region_mut(&mut self, mem: MemHandle) -> Option<&mut [u8]> {
        self.0.get_mut(&mem).map(|v| &mut v[..])
    }
}

/// Puts `bytes` in `mem` as region `h` and registers it with `dev` (`remote`: for peers,
/// or local only); its key. Panics if the device refuses or does not answer at once.
pub fn register<D: RdmDevice>(
    dev: &mut D,
    mem: &mut Mem,
    h: MemHandle,
    bytes: Vec<u8>,
    remote: bool,
) -> MrKey {
    let len = bytes.len() as u64;
    mem.0.insert(h, bytes);
    dev.submit(
        Transmit::Register {
            mem: h,
            len,
            remote,
        },
        mem,
    );
    match dev.poll_event() {
        Some(DeviceEvent::RegisterDone { result: Ok(k), .. }) => k,
        other => panic!("registration: {other:?}"),
    }
}

/// One `progress` of `a` then of `b`, each waiting at most `wait` for a datagram (the
/// step of the two-device loops). Panics on an IO error.
pub fn progress_both<D: RdmDevice>(
    a: &mut D,
    ma: &mut Mem,
    b: &mut D,
    mb: &mut Mem,
    wait: Duration,
) {
    a.progress(ma, Some(wait)).expect("progress a");
    b.progress(mb, Some(wait)).expect("progress b");
}
