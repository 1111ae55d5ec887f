//! Memory shared with the target: a memfd the target creates (through
//! system calls linetrace makes on its behalf) and maps, which linetrace
//! maps too. Translations written here are at once in the target's code
//! cache; records the target writes are at once readable here, and stay
//! readable after the target died.

use std::fs::OpenOptions;

use memmap2::MmapMut;

use crate::InstrumentError;
use crate::error::ptrace_err;
use crate::inject;
use crate::sys::{self, Tid};

const SYS_CLOSE: u64 = 3;
const SYS_MMAP: u64 = 9;
const SYS_MPROTECT: u64 = 10;
const SYS_MEMFD_CREATE: u64 = 319;
/// Where a region that need not be near code goes: 32 TiB, between the
/// executable (at 0x5555_5555_4000 without ASLR, 0x55.. or 0x56.. with)
/// and the libraries (below 0x7fff_ffff_f000).
const FAR_AWAY: u64 = 0x2000_0000_0000;

/// A memory region mapped in the target and here.
pub struct SharedRegion {
    /// Its address in the target.
    pub remote: u64,
    local: MmapMut,
}

fn failed(what: &'static str, ret: u64) -> Option<InstrumentError> {
    let err = ret as i64;
    ((-4096..0).contains(&err))
        .then(|| InstrumentError::Ptrace { what, cause: std::io::Error::from_raw_os_error(-err as i32) })
}

impl SharedRegion {
    /// Creates a region of `len` bytes in process `pid` through its stopped
    /// thread `tid`, mapped with `prot` there; within rip-relative reach of
    /// `near` if given.
    pub fn create(pid: Tid, tid: Tid, len: u64, prot: i32, near: Option<u64>) -> Result<Self, InstrumentError> {
        // memfd_create wants a name in the target's memory: a few bytes of
        // its stack far below the red zone, where nothing live can be.
        let regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
        let name_at = (regs.rsp - 4096) & !7;
        let saved = sys::peek(tid, name_at).map_err(ptrace_err("reading the target's stack"))?;
        sys::poke(tid, name_at, u64::from_le_bytes(*b"lntrace\0")).map_err(ptrace_err("writing the target's stack"))?;
        let fd = inject::syscall(pid, tid, SYS_MEMFD_CREATE, [name_at, libc::MFD_CLOEXEC as u64, 0, 0, 0, 0]);
        let _ = sys::poke(tid, name_at, saved);
        let fd = fd?;
        if let Some(e) = failed("creating shared memory in the target", fd) {
            return Err(e);
        }
        let result = Self::map(pid, tid, fd, len, prot, near);
        let _ = inject::syscall(pid, tid, SYS_CLOSE, [fd, 0, 0, 0, 0, 0]);
        result
    }

    fn map(pid: Tid, tid: Tid, fd: u64, len: u64, prot: i32, near: Option<u64>) -> Result<Self, InstrumentError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/fd/{fd}"))
            .map_err(ptrace_err("opening the target's shared memory"))?;
        // The memfd is one file however opened: sized from here, it costs
        // no system call made through the target.
        file.set_len(len).map_err(ptrace_err("sizing the target's shared memory"))?;
        // SAFETY: the file is a memfd only linetrace and the target map; the
        // target writes records into it concurrently, which is why records
        // are only read between a stop of the writing thread and its resume.
        let local = unsafe { MmapMut::map_mut(&file) }.map_err(ptrace_err("mapping the target's shared memory"))?;
        // Without a place to be near: far from everything the program
        // grows into (the mmap area below the libraries, the brk heap above
        // the executable), so that its own mappings land where they would
        // natively; anywhere if that is taken.
        let spots = match near {
            Some(near) => inject::free_spots_near(pid, near, len)?,
            None => vec![FAR_AWAY, 0],
        };
        for spot in spots {
            let mut flags = libc::MAP_SHARED as u64;
            if spot != 0 {
                flags |= libc::MAP_FIXED_NOREPLACE as u64;
            }
            let got = inject::syscall(pid, tid, SYS_MMAP, [spot, len, prot as u64, flags, fd, 0])?;
            if failed("", got).is_none() && (spot == 0 || got == spot) {
                return Ok(SharedRegion { remote: got, local });
            }
        }
        Err(InstrumentError::Ptrace {
            what: "placing a code cache within 2 GiB of the code it translates",
            cause: std::io::Error::from(std::io::ErrorKind::AddrNotAvailable),
        })
    }

    /// Makes `len` bytes at `offset` inaccessible in the target.
    pub fn protect_none(&self, pid: Tid, tid: Tid, offset: u64, len: u64) -> Result<(), InstrumentError> {
        let ret =
            inject::syscall(pid, tid, SYS_MPROTECT, [self.remote + offset, len, libc::PROT_NONE as u64, 0, 0, 0])?;
        match failed("protecting the record buffer's guard page", ret) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Bytes of the region (never 0).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.local.len()
    }

    /// The region's bytes, as linetrace sees them.
    pub fn bytes(&self) -> &[u8] {
        &self.local
    }

    /// The region's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.local
    }

    /// The 8-byte word at `offset`.
    pub fn word(&self, offset: u64) -> u64 {
        let o = offset as usize;
        self.local.get(o..o + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// Sets the 8-byte word at `offset`.
    pub fn set_word(&mut self, offset: u64, value: u64) {
        let o = offset as usize;
        if let Some(b) = self.local.get_mut(o..o + 8) {
            b.copy_from_slice(&value.to_le_bytes());
        }
    }
}
