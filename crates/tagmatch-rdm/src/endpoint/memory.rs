//! Memory regions: application and operation buffers, registration, iov scatter/gather.

use super::*;

impl Endpoint {
    /// Hands `bytes` to the endpoint as an RMA target or source and asks the device to
    /// register it ([`Transmit::Register`]). Its key is known after
    /// [`Endpoint::on_register_done`].
    pub fn register_memory(&mut self, bytes: Vec<u8>) -> MemHandle {
        self.register_memory_with(bytes, true)
    }

    /// [`Endpoint::register_memory`]; `remote: false` registers it for local use only
    /// (`FI_RECV | FI_SEND` without `FI_REMOTE_READ | FI_REMOTE_WRITE`): a destination of
    /// [`Endpoint::trecv_region`] and a source of [`Endpoint::tsend_from`], which peers
    /// cannot read or write (the device refuses their requests naming its key). Its large
    /// sends then use the long-CTS protocol (the sender pushes the data) instead of a
    /// read by the receiver; in exchange the device may receive a read's data straight
    /// into it (see [`Transmit::Register::remote`]).
    pub fn register_memory_with(&mut self, bytes: Vec<u8>, remote: bool) -> MemHandle {
        let len = bytes.len() as u64;
        let idx = self.mem.insert(Region {
            bytes,
            reg: RegState::Pending,
            owner: Owner::App,
            users: 0,
            reg_waiters: Vec::new(),
            rx_waiters: Vec::new(),
            remote,
        });
        self.out.push_back(Transmit::Register {
            mem: MemHandle(idx as u32),
            len,
            remote,
        });
        MemHandle(idx as u32)
    }

    /// The registration of a region: `None` while pending, `Some(Err(()))` if it failed.
    pub fn mem_key(&self, mem: MemHandle) -> Option<Result<MrKey, ()>> {
        match self.mem.get(mem.0 as usize)?.reg {
            RegState::Ok(k) => Some(Ok(k)),
            RegState::Failed => Some(Err(())),
            _ => None,
        }
    }

    /// The bytes of a region (the device reads RDMA sources from here).
    pub fn memory(&self, mem: MemHandle) -> Option<&[u8]> {
        self.mem.get(mem.0 as usize).map(|r| &r.bytes[..])
    }

    /// The bytes of a region, mutably (the device writes RDMA destinations here).
    pub fn memory_mut(&mut self, mem: MemHandle) -> Option<&mut [u8]> {
        self.mem.get_mut(mem.0 as usize).map(|r| &mut r.bytes[..])
    }

    /// Takes an application region back (deregistering it). `None` if there is no such
    /// application region, or if sends from it ([`Endpoint::tsend_from`]) are still in
    /// flight; [`Endpoint::try_release_memory`] tells the two apart.
    pub fn release_memory(&mut self, mem: MemHandle) -> Option<Vec<u8>> {
        self.try_release_memory(mem).ok()
    }

    /// Takes an application region back (deregistering it).
    ///
    /// Releasing a region that sends ([`Endpoint::tsend_from`], [`Endpoint::send_from`])
    /// still use is *refused* with [`CallError::MemInUse`] and changes nothing: the receiver
    /// may still RDMA-read it, and CTS windows still copy from it. So is releasing one that
    /// receives ([`Endpoint::trecv_region`], [`Endpoint::mrecv_region`]) or holds
    /// ([`Endpoint::hold_memory`]) still use: a message may still land there. Release it
    /// after those complete ([`Endpoint::mem_users`] counts them).
    pub fn try_release_memory(&mut self, mem: MemHandle) -> Result<Vec<u8>, CallError> {
        match self.mem.get(mem.0 as usize) {
            Some(r) if r.owner == Owner::App => {
                if r.users > 0 {
                    return Err(CallError::MemInUse);
                }
            }
            _ => return Err(CallError::UnknownMem),
        }
        Ok(self.free_region(mem.0 as usize))
    }

    /// Counts one more user of bytes `offset..offset + len` of application region `mem`
    /// (a receive held outside this endpoint, such as the facade's in-process fast path,
    /// that will write there): [`Endpoint::try_release_memory`] refuses while it is
    /// counted. [`Endpoint::unhold_memory`] undoes it.
    pub fn hold_memory(&mut self, mem: MemHandle, offset: u64, len: u64) -> Result<(), CallError> {
        let idx = mem.0 as usize;
        match self.mem.get_mut(idx) {
            Some(r) if r.owner == Owner::App => match offset.checked_add(len) {
                Some(end) if end <= r.bytes.len() as u64 => {
                    r.users += 1;
                    Ok(())
                }
                _ => Err(CallError::MemRange),
            },
            _ => Err(CallError::UnknownMem),
        }
    }

    /// Undoes one [`Endpoint::hold_memory`].
    pub fn unhold_memory(&mut self, mem: MemHandle) {
        if let Some(r) = self.mem.get_mut(mem.0 as usize) {
            if r.owner == Owner::App {
                r.users = r.users.saturating_sub(1);
            }
        }
    }

    /// Sends from an application region, receives into it ([`Endpoint::trecv_region`])
    /// and holds on it ([`Endpoint::hold_memory`]) not completed yet (`None`: no such
    /// application region).
    pub fn mem_users(&self, mem: MemHandle) -> Option<u32> {
        match self.mem.get(mem.0 as usize) {
            Some(r) if r.owner == Owner::App => Some(r.users),
            _ => None,
        }
    }

