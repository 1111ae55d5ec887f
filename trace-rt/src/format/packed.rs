//! Packed events: an event in 8 bytes, as the rewrite backend's record
//! buffer holds it.
//!
//! Nearly every event a fast recorder produces is a plain
//! [`super::Event::Access`], and most others are calls and returns. The
//! rewrite backend's translated code stores each as a 16-bit *tag* above a
//! 48-bit value (an address, a stack pointer). The recorder hands runs of
//! these records to [`super::TraceWriter::push_packed`] as they are, with a
//! table saying what each tag stands for ([`PackedKind`]), and the writer
//! encodes them in one tight loop: no [`super::Event`] is built, copied or
//! read back in between, and a comparator's call and return cost what an
//! access costs.

use super::SiteId;

/// Bits of a packed record's value; the tag is in the bits above.
pub const PACKED_ADDRESS_BITS: u32 = 48;

/// What the packed records of one tag stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackedKind {
    /// [`super::Event::Access`] of this site; the value is the address. The
    /// second field is how many accesses it implies ([`super::Site::implied`]),
    /// counted in [`PackedRun::implied`].
    Access(SiteId, u8),
    /// [`super::Event::Call`] from `callsite` to `target`; the value is the
    /// stack pointer after the call.
    Call {
        /// Address of the call instruction.
        callsite: u64,
        /// Address called.
        target: u64,
    },
    /// [`super::Event::Call`] from `callsite` to an address the next record
    /// holds, of kind [`PackedKind::CallTarget`]; the value is the stack
    /// pointer after the call.
    IndirectCall {
        /// Address of the call instruction.
        callsite: u64,
    },
    /// The address an [`PackedKind::IndirectCall`] just before called.
    CallTarget,
    /// [`super::Event::Return`]; the value is the stack pointer after it.
    Return,
    /// None of these: a run of packed events ends before such a record
    /// (and before an indirect call whose target record is not in the run,
    /// or a target record that follows no indirect call).
    Other,
}

/// How a run of packed events went ([`super::TraceWriter::push_packed`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackedRun {
    /// Records taken, from the start.
    pub taken: usize,
    /// How many of them were calls, their targets or returns (the rest
    /// are accesses).
    pub flow: usize,
    /// The call site of the last call taken, if one was.
    pub last_callsite: Option<u64>,
    /// Accesses the accesses taken imply (the readers hand them out).
    pub implied: usize,
}

/// Splits a packed access (or any 64-bit record of that layout) into its
/// 16-bit tag and its address. The address is sign-extended from 48 bits,
/// so the kernel half of the address space (the vsyscall page) and small
/// negative values survive.
#[inline(always)]
pub fn unpack_access(packed: u64) -> (u16, u64) {
    let tag = (packed >> PACKED_ADDRESS_BITS) as u16;
    let addr = ((packed << (64 - PACKED_ADDRESS_BITS)) as i64 >> (64 - PACKED_ADDRESS_BITS)) as u64;
    (tag, addr)
}

/// Packs `addr` (its low 48 bits) under `tag`: the inverse of
/// [`unpack_access`] for addresses that survive the sign extension.
#[inline(always)]
pub fn pack_access(tag: u16, addr: u64) -> u64 {
    u64::from(tag) << PACKED_ADDRESS_BITS | (addr & ((1 << PACKED_ADDRESS_BITS) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_keeps_user_and_kernel_half_addresses() {
        for addr in [0, 0x1000, 0x7fff_ffff_f000, 0xffff_ffff_ff60_0000, u64::MAX] {
            assert_eq!(unpack_access(pack_access(0xabcd, addr)), (0xabcd, addr), "{addr:#x}");
        }
        assert_ne!(unpack_access(pack_access(1, 0x0001_0000_0000_0000)).1, 0x0001_0000_0000_0000, "above 48 bits");
    }
}
