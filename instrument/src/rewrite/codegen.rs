//! Translating one basic block of the target into instrumented code.
//!
//! A block is straight-line code from an entry address to its first control
//! transfer. Each memory access is preceded by a short sequence that touches
//! neither the flags nor the program's stack: spill two scratch registers the
//! instruction does not use to the thread block (`gs:`), `lea` the operand's
//! address, append a record, restore. Control transfers end the block:
//! direct ones go to an *exit stub* (an `int3` that linetrace replaces by a
//! jump once it has translated the target), indirect ones and returns to the
//! cache's dispatcher, which finds the translation in the dispatch table or
//! traps. Calls push the *original* return address, so unwinders and
//! `backtrace()` see the program's own frames.

use std::collections::HashSet;

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, CodeSize, FlowControl, IcedError, Instruction, InstructionBlock,
    InstructionInfoFactory, MemoryOperand, OpAccess, OpKind, Register, UsedMemory, UsedRegister,
};
use trace_rt::format::{AllocKind, IMPLIED_MOST, Implied, ImpliedAccess, Site, SiteId};

use super::layout::{Flow, RecordKind, TABLE, slot};
use crate::decode::DecodedInstruction;

/// Bytes of an exit stub: room for `jmp [rip+0]` and an 8-byte address.
pub const STUB_BYTES: usize = 14;
/// Labels live in the kernel half of the address space, where no original
/// instruction is: the block encoder links branches to them, never to code.
const LABEL_BASE: u64 = 0xffff_f000_0000_0000;
/// The registers the code may borrow, in order of preference.
const SCRATCH: [Register; 14] = [
    Register::R11,
    Register::R10,
    Register::R9,
    Register::R8,
    Register::RAX,
    Register::RDX,
    Register::RCX,
    Register::RSI,
    Register::RDI,
    Register::RBX,
    Register::RBP,
    Register::R12,
    Register::R13,
    Register::R14,
];

/// Why a block could not be translated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodegenError {
    /// The program addresses memory through `gs`, which the translated code
    /// needs for itself.
    #[error("the instruction at {0:#x} uses the gs segment, which the rewriter needs (use --backend ptrace)")]
    UsesGs(u64),
    /// More distinct record kinds than a 16-bit tag can name.
    #[error("more than 65535 distinct memory-access sites in one recording (use --backend ptrace)")]
    TooManyTags,
    /// An access was left to be implied by another, but the tags could not
    /// define the site saying so (a bug: `Tags::defines_sites` lied).
    #[error("no site could say which accesses the access at {0:#x} implies")]
    NoImplyingSite(u64),
    /// iced-x86 refused an instruction (a bug here, or an instruction it
    /// cannot move).
    #[error("cannot encode the translation of the block at {pc:#x}")]
    Encode {
        /// The block.
        pc: u64,
        /// iced's message.
        #[source]
        cause: IcedError,
    },
}

/// Hands out the 16-bit tags of record kinds.
pub trait Tags {
    /// The tag of `kind`, made on first use.
    fn tag(&mut self, kind: RecordKind) -> Result<u16, CodegenError>;

    /// The id of `site`, an access that implies others
    /// ([`Site::implied`]), defined in the trace on first use; `None` when
    /// these tags cannot define sites (then every access is recorded).
    fn implying_site(&mut self, _implying: Implying) -> Option<SiteId> {
        None
    }

    /// Whether [`Self::implying_site`] defines sites.
    fn defines_sites(&self) -> bool {
        false
    }
}

/// An access that implies others, as block translation found it.
#[derive(Clone, Copy, Debug)]
pub struct Implying {
    /// Its site, with what it implies.
    pub site: Site,
    /// The instructions of the accesses it implies.
    pub pcs: [u64; IMPLIED_MOST],
    /// The site of the same access implying nothing.
    pub plain: SiteId,
}

/// The access a block's next accesses may be implied by: the last one
/// recorded, while the registers of its address are unchanged.
struct Anchor {
    /// Base, index, scale and segment of its address.
    registers: (Register, Register, u32, Register),
    displacement: i64,
    /// What it implies so far.
    implying: Implying,
    /// Where its record's tag is stored (`out` index), rewritten when it
    /// implies accesses.
    tag_at: usize,
    /// Index in `boundaries` of the first instruction after its own not
    /// yet inside its window (those up to the last implied access are).
    window_from: usize,
}

/// Whether an access of `op` can imply or be implied: one element at a
/// 64-bit address from registers (the fs base, rip and rep ranges are not
/// worth it).
fn can_imply(insn: &DecodedInstruction, op: &crate::decode::MemoryOperand) -> bool {
    let e = &op.expr;
    op.elements == 1
        && !insn.rep_string
        && e.address_size() == CodeSize::Code64
        && !matches!(e.segment(), Register::FS | Register::GS)
        && e.base() != Register::RIP
        && (e.base() != Register::None || e.index() != Register::None)
}

/// Where the shared routines of the code cache are.
#[derive(Clone, Copy, Debug)]
pub struct Routines {
    /// Looks up `gs:[TARGET]` in the dispatch table and jumps there.
    pub dispatch: u64,
    /// The dispatcher's trap for a target not in the table.
    pub miss: u64,
    /// Where allocators return to (records result and return).
    pub alloc_return: u64,
    /// Same, for `posix_memalign` (also records the pointer it stored).
    pub alloc_return_stored: u64,
}

/// Translation of one block, encoded for its place in the cache.
#[derive(Debug, Default)]
pub struct Encoded {
    /// The code.
    pub code: Vec<u8>,
    /// Exit stubs: (offset in `code`, original address they go to).
    pub exits: Vec<(u32, u64)>,
    /// Offsets where the copy of an original instruction starts, with its
    /// original address, in order.
    pub pcs: Vec<(u32, u64)>,
    /// Offsets where the code of an original instruction begins (its
    /// records, then its copy): no scratch register is in use there and
    /// nothing of the instruction has run, so a signal may interrupt the
    /// thread there as if at the original instruction.
    pub boundaries: Vec<u32>,
    /// The `boundaries` inside an implying access's window (after its
    /// instruction, up to its last implied one): not places to deliver a
    /// signal at, since the trace already holds the accesses to come.
    pub inside_windows: Vec<u32>,
    /// Offsets of special points: the miss trap of a dispatcher.
    pub marks: Vec<u32>,
    /// Instructions recorded approximately (gathers, scatters).
    pub approximations: u32,
}

