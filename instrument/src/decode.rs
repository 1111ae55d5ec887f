//! Decoding instructions into what the tracer needs: memory operands with
//! their sites, control flow, and the few instructions that need special
//! handling (rep-string, `syscall`).
//!
//! Decoding (iced-x86) and instruction-info analysis happen once per distinct
//! pc; the stepping loop only evaluates the cached operands against registers.

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register,
    UsedMemory,
};
use trace_rt::format::{AccessKind, SiteId};

use crate::sys::Regs;

/// Longest x86 instruction.
pub const MAX_INSTRUCTION_LEN: usize = 15;

/// One memory operand of a decoded instruction.
#[derive(Clone, Copy, Debug)]
pub struct MemoryOperand {
    /// Address expression, as iced-x86 reports it.
    pub expr: UsedMemory,
    /// Read, write or both.
    pub kind: AccessKind,
    /// Bytes per element.
    pub size: u32,
    /// Elements (more than one only for gathers and scatters).
    pub elements: u16,
    /// Site id in the trace, assigned by the tracer.
    pub site: SiteId,
}

/// What the tracer keeps of a decoded instruction.
#[derive(Clone, Debug)]
pub struct DecodedInstruction {
    /// Length in bytes.
    pub len: u8,
    /// Control flow kind.
    pub flow: FlowControl,
    /// Target of a direct branch or call.
    pub branch_target: Option<u64>,
    /// Memory operands that are real accesses.
    pub operands: Vec<MemoryOperand>,
    /// `rep`/`repe`/`repne` string instruction: one access over the range.
    pub rep_string: bool,
    /// A `syscall` instruction.
    pub syscall: bool,
    /// The instruction itself, for the rewriter to re-encode.
    pub instr: Instruction,
}

/// Decodes the instruction at `pc` from `bytes` (which start at `pc`).
/// Returns `None` for undecodable bytes.
pub fn decode(bytes: &[u8], pc: u64, factory: &mut InstructionInfoFactory) -> Option<DecodedInstruction> {
    let mut decoder = Decoder::with_ip(64, bytes, pc, DecoderOptions::NONE);
    let instr = decoder.decode();
    if instr.is_invalid() {
        return None;
    }
    let operands = if is_non_access(instr.mnemonic()) {
        Vec::new()
    } else {
        factory
            .info(&instr)
            .used_memory()
            .iter()
            .filter_map(|m| {
                let kind = match m.access() {
                    OpAccess::Read | OpAccess::CondRead => AccessKind::Read,
                    OpAccess::Write | OpAccess::CondWrite => AccessKind::Write,
                    OpAccess::ReadWrite | OpAccess::ReadCondWrite => AccessKind::Modify,
                    _ => return None,
                };
                let (mut size, elements) = element_layout(&instr, m);
                if size == 0 {
                    // iced reports `rep movs` and friends with an unknown
                    // size (the range varies); the element size is the
                    // instruction's.
                    size = instr.memory_size().size() as u32;
                }
                Some(MemoryOperand { expr: *m, kind, size, elements, site: 0 })
            })
            .collect()
    };
    let rep_string = (instr.has_rep_prefix() || instr.has_repne_prefix()) && is_string_instruction(&instr);
    let branch_target = match instr.flow_control() {
        FlowControl::Call | FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
            Some(instr.near_branch_target()).filter(|&t| t != 0)
        }
        _ => None,
    };
    // iced files `syscall`/`sysenter` under calls and `sysret`/`iret` under
    // returns; for the call tree only real calls and returns make frames.
    let flow = match instr.flow_control() {
        FlowControl::Call if instr.mnemonic() != Mnemonic::Call => FlowControl::Next,
        FlowControl::Return if !matches!(instr.mnemonic(), Mnemonic::Ret | Mnemonic::Retf) => FlowControl::Next,
        other => other,
    };
    Some(DecodedInstruction {
        len: instr.len() as u8,
        flow,
        branch_target,
        operands,
        rep_string,
        syscall: instr.mnemonic() == Mnemonic::Syscall,
        instr,
    })
}