    /// The region registered under `key` and the address of its first byte.
    /// `None` for a region registered local-only ([`Endpoint::register_memory_with`]):
    /// peers cannot reach it with its key.
    pub fn mem_by_key(&self, key: u64) -> Option<(MemHandle, u64)> {
        let idx = *self.mr_by_key.get(&key)?;
        let r = self.mem.get(idx)?;
        match r.reg {
            RegState::Ok(k) if r.remote => Some((MemHandle(idx as u32), k.addr)),
            _ => None,
        }
    }

    pub(super) fn new_region(&mut self, bytes: Vec<u8>, owner: Owner) -> usize {
        self.mem.insert(Region {
            bytes,
            reg: RegState::None,
            owner,
            users: 0,
            reg_waiters: Vec::new(),
            rx_waiters: Vec::new(),
            remote: false,
        })
    }

    pub(super) fn free_region(&mut self, idx: usize) -> Vec<u8> {
        let Some(r) = self.mem.try_remove(idx) else {
            return Vec::new();
        };
        if let RegState::Ok(k) = r.reg {
            self.mr_by_key.remove(&k.key);
            self.out.push_back(Transmit::Deregister { key: k.key });
        }
        r.bytes
    }

    /// Registers region `idx` with the device; `remote`: peers will be given its key
    /// (see [`Transmit::Register`]).
    pub(super) fn register_region(&mut self, idx: usize, remote: bool) {
        if let Some(r) = self.mem.get_mut(idx) {
            r.reg = RegState::Pending;
            r.remote = remote;
            let len = r.bytes.len() as u64;
            self.out.push_back(Transmit::Register {
                mem: MemHandle(idx as u32),
                len,
                remote,
            });
        }
    }

    /// The device finished a registration.
    pub fn on_register_done(&mut self, mem: MemHandle, result: Result<MrKey, ()>) {
        let idx = mem.0 as usize;
        let Some(r) = self.mem.get_mut(idx) else {
            // The region is gone: release the key at once.
            self.stats.unknown_tokens += 1;
            if let Ok(k) = result {
                self.out.push_back(Transmit::Deregister { key: k.key });
            }
            return;
        };
        if r.reg != RegState::Pending {
            self.stats.unknown_tokens += 1;
            return;
        }
        let owner = r.owner;
        let waiters = std::mem::take(&mut r.reg_waiters);
        let rx_waiters = std::mem::take(&mut r.rx_waiters);
        match result {
            Ok(k) => {
                r.reg = RegState::Ok(k);
                self.mr_by_key.insert(k.key, idx);
            }
            Err(()) => r.reg = RegState::Failed,
        }
        match owner {
            Owner::App => {
                // Sends from this region that reached long-read / runting-read before the
                // region's registration finished.
                for id in waiters {
                    self.tx_registered(id, result);
                }
                // Receives into this region whose long-read / runting-read data was due
                // before the registration finished.
                for id in rx_waiters {
                    match result {
                        Ok(_) => self.rx_start_reads(id),
                        Err(()) => self.rx_read_failed(id),
                    }
                }
            }
            Owner::Tx(id) => self.tx_registered(id, result),
            Owner::Rx(id) => self.rx_registered(id, result),
            // Its operation was aborted while the registration was pending: now the
            // device is done with it, it goes (deregistered if it got a key).
            Owner::Orphan => self.reap(idx),
        }
    }

    /// Resolves a remote-access iov entry against the registered regions: region index and
    /// offset, if the whole range lies in one region registered for peers' access (a
    /// local-only region is refused: peers name it in emulated reads and writes as they
    /// would to the device, which refuses them too).
    pub(super) fn resolve(&self, addr: u64, len: u64, key: u64) -> Option<(usize, usize)> {
        let idx = *self.mr_by_key.get(&key)?;
        let r = self.mem.get(idx)?;
        if !r.remote {
            return None;
        }
        let RegState::Ok(k) = r.reg else { return None };
        let off = addr.checked_sub(k.addr)?;
        let end = off.checked_add(len)?;
        (end <= r.bytes.len() as u64).then_some((idx, off as usize))
    }

    /// Writes `data` at message offset `off` of the buffer list `iov`.
    pub(super) fn scatter(&mut self, iov: &[RmaIov], mut off: u64, mut data: &[u8]) -> bool {
        for e in iov {
            if data.is_empty() {
                break;
            }
            if off >= e.len() {
                off -= e.len();
                continue;
            }
            let n = (e.len() - off).min(data.len() as u64);
            let Some(addr) = e.addr().checked_add(off) else {
                return false;
            };
            let Some((idx, o)) = self.resolve(addr, n, e.key()) else {
                return false;
            };
            self.mem[idx].bytes[o..o + n as usize].copy_from_slice(&data[..n as usize]);
            data = &data[n as usize..];
            off = 0;
        }
        data.is_empty()
    }

    /// Reads `len` bytes at message offset `off` of the buffer list `iov`.
    pub(super) fn gather(&self, iov: &[RmaIov], mut off: u64, len: u64) -> Option<Vec<u8>> {
        let mut v = Vec::with_capacity(len.min(1 << 24) as usize);
        let mut left = len;
        for e in iov {
            if left == 0 {
                break;
            }
            if off >= e.len() {
                off -= e.len();
                continue;
            }
            let n = (e.len() - off).min(left);
            let (idx, o) = self.resolve(e.addr().checked_add(off)?, n, e.key())?;
            v.extend_from_slice(&self.mem[idx].bytes[o..o + n as usize]);
            left -= n;
            off = 0;
        }
        (left == 0).then_some(v)
    }
}