/// What the translator needs to know about the program.
pub struct Context<'a> {
    /// First instructions of functions (jumps there are tail calls).
    pub function_starts: &'a HashSet<u64>,
    /// The shared routines (absent while they themselves are emitted).
    pub routines: Routines,
    /// `rdfsbase` is usable (else the thread pointer is read from `fs:0`,
    /// where glibc keeps it).
    pub fsgsbase: bool,
}

/// Builds a list of instructions with labels, then encodes it in one go.
struct Emitter {
    out: Vec<Instruction>,
    next_label: u64,
    /// Label the next instruction gets.
    pending: Option<u64>,
    /// Indexes in `out` of stubs and their targets.
    stubs: Vec<(usize, u64)>,
    /// Indexes in `out` of copied original instructions.
    originals: Vec<(usize, u64)>,
    /// Indexes in `out` where an original instruction's code begins.
    boundaries: Vec<usize>,
    /// Indexes in `boundaries` inside windows of implying accesses.
    inside_windows: Vec<usize>,
    marks: Vec<usize>,
}

type Built = Result<(), CodegenError>;

impl From<IcedError> for CodegenError {
    fn from(cause: IcedError) -> Self {
        // The block's address is filled in by `translate_block`.
        CodegenError::Encode { pc: 0, cause }
    }
}

fn gs(offset: i64) -> MemoryOperand {
    MemoryOperand::new(Register::None, Register::None, 1, offset, 4, false, Register::GS)
}

fn at(base: Register, displacement: i64) -> MemoryOperand {
    MemoryOperand::with_base_displ(base, displacement)
}

impl Emitter {
    fn new() -> Self {
        Emitter {
            out: Vec::new(),
            next_label: 0,
            pending: None,
            stubs: Vec::new(),
            originals: Vec::new(),
            boundaries: Vec::new(),
            inside_windows: Vec::new(),
            marks: vec![],
        }
    }

    fn label(&mut self) -> u64 {
        self.next_label += 1;
        LABEL_BASE + self.next_label
    }

    fn bind(&mut self, label: u64) {
        debug_assert!(self.pending.is_none(), "two labels on one instruction");
        self.pending = Some(label);
    }

    fn push(&mut self, mut i: Instruction) {
        // Every instruction gets an ip of its own: the encoder links
        // branches by ip, so none may collide with a label or another.
        let ip = match self.pending.take() {
            Some(l) => l,
            None => {
                self.next_label += 1;
                LABEL_BASE + (1 << 40) + self.next_label
            }
        };
        i.set_ip(ip);
        self.out.push(i);
    }

    fn emit(&mut self, r: Result<Instruction, IcedError>) -> Built {
        self.push(r?);
        Ok(())
    }

    fn emit_plain(&mut self, code: Code) {
        self.push(Instruction::with(code));
    }

    fn spill(&mut self, reg: Register, offset: i64) -> Built {
        self.emit(Instruction::with2(Code::Mov_rm64_r64, gs(offset), reg))
    }

    fn reload(&mut self, reg: Register, offset: i64) -> Built {
        self.emit(Instruction::with2(Code::Mov_r64_rm64, reg, gs(offset)))
    }

    fn lea(&mut self, dst: Register, mem: MemoryOperand) -> Built {
        self.emit(Instruction::with2(Code::Lea_r64_m, dst, mem))
    }

    fn mov_imm(&mut self, dst: Register, value: u64) -> Built {
        self.emit(Instruction::with2(Code::Mov_r64_imm64, dst, value))
    }

    fn jmp(&mut self, target: u64) -> Built {
        self.emit(Instruction::with_branch(Code::Jmp_rel32_64, target))
    }

    fn jmp_via_slot(&mut self, offset: i64) -> Built {
        self.emit(Instruction::with1(Code::Jmp_rm64, gs(offset)))
    }

    /// Appends a record of `value`'s content with `tag`, using `tmp`.
    fn record(&mut self, value: Register, tmp: Register, tag: u16) -> Built {
        self.reload(tmp, slot::CURSOR)?;
        self.emit(Instruction::with2(Code::Mov_rm64_r64, at(tmp, 0), value))?;
        self.emit(Instruction::with2(Code::Mov_rm16_imm16, at(tmp, 6), u32::from(tag)))?;
        self.lea(tmp, at(tmp, 8))?;
        self.spill(tmp, slot::CURSOR)
    }

    /// Adds `n` to the instruction counter, using `tmp`.
    fn count(&mut self, n: usize, tmp: Register) -> Built {
        self.reload(tmp, slot::COUNT)?;
        self.lea(tmp, at(tmp, n as i64))?;
        self.spill(tmp, slot::COUNT)
    }

    /// An exit stub to original address `target`: a trap until linked.
    fn stub(&mut self, label: u64, target: u64) {
        self.bind(label);
        self.stubs.push((self.out.len(), target));
        for _ in 0..STUB_BYTES {
            self.push(Instruction::with(Code::Int3));
        }
    }

