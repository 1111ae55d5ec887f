//! Custom allocators (`record --allocations --alloc-fn SPEC`): functions of
//! the program (a pool's alloc and free, a bump allocator's reset) whose
//! calls are recorded as allocations, beside the malloc family.
//!
//! The agent cannot interpose them by symbol (the program calls its own
//! functions directly, not through the PLT), so it patches each one's entry
//! with a jump to a trampoline that notes the arguments, swaps the return
//! address for a stub of its own that notes the result, and runs the
//! function's first instructions (moved to the trampoline) before jumping
//! back into it. This module decides, from the executable's file, whether
//! that is safe and what to move: whole instructions covering the 5 bytes
//! of the jump; relative branches among them (an allocator's early `cmp;
//! ja fail`) rewritten as rel32 jumps and calls, and they and RIP-relative
//! operands listed with their link-time targets so the agent can aim them
//! from the trampoline; no indirect branch or return among them; and no
//! branch of the function into the patched bytes. What it finds goes to
//! the agent in an environment variable ([`trace_rt::agent::HOOKS_ENV`]);
//! the agent checks the bytes are still those before patching.
//!
//! Known limits: functions of the executable only (not of libraries); a
//! C++ exception must not leave a hooked function (the unwinder meets the
//! agent's stub as the return address; a longjmp out of one is tolerated:
//! the agent forgets the calls it skipped); the return-address swap needs
//! a program without a hardware shadow stack (CET, off unless the program
//! asks glibc for it).

use std::path::Path;

use iced_x86::{Decoder, DecoderOptions, FlowControl};

use crate::InstrumentError;
use crate::entry::{FunctionSpec, Plan};

/// Bytes of the jump patched at a function's entry (`jmp rel32`).
const PATCH_BYTES: usize = 5;
/// Most custom allocator functions (the agent's table).
pub const MAX_HOOKS: usize = 32;

/// What a custom allocator function does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocFnRole {
    /// Returns a new block of `size` (times `count`) bytes: argument
    /// numbers, from 1.
    Alloc {
        /// The argument holding the size.
        size: u8,
        /// The argument holding a count the size is multiplied by.
        count: Option<u8>,
        /// The argument naming the arena (pool) the block comes from, which
        /// a reset of that arena releases.
        arena: Option<u8>,
    },
    /// Releases the block its argument `ptr` points to.
    Free {
        /// The argument holding the pointer.
        ptr: u8,
    },
    /// Releases the blocks handed out from the arena its argument names
    /// (`Some`), or every block the custom allocators handed out (a bump
    /// allocator's reset).
    Reset {
        /// The argument naming the arena.
        arena: Option<u8>,
    },
}

/// `--alloc-fn NAME:size=ARGn[,count=ARGm][,arena=ARGk]`,
/// `NAME:free[=ARGn]`, `NAME:reset[=ARGk]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocFnSpec {
    /// The function, as in `-f`.
    pub name: String,
    /// What it does.
    pub role: AllocFnRole,
}

impl std::str::FromStr for AllocFnSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<AllocFnSpec, String> {
        let fail = |why: &str| {
            format!(
                "--alloc-fn {text:?}: {why} (expected NAME:size=ARGn[,count=ARGm][,arena=ARGk], NAME:free[=ARGn] or \
                 NAME:reset[=ARGk])"
            )
        };
        let (name, rest) = text.rsplit_once(':').ok_or_else(|| fail("no ':'"))?;
        if name.is_empty() || name.ends_with(':') {
            return Err(fail("no function name"));
        }
        let arg = |v: &str| -> Result<u8, String> {
            let n = v.strip_prefix("ARG").or_else(|| v.strip_prefix("arg")).unwrap_or(v);
            match n.parse::<u8>() {
                Ok(n @ 1..=6) => Ok(n),
                _ => Err(fail(&format!("{v:?} is not ARG1..ARG6 (integer arguments in registers)"))),
            }
        };
        let (mut size, mut count, mut arena, mut free, mut reset) = (None, None, None, None, None);
        for part in rest.split(',') {
            match part.split_once('=') {
                Some(("size", v)) => size = Some(arg(v)?),
                Some(("count", v)) => count = Some(arg(v)?),
                Some(("arena", v)) => arena = Some(arg(v)?),
                Some(("free", v)) => free = Some(arg(v)?),
                Some(("reset", v)) => reset = Some(Some(arg(v)?)),
                None if part == "free" => free = Some(1),
                None if part == "reset" => reset = Some(None),
                _ => return Err(fail(&format!("unknown part {part:?}"))),
            }
        }
        let role = match (size, count, arena, free, reset) {
            (Some(size), count, arena, None, None) => AllocFnRole::Alloc { size, count, arena },
            (None, None, None, Some(ptr), None) => AllocFnRole::Free { ptr },
            (None, None, None, None, Some(arena)) => AllocFnRole::Reset { arena },
            (None, Some(_), ..) | (None, _, Some(_), ..) => return Err(fail("count= and arena= go with size=")),
            _ => return Err(fail("one of size=, free or reset")),
        };
        Ok(AllocFnSpec { name: name.to_string(), role })
    }
}

