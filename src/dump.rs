//! `linetrace dump`: every event of a trace as text.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cli::DumpArgs;

/// Prints one line per event.
pub fn dump(args: DumpArgs) -> Result<()> {
    use trace_rt::format::{Event, TraceReader};
    let mut reader = TraceReader::open(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut n = 0u64;
    while let Some(rec) = reader.next_record().with_context(|| format!("reading {}", args.file.display()))? {
        if args.limit.is_some_and(|l| n >= l) {
            break;
        }
        n += 1;
        match rec.event {
            Event::Access { site, addr } => {
                let s = reader.sites()[site as usize];
                writeln!(out, "{} access {:?} pc={:#x} addr={addr:#x} size={}", rec.thread, s.kind, s.pc, s.size)?;
            }
            Event::AccessSized { site, addr, size } => {
                let s = reader.sites()[site as usize];
                writeln!(
                    out,
                    "{} access {:?} pc={:#x} addr={addr:#x} size={size} elem={} rep",
                    rec.thread, s.kind, s.pc, s.size
                )?;
            }
            Event::Alloc(a) => writeln!(
                out,
                "{} alloc {} size={} align={} in={:#x} out={:#x} callsite={:#x}",
                rec.thread,
                a.kind.name(),
                a.size,
                a.align,
                a.ptr_in,
                a.ptr_out,
                a.callsite
            )?,
            Event::Call { callsite, target, sp } => {
                writeln!(out, "{} call callsite={callsite:#x} target={target:#x} sp={sp:#x}", rec.thread)?
            }
            Event::TailCall { callsite, target, sp } => {
                writeln!(out, "{} tailcall callsite={callsite:#x} target={target:#x} sp={sp:#x}", rec.thread)?
            }
            Event::Return { sp } => writeln!(out, "{} return sp={sp:#x}", rec.thread)?,
            Event::InvocationStart { index, pc, sp } => {
                writeln!(out, "{} invocation-start index={index} pc={pc:#x} sp={sp:#x}", rec.thread)?
            }
            Event::Signal { signo, pc, addr } => {
                writeln!(out, "{} signal signo={signo} pc={pc:#x} addr={addr:#x}", rec.thread)?
            }
            other => writeln!(out, "{} {other:?}", rec.thread)?,
        }
    }
    if let Some(end) = reader.end() {
        writeln!(out, "# end: {}", end.describe())?;
    }
    Ok(())
}