    fn encode(self, at_address: u64, pc: u64, approximations: u32) -> Result<Encoded, CodegenError> {
        let block = InstructionBlock::new(&self.out, at_address);
        let result = BlockEncoder::encode(64, block, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
            .map_err(|cause| CodegenError::Encode { pc, cause })?;
        let offsets = result.new_instruction_offsets;
        Ok(Encoded {
            code: result.code_buffer,
            exits: self.stubs.iter().map(|&(i, t)| (offsets[i], t)).collect(),
            pcs: self.originals.iter().map(|&(i, p)| (offsets[i], p)).collect(),
            boundaries: self.boundaries.iter().map(|&i| offsets[i]).collect(),
            inside_windows: self.inside_windows.iter().map(|&b| offsets[self.boundaries[b]]).collect(),
            marks: self.marks.iter().map(|&i| offsets[i]).collect(),
            approximations,
        })
    }
}

/// Two registers an instruction does not touch (explicitly or implicitly),
/// given the registers it `used`.
fn scratch_pair(used: &[UsedRegister]) -> (Register, Register) {
    let touched = |r: Register| used.iter().any(|u| u.register().full_register() == r);
    let mut free = SCRATCH.iter().copied().filter(|&r| !touched(r));
    // At most six general registers are ever used by one instruction, so
    // fourteen candidates always leave two.
    let a = free.next().unwrap_or(Register::R11);
    let b = free.next().unwrap_or(Register::R10);
    (a, b)
}

/// Puts the address `expr` designates into `dst` (using `tmp` for the fs
/// base): the same address the ptrace recorder computes from the registers.
fn address_of(e: &mut Emitter, expr: &UsedMemory, dst: Register, tmp: Register, fsgsbase: bool) -> Built {
    let (base, index) = (expr.base(), expr.index());
    let displacement = expr.displacement() as i64;
    let narrow = expr.address_size() == CodeSize::Code32;
    if base == Register::None && index == Register::None {
        e.mov_imm(dst, if narrow { expr.displacement() & 0xffff_ffff } else { expr.displacement() })?;
    } else {
        // The encoder wants the displacement size of the address size.
        let size = if narrow { 4 } else { 8 };
        let mem = MemoryOperand::new(base, index, expr.scale(), displacement, size, false, Register::None);
        if narrow {
            e.emit(Instruction::with2(Code::Lea_r32_m, dst.full_register32(), mem))?;
        } else {
            e.lea(dst, mem)?;
        }
    }
    if expr.segment() == Register::FS {
        if fsgsbase {
            e.emit(Instruction::with1(Code::Rdfsbase_r64, tmp))?;
        } else {
            // glibc's thread control block starts with a pointer to itself.
            e.emit(Instruction::with2(
                Code::Mov_r64_rm64,
                tmp,
                MemoryOperand::new(Register::None, Register::None, 1, 0, 4, false, Register::FS),
            ))?;
        }
        e.emit(Instruction::with2(Code::Lea_r64_m, dst, MemoryOperand::with_base_index(dst, tmp)))?;
    }
    Ok(())
}

/// The memory operand of `instr` as written (segment included), for loading
/// an indirect branch target.
fn operand_memory(instr: &Instruction) -> MemoryOperand {
    if instr.is_ip_rel_memory_operand() {
        return MemoryOperand::new(
            Register::RIP,
            Register::None,
            1,
            instr.ip_rel_memory_address() as i64,
            8,
            false,
            instr.segment_prefix(),
        );
    }
    MemoryOperand::new(
        instr.memory_base(),
        instr.memory_index(),
        instr.memory_index_scale(),
        instr.memory_displacement64() as i64,
        instr.memory_displ_size(),
        false,
        instr.segment_prefix(),
    )
}

/// Loads the target of indirect call or jump `instr` into `dst` and the
/// thread block's target slot, before the instruction could change any
/// register its operand uses.
fn load_target(e: &mut Emitter, instr: &Instruction, dst: Register) -> Built {
    if instr.op0_kind() == OpKind::Register {
        e.emit(Instruction::with2(Code::Mov_r64_rm64, dst, instr.op0_register().full_register()))?;
    } else {
        e.emit(Instruction::with2(Code::Mov_r64_rm64, dst, operand_memory(instr)))?;
    }
    e.spill(dst, slot::TARGET)
}

/// Translates one block.
struct Translator<'a, 'b> {
    e: Emitter,
    ctx: &'a Context<'b>,
    tags: &'a mut dyn Tags,
    /// Exit stubs to emit after the code: (label, original target).
    exits: Vec<(u64, u64)>,
    /// Taken conditional branches into functions: (label, branch, target).
    taken_into_functions: Vec<(u64, u64, u64)>,
    approximations: u32,
    anchor: Option<Anchor>,
}

impl<'a, 'b> Translator<'a, 'b> {
    fn new(ctx: &'a Context<'b>, tags: &'a mut dyn Tags) -> Self {
        Translator {
            e: Emitter::new(),
            ctx,
            tags,
            exits: Vec::new(),
            taken_into_functions: Vec::new(),
            approximations: 0,
            anchor: None,
        }
    }

    /// Appends a record (which ends the anchor's window).
    fn record(&mut self, value: Register, tmp: Register, kind: RecordKind) -> Built {
        self.close_anchor()?;
        let tag = self.tags.tag(kind)?;
        self.e.record(value, tmp, tag)
    }

    /// Records each element of a gather or scatter: the index vector is
    /// stored to the thread block and read back one element at a time.
    /// ZMM index vectors are not handled (counted as an approximation), as
    /// the ptrace recorder cannot read them either.
    fn vector_elements(&mut self, op: &crate::decode::MemoryOperand, a: Register, b: Register) -> Built {
        let index = op.expr.index();
        let store = if index.is_ymm() {
            Code::VEX_Vmovdqu_ymmm256_ymm
        } else if index.is_xmm() {
            Code::VEX_Vmovdqu_xmmm128_xmm
        } else {
            self.approximations += 1;
            return Ok(());
        };
        self.e.emit(Instruction::with2(store, gs(slot::VECTOR), index))?;
        let size = i64::from(op.expr.vsib_size().max(4));
        for i in 0..i64::from(op.elements) {
            let element = gs(slot::VECTOR + i * size);
            if size == 4 {
                self.e.emit(Instruction::with2(Code::Movsxd_r64_rm32, a, element))?;
            } else {
                self.e.emit(Instruction::with2(Code::Mov_r64_rm64, a, element))?;
            }
            let displacement = op.expr.displacement() as i64;
            let base = op.expr.base();
            self.e.lea(a, MemoryOperand::new(base, a, op.expr.scale(), displacement, 8, false, Register::None))?;
            self.record(a, b, RecordKind::Access(op.site))?;
        }
        Ok(())
    }