/// A function to patch, as the agent needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    /// What the user asked for.
    pub spec: AllocFnSpec,
    /// The function's name as found (demangled).
    pub found: String,
    /// Link-time address (the agent adds the executable's load bias).
    pub address: u64,
    /// The bytes the patch replaces, whole instructions, as in the file.
    pub original: Vec<u8>,
    /// What the trampoline runs in their place.
    pub moved: Vec<u8>,
    /// The 4-byte relative fields in `moved` to aim from where the agent
    /// puts it.
    pub fixups: Vec<Fixup>,
}

/// A rel32 field of a moved instruction (a branch, or a RIP-relative
/// operand): the agent writes `target + bias - (trampoline + end)` at
/// `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixup {
    /// Where the field is in the moved bytes.
    pub offset: usize,
    /// Where its instruction ends (what the field is relative to).
    pub end: usize,
    /// The link-time address it means.
    pub target: u64,
}

/// The moved instructions: original bytes, replacement, fixups.
type Displaced = (Vec<u8>, Vec<u8>, Vec<Fixup>);

/// Finds each custom allocator function in the executable and works out
/// what to move.
pub fn plan_hooks(specs: &[AllocFnSpec], exe: &Path) -> Result<Vec<Hook>, InstrumentError> {
    if specs.len() > MAX_HOOKS {
        return Err(InstrumentError::AllocFn {
            name: specs[MAX_HOOKS].name.clone(),
            reason: format!("at most {MAX_HOOKS} functions can be declared"),
        });
    }
    let symbols = decoder::symbols::ElfSymbols::load(exe, &decoder::symbols::SymbolPaths::default())?;
    let data =
        std::fs::read(exe).map_err(|cause| InstrumentError::Spawn { program: exe.display().to_string(), cause })?;
    specs
        .iter()
        .map(|spec| {
            let fail = |reason: String| InstrumentError::AllocFn { name: spec.name.clone(), reason };
            let function = FunctionSpec::parse(&spec.name);
            if function.module.is_some() {
                return Err(fail("only functions of the program itself can be declared, not of its libraries".into()));
            }
            let (address, found) = match crate::entry::plan(&function, &symbols, exe) {
                Ok(Plan::InExecutable { address, name }) => (address, name),
                Ok(Plan::Deferred { .. }) if !symbols.has_symtab => {
                    return Err(fail(format!("{} is stripped: its functions have no names", exe.display())));
                }
                Ok(Plan::Deferred { .. }) => {
                    return Err(fail(format!(
                        "{} has no function of that name (functions of its libraries cannot be declared)",
                        exe.display()
                    )));
                }
                Err(e) => return Err(fail(decoder::symbols::error_chain(&e))),
            };
            let size = symbols.functions.iter().find(|f| f.address == address).map_or(0, |f| f.size);
            let code = code_at(&data, address, size).ok_or_else(|| fail("its code is not in the file".into()))?;
            let (original, moved, fixups) = displaced_prologue(code, address).map_err(fail)?;
            Ok(Hook { spec: spec.clone(), found, address, original, moved, fixups })
        })
        .collect()
}

