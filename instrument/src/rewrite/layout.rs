//! What the translated code and linetrace agree on: the thread block the
//! translated code reaches through the `gs` segment, and the 8-byte records
//! it appends to the thread's buffer.
//!
//! A record is a 48-bit value (an address, a stack pointer, a register) in
//! the low bytes and a 16-bit tag in the top two: user-space addresses have
//! their top 16 bits clear, so the code stores the value and then writes the
//! tag over those two bytes with one `mov word`, no shift and no flags.

use iced_x86::FlowControl;
use trace_rt::format::{AllocKind, SiteId};

/// Thread-block slots (offsets from `gs` base).
pub mod slot {
    /// First scratch register's spill slot.
    pub const SPILL_A: i64 = 0x00;
    /// Second scratch register's spill slot.
    pub const SPILL_B: i64 = 0x08;
    /// Where the next record goes.
    pub const CURSOR: i64 = 0x10;
    /// Original address an indirect transfer goes to.
    pub const TARGET: i64 = 0x18;
    /// Translated address the dispatcher jumps to.
    pub const JUMP: i64 = 0x20;
    /// Instructions executed (added per block as it starts).
    pub const COUNT: i64 = 0x28;
    /// Original return address of the allocator call in progress.
    pub const ALLOC_RETURN: i64 = 0x30;
    /// First argument of the allocator call in progress.
    pub const ALLOC_ARG0: i64 = 0x38;
    /// The dispatcher's spill slot for rcx.
    pub const SPILL_RCX: i64 = 0x40;
    /// The dispatcher's spill slot for rax.
    pub const SPILL_RAX: i64 = 0x48;
    /// A gather's or scatter's index vector, stored to read its elements
    /// (32 bytes: an XMM or YMM register).
    pub const VECTOR: i64 = 0x80;
}

/// The dispatch table: `TABLE_ENTRIES` entries of ([`table_key`] of the
/// original address, translated address), indexed by the original
/// address's low 16 bits.
pub const TABLE: i64 = 0x1000;

/// The key of `target` in the dispatch table: its complement. The lookup
/// compares without touching the flags, by `lea` of target + key + 1 and
/// `jrcxz`; and an empty entry is all zeros, the key of an address no code
/// has (all ones), so a fresh table needs no writing (1 MiB of pages a
/// thread would otherwise have made at its start, ~0.8 ms).
pub const fn table_key(target: u64) -> u64 {
    !target
}

/// Entries in the dispatch table.
pub const TABLE_ENTRIES: u64 = 1 << 16;
/// Start of the record buffer: two halves, each followed by a guard page.
/// The thread fills one half while linetrace converts the other.
pub const BUFFER: u64 = TABLE as u64 + TABLE_ENTRIES * 16;
/// Bytes of records one half holds. Small enough that the records are
/// still in the shared cache when linetrace reads them, large enough that
/// the fault that switches halves (a ptrace stop) is rare: one per 1M
/// records.
pub const HALF_BYTES: u64 = 8 << 20;
/// Where half `h` (0 or 1) of the record buffer starts.
pub const fn half(h: u64) -> u64 {
    BUFFER + h * (HALF_BYTES + 4096)
}
/// The page after half `h`, mapped without access: the store of the record
/// that would overflow faults there, and the thread moves to the other half.
pub const fn guard(h: u64) -> u64 {
    half(h) + HALF_BYTES
}
/// Bytes of the whole thread region.
pub const THREAD_REGION_BYTES: u64 = guard(1) + 4096;

/// Bits of a record's value. A record is laid out as the trace format's
/// packed access, so runs of access records go to the writer as they are.
pub const VALUE_BITS: u32 = trace_rt::format::PACKED_ADDRESS_BITS;

/// Splits a record into (tag, value); the value is sign-extended, so that a
/// system call's `-errno` result survives.
#[inline(always)]
pub fn split(record: u64) -> (u16, u64) {
    trace_rt::format::unpack_access(record)
}

/// What a record with a given tag says. The tag indexes a table linetrace
/// keeps while translating; the code only stores the number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// An access by one site; value: address.
    Access(SiteId),
    /// A rep-string operand starts; value: its first address.
    RepStart {
        /// The operand's site.
        site: SiteId,
        /// Bytes per iteration.
        size: u32,
    },
    /// A rep-string instruction starts; value: rcx.
    RepCount,
    /// Value: rflags before the rep-string instruction (its direction flag).
    RepFlags,
    /// The rep-string instruction is done; value: rcx after it.
    RepEnd,
    /// A call; value: stack pointer after it. A `Target` record follows if
    /// the call is indirect.
    Call {
        /// Address of the call instruction.
        callsite: u64,
        /// Direct target.
        target: Option<u64>,
    },
    /// A jump that may be a tail call; value: stack pointer. A `Target`
    /// record follows if the jump is indirect.
    Jump {
        /// Address of the jump.
        callsite: u64,
        /// Direct target (for a conditional branch: the taken one).
        target: Option<u64>,
        /// Its kind of control flow.
        flow: Flow,
    },
    /// The target of the preceding indirect call or jump; value: address.
    Target,
    /// A return; value: stack pointer after it.
    Return,
    /// An allocator was entered; value: its `n`-th argument (0..3).
    AllocArg {
        /// Which allocator.
        kind: AllocKind,
        /// Which argument.
        n: u8,
    },
    /// The allocator returned; value: rax.
    AllocResult,
    /// After `posix_memalign` returned: the pointer it stored.
    AllocStored,
    /// A system call starts; value: its number (rax).
    SyscallNumber {
        /// Address of the `syscall` instruction.
        pc: u64,
    },
    /// Value: the system call's `n`-th argument.
    SyscallArg(u8),
    /// The system call returned; value: rax.
    SyscallResult,
}

/// The control flow of a [`RecordKind::Jump`] (a copyable stand-in for
/// iced's enum, which is not `Hash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// `jmp` to a fixed address.
    Direct,
    /// `jcc` taken.
    Conditional,
    /// `jmp` through a register or memory.
    Indirect,
}

impl Flow {
    /// The iced flow-control kind it stands for.
    pub fn flow_control(self) -> FlowControl {
        match self {
            Flow::Direct => FlowControl::UnconditionalBranch,
            Flow::Conditional => FlowControl::ConditionalBranch,
            Flow::Indirect => FlowControl::IndirectBranch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_into_tag_and_sign_extended_value() {
        let r = 0x0007_7fff_1234_5678u64;
        assert_eq!(split(r), (7, 0x7fff_1234_5678));
        let errno = ((-12i64) as u64 & ((1 << 48) - 1)) | (3 << 48);
        assert_eq!(split(errno), (3, (-12i64) as u64));
    }

    const _: () =
        assert!(half(0).is_multiple_of(4096) && half(1).is_multiple_of(4096), "records are read as aligned u64s");
    const _: () = assert!(slot::SPILL_RAX + 8 <= slot::VECTOR && slot::VECTOR + 32 <= TABLE);
}