    /// Ends the current anchor's window: when it implies accesses, its
    /// record gets the tag of a site saying so.
    fn close_anchor(&mut self) -> Built {
        let Some(anchor) = self.anchor.take() else { return Ok(()) };
        if anchor.implying.site.implied.is_empty() {
            return Ok(());
        }
        let pc = anchor.implying.site.pc;
        let site = self.tags.implying_site(anchor.implying).ok_or(CodegenError::NoImplyingSite(pc))?;
        let tag = self.tags.tag(RecordKind::Access(site))?;
        self.e.out[anchor.tag_at].set_immediate16(tag);
        Ok(())
    }

    /// Whether `op` is implied by the anchor (then noted in it and in its
    /// window) instead of recorded.
    fn implied(&mut self, insn: &DecodedInstruction, op: &crate::decode::MemoryOperand) -> bool {
        let Some(anchor) = self.anchor.as_mut() else { return false };
        let e = &op.expr;
        let offset = (e.displacement() as i64).wrapping_sub(anchor.displacement);
        let same = anchor.registers == (e.base(), e.index(), e.scale(), e.segment());
        let Ok(offset) = i32::try_from(offset) else { return false };
        let implying = &mut anchor.implying;
        let n = implying.site.implied.len();
        if !same || !can_imply(insn, op) || !implying.site.implied.push(ImpliedAccess { site: op.site, offset }) {
            return false;
        }
        implying.pcs[n] = insn.instr.ip();
        self.e.inside_windows.extend(anchor.window_from..self.e.boundaries.len());
        anchor.window_from = self.e.boundaries.len();
        true
    }

    fn exit_to(&mut self, target: u64) -> Built {
        let l = self.e.label();
        self.exits.push((l, target));
        self.e.jmp(l)
    }

    fn restore(&mut self, a: Register, b: Register) -> Built {
        self.e.reload(b, slot::SPILL_B)?;
        self.e.reload(a, slot::SPILL_A)
    }