/// Instructions whose memory operand is not a data access: address
/// arithmetic, hint nops, prefetches and cache-control instructions.
fn is_non_access(m: Mnemonic) -> bool {
    matches!(
        m,
        Mnemonic::Lea
            | Mnemonic::Nop
            | Mnemonic::Prefetch
            | Mnemonic::Prefetchnta
            | Mnemonic::Prefetcht0
            | Mnemonic::Prefetcht1
            | Mnemonic::Prefetcht2
            | Mnemonic::Prefetchw
            | Mnemonic::Prefetchwt1
            | Mnemonic::Prefetchit0
            | Mnemonic::Prefetchit1
            | Mnemonic::Clflush
            | Mnemonic::Clflushopt
            | Mnemonic::Clwb
            | Mnemonic::Cldemote
    )
}

/// String instructions address memory through rSI/rDI implicitly.
fn is_string_instruction(instr: &Instruction) -> bool {
    (0..instr.op_count()).any(|i| {
        matches!(
            instr.op_kind(i),
            OpKind::MemorySegSI
                | OpKind::MemorySegESI
                | OpKind::MemorySegRSI
                | OpKind::MemorySegDI
                | OpKind::MemorySegEDI
                | OpKind::MemorySegRDI
                | OpKind::MemoryESDI
                | OpKind::MemoryESEDI
                | OpKind::MemoryESRDI
        )
    })
}

/// Bytes per element and element count of a memory operand. Only VSIB
/// (gather/scatter) operands have several elements: as many as both the data
/// register and the index register hold.
fn element_layout(instr: &Instruction, m: &UsedMemory) -> (u32, u16) {
    let ms = m.memory_size();
    if m.vsib_size() == 0 {
        return (ms.size() as u32, 1);
    }
    let elem = ms.element_size().max(1);
    let data_reg = (0..instr.op_count())
        .map(|i| (instr.op_kind(i), instr.op_register(i)))
        .find(|(k, r)| *k == OpKind::Register && r.is_vector_register())
        .map(|(_, r)| r.size())
        .unwrap_or(16);
    let index_elems = m.index().size() / m.vsib_size() as usize;
    ((elem) as u32, (data_reg / elem).min(index_elems).max(1) as u16)
}

/// Value of a general-purpose register (any width) from the register file.
#[inline]
pub fn gpr_value(regs: &Regs, reg: Register) -> Option<u64> {
    let full = match reg.full_register() {
        Register::RAX => regs.rax,
        Register::RBX => regs.rbx,
        Register::RCX => regs.rcx,
        Register::RDX => regs.rdx,
        Register::RSI => regs.rsi,
        Register::RDI => regs.rdi,
        Register::RBP => regs.rbp,
        Register::RSP => regs.rsp,
        Register::R8 => regs.r8,
        Register::R9 => regs.r9,
        Register::R10 => regs.r10,
        Register::R11 => regs.r11,
        Register::R12 => regs.r12,
        Register::R13 => regs.r13,
        Register::R14 => regs.r14,
        Register::R15 => regs.r15,
        Register::RIP => regs.rip,
        _ => return None,
    };
    Some(match reg.size() {
        8 => full,
        4 => full & 0xffff_ffff,
        2 => full & 0xffff,
        _ => return None,
    })
}

/// Segment base for an effective address: fs/gs carry TLS bases, the other
/// segments are flat in 64-bit mode.
#[inline]
pub fn segment_base(regs: &Regs, reg: Register) -> Option<u64> {
    match reg {
        Register::FS => Some(regs.fs_base),
        Register::GS => Some(regs.gs_base),
        Register::CS | Register::DS | Register::ES | Register::SS => Some(0),
        _ => None,
    }
}