/// The bytes of `[address, address + size)` in the executable's file.
fn code_at(data: &[u8], address: u64, size: u64) -> Option<&[u8]> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(data).ok()?;
    let section = file.sections().find(|s| s.address() <= address && address < s.address() + s.size())?;
    let bytes = section.data().ok()?;
    let start = (address - section.address()) as usize;
    let end = if size == 0 { bytes.len() } else { (start + size as usize).min(bytes.len()) };
    bytes.get(start..end)
}

/// The whole instructions at the start of `code` (a function at
/// `address`) that the patched jump covers, what replaces them in the
/// trampoline, and the fields to aim; or why they cannot be moved.
pub fn displaced_prologue(code: &[u8], address: u64) -> Result<Displaced, String> {
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let (mut original, mut moved, mut fixups) = (0usize, Vec::new(), Vec::new());
    while original < PATCH_BYTES {
        if !decoder.can_decode() {
            return Err(format!("it is shorter than the {PATCH_BYTES} bytes of the jump patched at its entry"));
        }
        let instr = decoder.decode();
        if instr.is_invalid() {
            return Err(format!("its code at {:#x} does not decode", instr.ip()));
        }
        let start = (instr.ip() - address) as usize;
        let bytes = &code[start..start + instr.len()];
        let at = moved.len();
        match instr.flow_control() {
            FlowControl::Next if instr.is_ip_rel_memory_operand() => {
                let offsets = decoder.get_constant_offsets(&instr);
                if offsets.displacement_size() != 4 {
                    return Err(format!("an operand of {instr} cannot be re-aimed"));
                }
                moved.extend_from_slice(bytes);
                let target = instr.ip_rel_memory_address();
                fixups.push(Fixup { offset: at + offsets.displacement_offset(), end: at + bytes.len(), target });
            }
            FlowControl::Next => moved.extend_from_slice(bytes),
            // Relative branches become their rel32 forms, aimed by the agent.
            FlowControl::ConditionalBranch if instr.is_jcc_short_or_near() => {
                moved.extend_from_slice(&[0x0f, 0x80 | (instr.condition_code() as u8 - 1)]);
                moved.extend_from_slice(&[0; 4]);
                fixups.push(Fixup { offset: at + 2, end: at + 6, target: instr.near_branch_target() });
            }
            FlowControl::UnconditionalBranch if instr.is_jmp_short_or_near() => {
                moved.extend_from_slice(&[0xe9, 0, 0, 0, 0]);
                fixups.push(Fixup { offset: at + 1, end: at + 5, target: instr.near_branch_target() });
            }
            FlowControl::Call if instr.is_call_near() => {
                moved.extend_from_slice(&[0xe8, 0, 0, 0, 0]);
                fixups.push(Fixup { offset: at + 1, end: at + 5, target: instr.near_branch_target() });
            }
            _ => {
                return Err(format!(
                    "its first {PATCH_BYTES} bytes hold {instr} (at {:#x}), which cannot be moved",
                    instr.ip()
                ));
            }
        }
        original += instr.len();
    }
    // Nothing in the function may jump into the bytes the patch overwrites.
    let mut rest = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    while rest.can_decode() {
        let instr = rest.decode();
        let target = instr.near_branch_target();
        if matches!(
            instr.flow_control(),
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch | FlowControl::Call
        ) && target > address
            && target < address + original as u64
        {
            return Err(format!(
                "{instr} at {:#x} jumps into its first {original} bytes, which the patch overwrites",
                instr.ip()
            ));
        }
    }
    Ok((code[..original].to_vec(), moved, fixups))
}