    /// Emits `insn`; returns true if it ended the block (a transfer whose
    /// exits are already in place).
    fn instruction(
        &mut self,
        insn: &DecodedInstruction,
        count: Option<usize>,
        factory: &mut InstructionInfoFactory,
    ) -> Result<bool, CodegenError> {
        let instr = insn.instr;
        let ip = instr.ip();
        if instr.segment_prefix() == Register::GS || insn.operands.iter().any(|o| o.expr.segment() == Register::GS) {
            return Err(CodegenError::UsesGs(ip));
        }
        self.e.boundaries.push(self.e.out.len());
        let used = factory.info(&instr).used_registers().to_vec();
        let (a, b) = scratch_pair(&used);
        // Operands the anchor implies are not recorded (when the tags can
        // define the sites that say so); once one operand is recorded the
        // others are too: what an anchor implies comes right after its
        // record.
        let mut implied = vec![false; insn.operands.len()];
        if self.tags.defines_sites() {
            for (i, op) in insn.operands.iter().enumerate() {
                if !self.implied(insn, op) {
                    break;
                }
                implied[i] = true;
            }
        }
        let recorded = implied.iter().filter(|&&i| !i).count();
        let spilled = recorded > 0 || count.is_some() || insn.syscall || insn.flow != FlowControl::Next;
        if spilled {
            self.e.spill(a, slot::SPILL_A)?;
            self.e.spill(b, slot::SPILL_B)?;
        }
        if let Some(n) = count {
            self.e.count(n, b)?;
        }
        if insn.rep_string {
            for op in &insn.operands {
                address_of(&mut self.e, &op.expr, a, b, self.ctx.fsgsbase)?;
                self.record(a, b, RecordKind::RepStart { site: op.site, size: op.size })?;
            }
            self.record(Register::RCX, b, RecordKind::RepCount)?;
            // pushfq writes below the stack pointer: step over the red zone
            // first (lea leaves the flags alone).
            self.e.lea(Register::RSP, at(Register::RSP, -128))?;
            self.e.emit_plain(Code::Pushfq);
            self.e.emit(Instruction::with1(Code::Pop_r64, a))?;
            self.e.lea(Register::RSP, at(Register::RSP, 128))?;
            self.record(a, b, RecordKind::RepFlags)?;
        } else {
            for (op, _) in insn.operands.iter().zip(&implied).filter(|(_, i)| !**i) {
                if op.elements > 1 {
                    self.vector_elements(op, a, b)?;
                    continue;
                }
                address_of(&mut self.e, &op.expr, a, b, self.ctx.fsgsbase)?;
                self.record(a, b, RecordKind::Access(op.site))?;
                if self.tags.defines_sites() && can_imply(insn, op) {
                    let e = &op.expr;
                    self.anchor = Some(Anchor {
                        registers: (e.base(), e.index(), e.scale(), e.segment()),
                        displacement: e.displacement() as i64,
                        implying: Implying {
                            site: Site {
                                pc: ip,
                                len: insn.len,
                                kind: op.kind,
                                size: op.size,
                                count: op.elements,
                                implied: Implied::NONE,
                            },
                            pcs: [0; IMPLIED_MOST],
                            plain: op.site,
                        },
                        // The tag's store is the third of a record's five.
                        tag_at: self.e.out.len() - 3,
                        window_from: self.e.boundaries.len(),
                    });
                }
            }
        }
        // An anchor whose address registers this instruction writes (or
        // may write) implies nothing after it.
        if let Some(anchor) = &self.anchor {
            let (base, index, ..) = anchor.registers;
            let writes = used.iter().any(|u| {
                let r = u.register().full_register();
                (r == base || r == index)
                    && !matches!(u.access(), OpAccess::Read | OpAccess::CondRead | OpAccess::NoMemAccess)
            });
            if writes || insn.flow != FlowControl::Next || insn.syscall {
                self.close_anchor()?;
            }
        }
        if insn.syscall {
            self.record(Register::RAX, b, RecordKind::SyscallNumber { pc: ip })?;
            self.record(Register::RDI, b, RecordKind::SyscallArg(0))?;
            self.record(Register::RSI, b, RecordKind::SyscallArg(1))?;
        }
        let next = ip + instr.len() as u64;
        match insn.flow {
            FlowControl::Call | FlowControl::IndirectCall => {
                let target = insn.branch_target;
                if target.is_none() {
                    load_target(&mut self.e, &instr, a)?;
                }
                self.e.lea(a, at(Register::RSP, -8))?;
                self.record(a, b, RecordKind::Call { callsite: ip, target })?;
                if target.is_none() {
                    self.e.reload(a, slot::TARGET)?;
                    self.record(a, b, RecordKind::Target)?;
                }
                // The original return address, as the call would push it.
                self.e.mov_imm(a, next)?;
                self.e.emit(Instruction::with2(Code::Mov_rm64_r64, at(Register::RSP, -8), a))?;
                self.restore(a, b)?;
                self.e.lea(Register::RSP, at(Register::RSP, -8))?;
                match target {
                    Some(t) => self.exit_to(t)?,
                    None => self.e.jmp(self.ctx.routines.dispatch)?,
                }
                return Ok(true);
            }
            FlowControl::Return => {
                let pop = 8 + if instr.code() == Code::Retnq_imm16 { i64::from(instr.immediate16()) } else { 0 };
                self.e.emit(Instruction::with2(Code::Mov_r64_rm64, a, at(Register::RSP, 0)))?;
                self.e.spill(a, slot::TARGET)?;
                self.e.lea(a, at(Register::RSP, pop))?;
                self.record(a, b, RecordKind::Return)?;
                self.restore(a, b)?;
                self.e.lea(Register::RSP, at(Register::RSP, pop))?;
                self.e.jmp(self.ctx.routines.dispatch)?;
                return Ok(true);
            }
            FlowControl::IndirectBranch => {
                load_target(&mut self.e, &instr, a)?;
                self.record(Register::RSP, b, RecordKind::Jump { callsite: ip, target: None, flow: Flow::Indirect })?;
                self.e.reload(a, slot::TARGET)?;
                self.record(a, b, RecordKind::Target)?;
                self.restore(a, b)?;
                self.e.jmp(self.ctx.routines.dispatch)?;
                return Ok(true);
            }
            FlowControl::UnconditionalBranch if insn.branch_target.is_some() => {
                let t = insn.branch_target.unwrap_or_default();
                if self.ctx.function_starts.contains(&t) {
                    let kind = RecordKind::Jump { callsite: ip, target: Some(t), flow: Flow::Direct };
                    self.record(Register::RSP, b, kind)?;
                }
                self.restore(a, b)?;
                self.exit_to(t)?;
                return Ok(true);
            }
            _ => {}
        }
        if spilled {
            self.restore(a, b)?;
        }
        // The instruction itself; a conditional branch's taken side goes to
        // a stub (or records a tail call first).
        let mut copy = instr;
        let conditional = insn.flow == FlowControl::ConditionalBranch;
        if let (true, Some(t)) = (conditional, insn.branch_target) {
            let l = self.e.label();
            if self.ctx.function_starts.contains(&t) {
                self.taken_into_functions.push((l, ip, t));
            } else {
                self.exits.push((l, t));
            }
            copy.set_near_branch64(l);
        }
        self.e.originals.push((self.e.out.len(), ip));
        self.e.push(copy);
        if insn.syscall || insn.rep_string {
            self.e.spill(a, slot::SPILL_A)?;
            self.e.spill(b, slot::SPILL_B)?;
            let (value, kind) = if insn.syscall {
                (Register::RAX, RecordKind::SyscallResult)
            } else {
                (Register::RCX, RecordKind::RepEnd)
            };
            self.record(value, b, kind)?;
            self.restore(a, b)?;
        }
        if conditional {
            self.exit_to(next)?;
            return Ok(true);
        }
        Ok(false)
    }

