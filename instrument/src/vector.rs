//! Vector registers of a stopped thread, for gather/scatter index vectors.

use iced_x86::Register;

use crate::sys::Tid;

/// `NT_X86_XSTATE`: the XSAVE area regset.
const NT_X86_XSTATE: libc::c_int = 0x202;
/// Offset of XMM0 in the legacy FXSAVE region.
const XMM_OFFSET: usize = 160;
/// Offset of the upper halves of YMM0..15 in the standard XSAVE layout.
const YMM_HI_OFFSET: usize = 576;

/// The XMM/YMM registers of one thread.
pub struct VectorRegisters {
    xsave: Vec<u8>,
    len: usize,
}

/// Reads the XSAVE area of `tid`; `None` if the kernel refuses.
pub fn read_vector_registers(tid: Tid) -> Option<VectorRegisters> {
    let mut xsave = vec![0u8; 4096];
    let mut iov = libc::iovec { iov_base: xsave.as_mut_ptr().cast(), iov_len: xsave.len() };
    // SAFETY: the kernel writes at most iov_len bytes into `xsave`.
    let r = unsafe {
        libc::ptrace(libc::PTRACE_GETREGSET, tid, NT_X86_XSTATE as libc::c_ulong, &mut iov as *mut libc::iovec)
    };
    if r == -1 {
        return None;
    }
    Some(VectorRegisters { len: iov.iov_len, xsave })
}

impl VectorRegisters {
    /// Element `index` (of `size` bytes, 4 or 8) of an XMM or YMM register,
    /// sign-extension left to the caller.
    pub fn element(&self, reg: Register, index: usize, size: usize) -> Option<u64> {
        let (n, bytes) = if reg.is_xmm() {
            (reg.number(), 16)
        } else if reg.is_ymm() {
            (reg.number(), 32)
        } else {
            return None; // ZMM (AVX-512) index vectors are not read.
        };
        let offset = index.checked_mul(size)?;
        if offset + size > bytes || n >= 16 {
            return None;
        }
        let at = if offset < 16 { XMM_OFFSET + 16 * n + offset } else { YMM_HI_OFFSET + 16 * n + offset - 16 };
        let raw = self.xsave.get(at..at + size).filter(|_| at + size <= self.len)?;
        let mut word = [0u8; 8];
        word[..size].copy_from_slice(raw);
        Some(u64::from_le_bytes(word))
    }
}