/// The agent's description of the hooks: one per line (`;`), each
/// `ROLE SIZE COUNT PTR ADDRESS ORIGINAL MOVED FIXUPS` with ROLE `a`, `f`
/// or `r`, argument numbers (0: none; PTR is the pointer freed, or the
/// arena of an alloc or a reset), the link-time address in hex, the
/// original and moved bytes in hex and the fixups as `OFFSET:END:TARGET`
/// (target in hex) separated by commas (`-`: none).
pub fn agent_env(hooks: &[Hook]) -> String {
    hooks
        .iter()
        .map(|h| {
            let (role, size, count, ptr) = match h.spec.role {
                AllocFnRole::Alloc { size, count, arena } => ('a', size, count.unwrap_or(0), arena.unwrap_or(0)),
                AllocFnRole::Free { ptr } => ('f', 0, 0, ptr),
                AllocFnRole::Reset { arena } => ('r', 0, 0, arena.unwrap_or(0)),
            };
            let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
            let fixups = if h.fixups.is_empty() {
                "-".to_string()
            } else {
                h.fixups.iter().map(|f| format!("{}:{}:{:x}", f.offset, f.end, f.target)).collect::<Vec<_>>().join(",")
            };
            format!("{role} {size} {count} {ptr} {:x} {} {} {fixups}", h.address, hex(&h.original), hex(&h.moved))
        })
        .collect::<Vec<_>>()
        .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let parse = |t: &str| t.parse::<AllocFnSpec>();
        assert_eq!(
            parse("pool_alloc:size=ARG2,count=ARG3"),
            Ok(AllocFnSpec {
                name: "pool_alloc".into(),
                role: AllocFnRole::Alloc { size: 2, count: Some(3), arena: None }
            })
        );
        assert_eq!(parse("pool_free:free=ARG2").map(|s| s.role), Ok(AllocFnRole::Free { ptr: 2 }));
        assert_eq!(parse("release:free").map(|s| s.role), Ok(AllocFnRole::Free { ptr: 1 }));
        assert_eq!(parse("arena_reset:reset").map(|s| s.role), Ok(AllocFnRole::Reset { arena: None }));
        assert_eq!(parse("pool_reset:reset=ARG1").map(|s| s.role), Ok(AllocFnRole::Reset { arena: Some(1) }));
        assert_eq!(
            parse("pool_alloc:size=2,arena=1").map(|s| s.role),
            Ok(AllocFnRole::Alloc { size: 2, count: None, arena: Some(1) })
        );
        assert_eq!(parse("ns::pool::get:size=1").map(|s| s.name), Ok("ns::pool::get".to_string()));
        for bad in [
            "pool_alloc",
            "pool_alloc:size=ARG7",
            "pool_alloc:count=ARG1",
            "x:size=1,free",
            ":reset",
            "x:big",
            "x:arena=1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prologues_are_moved_whole_with_relative_fields_listed() {
        // endbr64; push rbp; mov rbp, rsp
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xc3];
        assert_eq!(displaced_prologue(&code, 0x1000), Ok((code[..5].to_vec(), code[..5].to_vec(), vec![])));
        // mov rax, [rip + 0x100]; ret: the operand means 0x1107.
        let code = [0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3];
        let fixup = Fixup { offset: 3, end: 7, target: 0x1107 };
        assert_eq!(displaced_prologue(&code, 0x1000), Ok((code[..7].to_vec(), code[..7].to_vec(), vec![fixup])));
        // cmp rsi, 0x40; ja +0x20 (to 0x1026): the short jump becomes
        // ja rel32 aimed at 0x1026.
        let code = [0x48, 0x83, 0xfe, 0x40, 0x77, 0x20, 0xc3];
        let (original, moved, fixups) = displaced_prologue(&code, 0x1000).expect("movable");
        assert_eq!(original, code[..6].to_vec());
        assert_eq!(moved, vec![0x48, 0x83, 0xfe, 0x40, 0x0f, 0x87, 0, 0, 0, 0]);
        assert_eq!(fixups, vec![Fixup { offset: 6, end: 10, target: 0x1026 }]);
        // An indirect jump or a return cannot be moved.
        let refused = |code: &[u8], says: &str| displaced_prologue(code, 0x1000).is_err_and(|e| e.contains(says));
        assert!(refused(&[0xff, 0xe0, 0x90, 0x90, 0x90, 0x90], "cannot be moved"));
        assert!(displaced_prologue(&[0xc3], 0x1000).is_err());
        // push rbx; push rbp; push r12; nop; nop; jmp back to 0x1002.
        let code = [0x53, 0x55, 0x41, 0x54, 0x90, 0x90, 0xeb, 0xfa, 0xc3];
        assert!(refused(&code, "jumps into"));
    }
}