    fn finish(mut self, pc: u64, at_address: u64) -> Result<Encoded, CodegenError> {
        for (label, callsite, target) in std::mem::take(&mut self.taken_into_functions) {
            // A taken conditional branch into a function: a tail call.
            self.e.bind(label);
            self.e.spill(Register::R11, slot::SPILL_A)?;
            self.record(
                Register::RSP,
                Register::R11,
                RecordKind::Jump { callsite, target: Some(target), flow: Flow::Conditional },
            )?;
            self.e.reload(Register::R11, slot::SPILL_A)?;
            self.exit_to(target)?;
        }
        for (label, target) in std::mem::take(&mut self.exits) {
            self.e.stub(label, target);
        }
        self.e.encode(at_address, pc, self.approximations)
    }
}

/// Names block `pc` in an encoding error.
fn at_block(pc: u64) -> impl Fn(CodegenError) -> CodegenError + Copy {
    move |err| match err {
        CodegenError::Encode { cause, .. } => CodegenError::Encode { pc, cause },
        other => other,
    }
}

/// Translates the block made of `insns` (consecutive instructions; only the
/// last may transfer control) for address `at_address`.
pub fn translate_block(
    insns: &[DecodedInstruction],
    at_address: u64,
    ctx: &Context,
    tags: &mut dyn Tags,
    factory: &mut InstructionInfoFactory,
) -> Result<Encoded, CodegenError> {
    let pc = insns.first().map(|i| i.instr.ip()).unwrap_or(0);
    let with_pc = at_block(pc);
    let mut t = Translator::new(ctx, tags);
    let mut ended = false;
    for (n, insn) in insns.iter().enumerate() {
        let count = (n == 0).then_some(insns.len());
        ended = t.instruction(insn, count, factory).map_err(with_pc)?;
        if ended {
            break;
        }
    }
    t.close_anchor().map_err(with_pc)?;
    if !ended {
        let next = insns.last().map(|i| i.instr.next_ip()).unwrap_or(pc);
        t.exit_to(next).map_err(with_pc)?;
    }
    t.finish(pc, at_address).map_err(with_pc)
}

/// Translation of an allocator's entry: the allocator runs natively, with
/// its arguments recorded and its return sent through `routines`'
/// allocator-return routine, which records the result.
pub fn allocator_entry(
    kind: AllocKind,
    native: u64,
    at_address: u64,
    ctx: &Context,
    tags: &mut dyn Tags,
) -> Result<Encoded, CodegenError> {
    let mut t = Translator::new(ctx, tags);
    let (a, b) = (Register::R11, Register::R10);
    let r: Built = (|| {
        t.e.spill(a, slot::SPILL_A)?;
        t.e.spill(b, slot::SPILL_B)?;
        for (n, reg) in [Register::RDI, Register::RSI, Register::RDX].into_iter().enumerate() {
            t.record(reg, b, RecordKind::AllocArg { kind, n: n as u8 })?;
        }
        t.e.emit(Instruction::with2(Code::Mov_r64_rm64, a, at(Register::RSP, 0)))?;
        t.e.spill(a, slot::ALLOC_RETURN)?;
        t.e.spill(Register::RDI, slot::ALLOC_ARG0)?;
        let back =
            if kind == AllocKind::PosixMemalign { ctx.routines.alloc_return_stored } else { ctx.routines.alloc_return };
        t.e.mov_imm(a, back)?;
        t.e.emit(Instruction::with2(Code::Mov_rm64_r64, at(Register::RSP, 0), a))?;
        t.e.mov_imm(a, native)?;
        t.e.spill(a, slot::JUMP)?;
        t.restore(a, b)?;
        t.e.jmp_via_slot(slot::JUMP)
    })();
    r.map_err(at_block(native))?;
    t.finish(native, at_address)
}

/// The routines every code cache starts with, for a cache at `at_address`:
/// the dispatcher and the two allocator returns. Returns the code (whose
/// `marks` are: dispatcher, its miss trap, the two returns) and the
/// routines' addresses.
pub fn routines(at_address: u64, tags: &mut dyn Tags, fsgsbase: bool) -> Result<(Encoded, Routines), CodegenError> {
    let starts = HashSet::new();
    // The routines refer to one another by label, not by address.
    let mut e = Emitter::new();
    let dispatch = e.label();
    let alloc_return = e.label();
    let alloc_return_stored = e.label();
    let ctx = Context {
        function_starts: &starts,
        routines: Routines { dispatch, miss: 0, alloc_return, alloc_return_stored },
        fsgsbase,
    };
    let mut t = Translator { e, ..Translator::new(&ctx, tags) };
    let index_times_8 = MemoryOperand::new(Register::None, Register::RAX, 8, 0, 8, false, Register::None);
    let entry =
        |column: i64| MemoryOperand::new(Register::None, Register::RAX, 2, TABLE + column, 8, false, Register::GS);
    let r: Built = (|| {
        // Dispatcher: compare the target with the entry's key without
        // touching the flags (see `layout::table_key`: target + key + 1 is
        // zero for a hit, which jrcxz tests).
        t.e.marks.push(t.e.out.len());
        t.e.bind(dispatch);
        t.e.spill(Register::RCX, slot::SPILL_RCX)?;
        t.e.spill(Register::RAX, slot::SPILL_RAX)?;
        t.e.reload(Register::RCX, slot::TARGET)?;
        t.e.emit(Instruction::with2(Code::Movzx_r32_rm16, Register::EAX, Register::CX))?;
        t.e.lea(Register::RAX, index_times_8)?;
        t.e.emit(Instruction::with2(Code::Mov_r64_rm64, Register::RAX, entry(0)))?;
        t.e.lea(Register::RCX, MemoryOperand::new(Register::RCX, Register::RAX, 1, 1, 1, false, Register::None))?;
        let hit = t.e.label();
        t.e.emit(Instruction::with_branch(Code::Jrcxz_rel8_64, hit))?;
        t.e.marks.push(t.e.out.len());
        t.e.emit_plain(Code::Int3);
        t.e.bind(hit);
        t.e.reload(Register::RCX, slot::TARGET)?;
        t.e.emit(Instruction::with2(Code::Movzx_r32_rm16, Register::EAX, Register::CX))?;
        t.e.lea(Register::RAX, index_times_8)?;
        t.e.emit(Instruction::with2(Code::Mov_r64_rm64, Register::RAX, entry(8)))?;
        t.e.spill(Register::RAX, slot::JUMP)?;
        t.e.reload(Register::RAX, slot::SPILL_RAX)?;
        t.e.reload(Register::RCX, slot::SPILL_RCX)?;
        t.e.jmp_via_slot(slot::JUMP)?;
        for (label, stored) in [(alloc_return, false), (alloc_return_stored, true)] {
            let (a, b) = (Register::R11, Register::R10);
            t.e.marks.push(t.e.out.len());
            t.e.bind(label);
            t.e.spill(a, slot::SPILL_A)?;
            t.e.spill(b, slot::SPILL_B)?;
            t.record(Register::RAX, b, RecordKind::AllocResult)?;
            if stored {
                t.e.reload(a, slot::ALLOC_ARG0)?;
                t.e.emit(Instruction::with2(Code::Mov_r64_rm64, a, at(a, 0)))?;
                t.record(a, b, RecordKind::AllocStored)?;
            }
            t.record(Register::RSP, b, RecordKind::Return)?;
            t.e.reload(a, slot::ALLOC_RETURN)?;
            t.e.spill(a, slot::TARGET)?;
            t.restore(a, b)?;
            t.e.jmp(dispatch)?;
        }
        Ok(())
    })();
    r?;
    let encoded = t.finish(0, at_address)?;
    let [dispatch, miss, plain, stored] = encoded.marks[..] else {
        unreachable!("four marks were made above");
    };
    let routines = Routines {
        dispatch: at_address + u64::from(dispatch),
        miss: at_address + u64::from(miss),
        alloc_return: at_address + u64::from(plain),
        alloc_return_stored: at_address + u64::from(stored),
    };
    Ok((encoded, routines))
}

#[cfg(test)]
mod tests {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};