/// Effective address of a non-VSIB operand.
#[inline]
pub fn effective_address(expr: &UsedMemory, regs: &Regs) -> Option<u64> {
    expr.virtual_address(
        0,
        |reg, _, _| {
            if reg.is_segment_register() { segment_base(regs, reg) } else { gpr_value(regs, reg) }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(bytes: &[u8]) -> DecodedInstruction {
        decode(bytes, 0x1000, &mut InstructionInfoFactory::new()).expect("decodes")
    }

    fn zero_regs() -> Regs {
        // SAFETY: user_regs_struct is plain integers.
        unsafe { std::mem::zeroed() }
    }

    /// (bytes, expected (kind, size) per operand): the access table.
    #[test]
    #[allow(clippy::type_complexity)]
    fn classifies_accesses() {
        use AccessKind::*;
        let table: &[(&[u8], &str, &[(AccessKind, u32)])] = &[
            (&[0x66, 0x0f, 0x6f, 0x00], "movdqa xmm0,[rax]", &[(Read, 16)]),
            (&[0x0f, 0x29, 0x40, 0xf0], "movaps [rax-10h],xmm0", &[(Write, 16)]),
            (&[0x01, 0x07], "add [rdi],eax", &[(Modify, 4)]),
            (&[0x48, 0x8d, 0x04, 0x08], "lea rax,[rax+rcx]", &[]),
            (&[0x0f, 0x1f, 0x40, 0x00], "nop dword [rax]", &[]),
            (&[0x0f, 0x18, 0x08], "prefetcht0 [rax]", &[]),
            (&[0xc3], "ret", &[(Read, 8)]),
            (&[0x50], "push rax", &[(Write, 8)]),
            (&[0x58], "pop rax", &[(Read, 8)]),
            (&[0xe8, 0, 0, 0, 0], "call", &[(Write, 8)]),
            (&[0xff, 0x30], "push qword [rax]", &[(Read, 8), (Write, 8)]),
            (&[0x39, 0x07], "cmp [rdi],eax", &[(Read, 4)]),
        ];
        for (bytes, what, want) in table {
            let d = dec(bytes);
            let mut got: Vec<(AccessKind, u32)> = d.operands.iter().map(|o| (o.kind, o.size)).collect();
            let mut want = want.to_vec();
            got.sort_by_key(|g| (g.0 as u8, g.1));
            want.sort_by_key(|g| (g.0 as u8, g.1));
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn computes_rip_relative_fs_and_indexed_addresses() {
        let mut regs = zero_regs();
        regs.rax = 0x5000;
        regs.rcx = 3;
        regs.fs_base = 0x7000_0000;
        // mov eax, [rip+0x10] at 0x1000, length 6: 0x1016.
        let d = dec(&[0x8b, 0x05, 0x10, 0, 0, 0]);
        assert_eq!(effective_address(&d.operands[0].expr, &regs), Some(0x1016));
        // mov rax, fs:[0x28]
        let d = dec(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0]);
        assert_eq!(effective_address(&d.operands[0].expr, &regs), Some(0x7000_0028));
        // mov edx, [rax+rcx*4+8]
        let d = dec(&[0x8b, 0x54, 0x88, 0x08]);
        assert_eq!(effective_address(&d.operands[0].expr, &regs), Some(0x5000 + 12 + 8));
    }

    #[test]
    fn recognises_rep_strings_syscalls_and_calls() {
        assert!(dec(&[0xf3, 0xa4]).rep_string, "rep movsb");
        assert!(dec(&[0xf3, 0xa4]).operands.iter().all(|o| o.size == 1), "rep movsb moves bytes");
        assert!(dec(&[0xf3, 0x48, 0xab]).operands.iter().all(|o| o.size == 8), "rep stosq stores qwords");
        assert!(dec(&[0xf3, 0x48, 0xab]).rep_string, "rep stosq");
        assert!(!dec(&[0xa4]).rep_string, "movsb without rep");
        assert!(!dec(&[0xf2, 0x0f, 0x10, 0x00]).rep_string, "movsd xmm0,[rax] is SSE");
        assert!(dec(&[0x0f, 0x05]).syscall);
        assert_eq!(dec(&[0x0f, 0x05]).flow, FlowControl::Next, "a system call makes no frame");
        assert_eq!(dec(&[0xc3]).flow, FlowControl::Return);
        let call = dec(&[0xe8, 0x10, 0, 0, 0]);
        assert_eq!(call.flow, FlowControl::Call);
        assert_eq!(call.branch_target, Some(0x1015));
    }
}
