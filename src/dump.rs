//! `linetrace dump`: every event of a trace, one per line, as text
//! (`THREAD EVENT key=value...`) or JSON lines. Both come from one list of
//! fields per event ([`fields`]), so they cannot drift apart; the format is
//! documented in `linetrace dump --help`.

use std::io::Write;

use anyhow::{Context, Result};
use serde_json::{Map, Value};
use trace_rt::format::{AccessKind, Damage, Event, Record, Site, TraceReader, TruncationReason};

use crate::cli::DumpArgs;

/// A field value: addresses print as hex, counts as decimal.
enum Field {
    Hex(u64),
    Unsigned(u64),
    Signed(i64),
    Text(String),
}

/// The event's name and fields.
fn fields(rec: &Record, sites: &[Site], strings: &[String]) -> (&'static str, Vec<(&'static str, Field)>) {
    use Field::*;
    let kind = |k: AccessKind| {
        Text(
            match k {
                AccessKind::Read => "read",
                AccessKind::Write => "write",
                AccessKind::Modify => "modify",
            }
            .to_string(),
        )
    };
    let site_of = |id: u32| sites.get(id as usize).copied().unwrap_or(Site::UNDEFINED);
    match rec.event {
        Event::Access { site, addr } => {
            let s = site_of(site);
            let f = vec![
                ("kind", kind(s.kind)),
                ("pc", Hex(s.pc)),
                ("addr", Hex(addr)),
                ("size", Unsigned(s.size.into())),
                ("site", Unsigned(site.into())),
            ];
            ("access", f)
        }
        Event::AccessSized { site, addr, size } => {
            let s = site_of(site);
            let f = vec![
                ("kind", kind(s.kind)),
                ("pc", Hex(s.pc)),
                ("addr", Hex(addr)),
                ("size", Unsigned(size)),
                ("site", Unsigned(site.into())),
                ("range", Unsigned(1)),
                ("elem", Unsigned(s.size.into())),
            ];
            ("access", f)
        }
        Event::Call { callsite, target, sp } => {
            ("call", vec![("callsite", Hex(callsite)), ("target", Hex(target)), ("sp", Hex(sp))])
        }
        Event::TailCall { callsite, target, sp } => {
            ("tailcall", vec![("callsite", Hex(callsite)), ("target", Hex(target)), ("sp", Hex(sp))])
        }
        Event::Return { sp } => ("return", vec![("sp", Hex(sp))]),
        Event::Alloc(a) => (
            "alloc",
            vec![
                ("fn", Text(a.kind.name().to_string())),
                ("size", Unsigned(a.size)),
                ("align", Unsigned(a.align)),
                ("in", Hex(a.ptr_in)),
                ("out", Hex(a.ptr_out)),
                ("callsite", Hex(a.callsite)),
            ],
        ),
        Event::InvocationStart { index, pc, sp } => {
            ("invocation-start", vec![("index", Unsigned(index.into())), ("pc", Hex(pc)), ("sp", Hex(sp))])
        }
        Event::InvocationEnd { index } => ("invocation-end", vec![("index", Unsigned(index.into()))]),
        Event::InvocationSkipped { pc } => ("invocation-skipped", vec![("pc", Hex(pc))]),
        Event::AllocDetail { usable, time_ns } => {
            ("alloc-detail", vec![("usable", Unsigned(usable)), ("time_ns", Unsigned(time_ns))])
        }
        Event::AllocStack { stack } => ("alloc-stack", vec![("stack", Unsigned(stack.into()))]),
        Event::ProgramBreak { from, to } => ("program-break", vec![("from", Hex(from)), ("to", Hex(to))]),
        Event::CustomAllocation(c) => (
            "custom-alloc",
            vec![
                ("allocator", Unsigned(c.allocator.into())),
                ("op", Unsigned(c.op as u64)),
                ("size", Unsigned(c.size)),
                ("in", Hex(c.ptr_in)),
                ("out", Hex(c.ptr_out)),
                ("callsite", Hex(c.callsite)),
            ],
        ),
        Event::ThreadStart { parent } => ("thread-start", vec![("parent", Unsigned(parent.into()))]),
        Event::ThreadExit { status } => ("thread-exit", vec![("status", Signed(status.into()))]),
        Event::Signal { signo, pc, addr } => {
            ("signal", vec![("signo", Signed(signo.into())), ("pc", Hex(pc)), ("addr", Hex(addr))])
        }
        Event::Stepped { count } => ("stepped", vec![("count", Unsigned(count))]),
        Event::Truncated { reason } => {
            let r = match reason {
                TruncationReason::Interrupted => "interrupted",
                TruncationReason::TargetKilled => "target-killed",
                TruncationReason::RecorderStopped => "recorder-stopped",
            };
            ("truncated", vec![("reason", Text(r.to_string()))])
        }
        Event::Exec { path } => {
            let p = strings.get(path as usize).cloned().unwrap_or_default();
            ("exec", vec![("path", Text(p))])
        }
    }
}

/// `key=value` text; strings are quoted (JSON rules) when they could be
/// mistaken for more fields.
fn text_value(f: &Field) -> String {
    match f {
        Field::Hex(v) => format!("{v:#x}"),
        Field::Unsigned(v) => v.to_string(),
        Field::Signed(v) => v.to_string(),
        Field::Text(s) if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_".contains(c)) => {
            s.clone()
        }
        Field::Text(s) => Value::String(s.clone()).to_string(),
    }
}

fn json_value(f: Field) -> Value {
    match f {
        Field::Hex(v) => Value::String(format!("{v:#x}")),
        Field::Unsigned(v) => Value::from(v),
        Field::Signed(v) => Value::from(v),
        Field::Text(s) => Value::String(s),
    }
}

/// Prints one line per event.
pub fn dump(args: DumpArgs) -> Result<()> {
    crate::progress::trace_file_len(&args.file)?;
    let mut reader = TraceReader::open(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut n = 0u64;
    while let Some(rec) = reader.next_record().with_context(|| format!("reading {}", args.file.display()))? {
        if args.limit.is_some_and(|l| n >= l) {
            break;
        }
        n += 1;
        let (name, list) = fields(&rec, reader.sites(), reader.strings());
        if args.json {
            let mut obj = Map::new();
            obj.insert("thread".into(), Value::from(rec.thread));
            obj.insert("event".into(), Value::from(name));
            for (k, v) in list {
                obj.insert(k.into(), json_value(v));
            }
            writeln!(out, "{}", Value::Object(obj))?;
        } else {
            write!(out, "{} {name}", rec.thread)?;
            for (k, v) in &list {
                write!(out, " {k}={}", text_value(v))?;
            }
            writeln!(out)?;
        }
    }
    let status = reader.end().map(|e| e.describe());
    if args.json {
        let damage: Vec<Value> = reader
            .damage()
            .iter()
            .map(|d| serde_json::json!({"offset": d.offset, "bytes": d.bytes, "what": d.what}))
            .collect();
        writeln!(out, "{}", serde_json::json!({"event": "end", "status": status, "damage": damage}))?;
    } else {
        if let Some(s) = status {
            writeln!(out, "# end: {s}")?;
        }
        if !reader.damage().is_empty() {
            writeln!(out, "# damage: {}", Damage::describe(reader.damage()))?;
        }
    }
    Ok(())
}