    use super::*;
    use crate::rewrite::records::RecordTable;

    /// Decodes `bytes` at `pc` as the tracer does (site ids numbered).
    fn block(bytes: &[u8], pc: u64) -> Vec<DecodedInstruction> {
        let mut factory = InstructionInfoFactory::new();
        let mut out = Vec::new();
        let mut at = 0;
        let mut site = 0;
        while at < bytes.len() {
            let mut insn = crate::decode::decode(&bytes[at..], pc + at as u64, &mut factory).expect("decodes");
            for op in &mut insn.operands {
                op.site = site;
                site += 1;
            }
            at += usize::from(insn.len);
            out.push(insn);
        }
        out
    }

    /// Translates the block `insns` for address `at` with `tags`.
    fn translate_with(insns: &[DecodedInstruction], at: u64, tags: &mut dyn Tags) -> Encoded {
        let starts = HashSet::new();
        let routines = Routines { dispatch: at + 0x10000, miss: 0, alloc_return: 0, alloc_return_stored: 0 };
        let ctx = Context { function_starts: &starts, routines, fsgsbase: true };
        translate_block(insns, at, &ctx, tags, &mut InstructionInfoFactory::new()).expect("translates")
    }

    fn translate(bytes: &[u8], pc: u64, at: u64) -> (Encoded, RecordTable) {
        let mut table = RecordTable::default();
        let encoded = translate_with(&block(bytes, pc), at, &mut table);
        (encoded, table)
    }

    /// Translates `bytes` with tags that define implying sites (as the
    /// tracer's do); returns the code, the table, and the sites defined.
    fn translate_implying(bytes: &[u8], pc: u64, at: u64, mut table: RecordTable) -> (Encoded, RecordTable, Vec<Site>) {
        let insns = block(bytes, pc);
        let plain = insns.iter().map(|i| i.operands.len()).sum::<usize>() as SiteId;
        let mut defined = Vec::new();
        let mut define = |s: Site| {
            defined.push(s);
            plain + defined.len() as SiteId - 1
        };
        let mut tags = crate::rewrite::records::DefiningTags { table: &mut table, define: &mut define };
        let encoded = translate_with(&insns, at, &mut tags);
        (encoded, table, defined)
    }

    /// The record kinds the code of `encoded` stores, in order.
    fn stored_kinds(encoded: &Encoded, table: &RecordTable) -> Vec<RecordKind> {
        let mut decoder = Decoder::with_ip(64, &encoded.code, 0, DecoderOptions::NONE);
        let mut kinds = Vec::new();
        while decoder.can_decode() {
            let i = decoder.decode();
            if i.code() == Code::Mov_rm16_imm16 && i.memory_displacement64() == 6 {
                kinds.extend(table.kind(i.immediate16()));
            }
        }
        kinds
    }

    /// mov ecx,[rdi]; mov eax,ecx; cdq; idiv esi; mov [rdi+4],eax;
    /// mov eax,[rdi+8]; mov rdi,rax; mov [rdi],eax; ret — a load and a
    /// store of one base register (`p[1] = p[0] / d`), then a third; a
    /// write to the register ends what its accesses imply.
    const SAME_BASE: &[u8] = &[
        0x8b, 0x0f, // mov ecx,[rdi]
        0x89, 0xc8, // mov eax,ecx
        0x99, // cdq
        0xf7, 0xfe, // idiv esi
        0x89, 0x47, 0x04, // mov [rdi+4],eax
        0x8b, 0x47, 0x08, // mov eax,[rdi+8]
        0x48, 0x89, 0xc7, // mov rdi,rax
        0x89, 0x07, // mov [rdi],eax
        0xc3, // ret
    ];

    #[test]
    fn accesses_of_an_unchanged_base_register_are_implied_by_the_first() {
        let (pc, at) = (0x40_1000, 0x40_0000_0000);
        let (encoded, table, defined) = translate_implying(SAME_BASE, pc, at, RecordTable::default());
        // Sites 0..5 are the operands in order (4: the return's load of
        // its address); 5 is the one defined: site 0 implying the store
        // (site 1, 4 bytes on) and the load of site 2 (8 on). After
        // `mov rdi,rax` the store through rdi is recorded.
        assert_eq!(defined.len(), 1, "{defined:?}");
        let implied: Vec<(SiteId, i32)> = defined[0].implied.as_slice().iter().map(|a| (a.site, a.offset)).collect();
        assert_eq!(implied, vec![(1, 4), (2, 8)]);
        assert_eq!((defined[0].pc, defined[0].kind), (pc, trace_rt::format::AccessKind::Read));
        let kinds = stored_kinds(&encoded, &table);
        let accesses = [RecordKind::Access(5), RecordKind::Access(3), RecordKind::Access(4)];
        assert_eq!(kinds, [&accesses[..], &[RecordKind::Return]].concat());
        assert_eq!(table.implied_len(5), 2);
        // No signal is delivered inside the window: at the four
        // instructions after the load, up to the load of site 2.
        assert_eq!(encoded.inside_windows, encoded.boundaries[1..6].to_vec());
        // Without tags that define sites, every access is recorded.
        let (encoded, table) = translate(SAME_BASE, pc, at);
        let accesses = stored_kinds(&encoded, &table).iter().filter(|k| matches!(k, RecordKind::Access(_))).count();
        assert_eq!(accesses, 5);
        assert!(encoded.inside_windows.is_empty());
        // Nor once tags run short: implying sites would take more.
        let mut full = RecordTable::default();
        for site in 1000..1000 + (usize::from(u16::MAX) - crate::rewrite::records::IMPLYING_MARGIN) as u32 {
            full.tag(RecordKind::Access(site)).expect("a tag");
        }
        let (encoded, table, defined) = translate_implying(SAME_BASE, pc, at, full);
        assert!(defined.is_empty(), "{defined:?}");
        let accesses = stored_kinds(&encoded, &table).iter().filter(|k| matches!(k, RecordKind::Access(_))).count();
        assert_eq!(accesses, 5);
    }

    /// mov eax,[rip+0x10]; add [rdi+rcx*4+8],eax; cmp [rsp],rax;
    /// mov rax,fs:[0x28]; ret — memory operands of every addressing form.
    const SAMPLE: &[u8] = &[
        0x8b, 0x05, 0x10, 0, 0, 0, // mov eax,[rip+0x10]
        0x01, 0x44, 0x8f, 0x08, // add [rdi+rcx*4+8],eax
        0x48, 0x39, 0x04, 0x24, // cmp [rsp],rax
        0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0,    // mov rax,fs:[0x28]
        0xc3, // ret
    ];

    #[test]
    fn instrumentation_leaves_flags_and_program_memory_alone() {
        let (pc, at) = (0x40_1000, 0x40_0000_0000);
        let (encoded, _) = translate(SAMPLE, pc, at);
        let copies: HashSet<u64> = encoded.pcs.iter().map(|&(o, _)| at + u64::from(o)).collect();
        let stubs: HashSet<u64> = encoded.exits.iter().map(|&(o, _)| at + u64::from(o)).collect();
        let mut decoder = Decoder::with_ip(64, &encoded.code, at, DecoderOptions::NONE);
        let mut factory = InstructionInfoFactory::new();
        let mut ours = 0;
        while decoder.can_decode() {
            let i = decoder.decode();
            if copies.contains(&i.ip()) || i.mnemonic() == Mnemonic::Int3 || stubs.contains(&i.ip()) {
                continue;
            }
            ours += 1;
            assert_eq!(i.rflags_modified(), 0, "{i} at {:#x} changes flags", i.ip());
            // Added code writes only the thread block (gs:), the record
            // buffer (through a scratch register) and, for calls, the
            // return-address slot.
            for m in factory.info(&i).used_memory() {
                if matches!(m.access(), iced_x86::OpAccess::Write | iced_x86::OpAccess::ReadWrite) {
                    let fine = m.segment() == Register::GS || SCRATCH.contains(&m.base());
                    assert!(fine, "{i} writes program memory");
                }
            }
        }
        assert!(ours > 20, "only {ours} instructions of instrumentation");
    }

    #[test]
    fn copied_instructions_keep_their_rip_relative_targets() {
        let (pc, at) = (0x40_1000, 0x40_0000_0000);
        let (encoded, table) = translate(SAMPLE, pc, at);
        let &(offset, original) = encoded.pcs.first().expect("a copy");
        assert_eq!(original, pc);
        let copy = Decoder::with_ip(64, &encoded.code[offset as usize..], at + u64::from(offset), DecoderOptions::NONE)
            .decode();
        assert_eq!(copy.mnemonic(), Mnemonic::Mov);
        assert_eq!(copy.ip_rel_memory_address(), pc + 6 + 0x10, "moved copy reads what the original read");
        // One record kind per memory operand, then the return.
        let kinds: Vec<RecordKind> = (0..5).filter_map(|t| table.kind(t)).collect();
        assert_eq!(
            kinds,
            vec![
                RecordKind::Access(0),
                RecordKind::Access(1),
                RecordKind::Access(2),
                RecordKind::Access(3),
                RecordKind::Access(4)
            ]
        );
        assert_eq!(table.kind(5), Some(RecordKind::Return));
    }

    #[test]
    fn direct_branches_leave_through_stubs_to_their_original_targets() {
        // test eax,eax; jne +0x20 (taken target pc+4+0x20); fallthrough pc+4.
        let pc = 0x40_2000;
        let (encoded, _) = translate(&[0x85, 0xc0, 0x75, 0x20], pc, 0x40_0000_0000);
        let mut targets: Vec<u64> = encoded.exits.iter().map(|&(_, t)| t).collect();
        targets.sort_unstable();
        assert_eq!(targets, vec![pc + 4, pc + 4 + 0x20]);
        for &(offset, _) in &encoded.exits {
            assert!(
                encoded.code[offset as usize..][..STUB_BYTES].iter().all(|&b| b == 0xcc),
                "stubs trap until linked"
            );
        }
    }

    /// The dispatcher's flag-free compare (`lea rcx,[rcx+rax+d]`, then
    /// `jrcxz`) and the table's keys must agree: every key hits its own
    /// target, and an empty (zeroed) entry hits no address code can be at.
    #[test]
    fn dispatcher_compare_matches_table_keys_and_empty_entries_match_nothing() {
        let at = 0x40_0000_0000;
        let (encoded, routines) = routines(at, &mut RecordTable::default(), true).expect("routines encode");
        let from = (routines.dispatch - at) as usize;
        let mut decoder = Decoder::with_ip(64, &encoded.code[from..], routines.dispatch, DecoderOptions::NONE);
        let listing: Vec<Instruction> = std::iter::from_fn(|| decoder.can_decode().then(|| decoder.decode())).collect();
        let compare = listing
            .windows(2)
            .find(|w| w[0].mnemonic() == Mnemonic::Lea && w[1].mnemonic() == Mnemonic::Jrcxz)
            .map(|w| w[0])
            .expect("the dispatcher compares with lea and jrcxz");
        assert_eq!(
            (compare.op0_register(), compare.memory_base(), compare.memory_index()),
            (Register::RCX, Register::RCX, Register::RAX),
            "target (rcx) plus key (rax): {compare}"
        );
        let plus = compare.memory_displacement64();
        for target in [0x40_1000u64, 0x5555_5555_4000, 0x7fff_f7dd_0123, 1, 0] {
            let key = super::super::layout::table_key(target);
            assert_eq!(target.wrapping_add(key).wrapping_add(plus), 0, "{target:#x} misses its own entry");
            assert_ne!(target.wrapping_add(0).wrapping_add(plus), 0, "{target:#x} hits an empty entry");
        }
    }
}
