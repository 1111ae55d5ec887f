//! Turning the records the translated code wrote into trace events — the
//! same events, in the same order, as the ptrace recorder writes for the
//! same execution (the event rules themselves are in `event_rules`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use trace_rt::format::{AllocKind, Event, PackedKind, PackedRun, Site, SiteId};

use super::codegen::{CodegenError, Implying, Tags};
use super::layout::{self, RecordKind};
use crate::event_rules;

/// The kinds of records, by tag.
#[derive(Default)]
pub struct RecordTable {
    kinds: Vec<RecordKind>,
    tags: HashMap<RecordKind, u16>,
    /// Per tag: what the trace writer encodes a record of it as, in its
    /// tight loop (plain accesses, calls, an indirect call's target,
    /// returns), or `PackedKind::Other` for the records converted here.
    packed: Vec<PackedKind>,
    /// `packed` as handed to the writer; made again after it grew.
    shared: Option<Arc<[PackedKind]>>,
    /// Sites defined for accesses that imply others, by what they are.
    implying: HashMap<Site, SiteId>,
    /// Each such site: what it is, the instructions of the accesses it
    /// implies, and the site of the same access implying nothing.
    implying_sites: HashMap<SiteId, Implying>,
}

/// A [`RecordTable`] whose implying sites are defined through `define`
/// (the trace writer's `add_site`): what block translation needs.
pub struct DefiningTags<'a> {
    /// The table.
    pub table: &'a mut RecordTable,
    /// Defines a site in the trace, returning its id.
    pub define: &'a mut dyn FnMut(Site) -> SiteId,
}

impl Tags for DefiningTags<'_> {
    fn tag(&mut self, kind: RecordKind) -> Result<u16, CodegenError> {
        self.table.tag(kind)
    }

    fn implying_site(&mut self, implying: Implying) -> Option<SiteId> {
        Some(self.table.implying_site(implying, self.define))
    }

    fn defines_sites(&self) -> bool {
        // Implying sites take tags of their own: once tags run short, every
        // access is recorded instead, so that a program with many sites
        // still records (a block needs far fewer tags than this margin).
        self.table.kinds.len() < usize::from(u16::MAX) - IMPLYING_MARGIN
    }
}

/// Tags kept for plain records once implying sites stop being made.
pub(crate) const IMPLYING_MARGIN: usize = 4096;

impl Tags for RecordTable {
    fn tag(&mut self, kind: RecordKind) -> Result<u16, CodegenError> {
        if let Some(&t) = self.tags.get(&kind) {
            return Ok(t);
        }
        let t = u16::try_from(self.kinds.len()).map_err(|_| CodegenError::TooManyTags)?;
        self.kinds.push(kind);
        self.tags.insert(kind, t);
        self.packed.push(match kind {
            RecordKind::Access(site) => PackedKind::Access(site, self.implied_len(site) as u8),
            RecordKind::Call { callsite, target: Some(target) } => PackedKind::Call { callsite, target },
            RecordKind::Call { callsite, target: None } => PackedKind::IndirectCall { callsite },
            // A jump's target too: the writer takes it only after a call.
            RecordKind::Target => PackedKind::CallTarget,
            RecordKind::Return => PackedKind::Return,
            _ => PackedKind::Other,
        });
        self.shared = None;
        Ok(t)
    }
}

impl RecordTable {
    /// The id of an implying access's site, defined with `define` the
    /// first time.
    pub fn implying_site(&mut self, implying: Implying, define: &mut dyn FnMut(Site) -> SiteId) -> SiteId {
        if let Some(&id) = self.implying.get(&implying.site) {
            return id;
        }
        let id = define(implying.site);
        self.implying.insert(implying.site, id);
        self.implying_sites.insert(id, implying);
        id
    }

    /// How many accesses an access of `site` implies.
    pub fn implied_len(&self, site: SiteId) -> usize {
        self.implying_sites.get(&site).map_or(0, |i| i.site.implied.len())
    }

    /// The site an access of `site` stands for when the instruction at
    /// `faulted` faulted inside its window: one implying only the accesses
    /// before that instruction. `None` when that is `site` itself.
    pub fn cut_before(&mut self, site: SiteId, faulted: u64, define: &mut dyn FnMut(Site) -> SiteId) -> Option<SiteId> {
        let mut cut = *self.implying_sites.get(&site)?;
        let n = cut.site.implied.len();
        let keep = cut.pcs[..n].iter().take_while(|&&pc| pc < faulted).count();
        if keep == n {
            return None;
        }
        if keep == 0 {
            return Some(cut.plain);
        }
        cut.site.implied.truncate(keep);
        Some(self.implying_site(cut, define))
    }

    /// The kind a tag stands for.
    pub fn kind(&self, tag: u16) -> Option<RecordKind> {
        self.kinds.get(usize::from(tag)).copied()
    }

    /// What each tag's records are as packed events, for
    /// [`trace_rt::format::TraceWriter::push_packed`].
    pub fn packed_kinds(&mut self) -> Arc<[PackedKind]> {
        self.shared.get_or_insert_with(|| Arc::from(&self.packed[..])).clone()
    }
}

/// Where converted events go: runs of plain accesses, calls and returns as
/// the records themselves (packed events, see
/// [`trace_rt::format::TraceWriter::push_packed`]), every other event on
/// its own.
pub trait EventSink {
    /// What a full sink (a writer that failed) returns.
    type Error: From<RecordError>;
    /// Takes the records at the start of `records` that are packed events
    /// ([`RecordTable::packed_kinds`]), in order, up to the first record of
    /// another kind; says how many it took.
    fn leading_events(&mut self, records: &[u64]) -> Result<PackedRun, Self::Error>;
    /// Any other event.
    fn event(&mut self, event: &Event) -> Result<(), Self::Error>;
}

/// A record that did not fit what came before it: the code and the table
/// disagree, which is a bug in the rewriter, reported rather than guessed.
#[derive(Debug, thiserror::Error)]
#[error("record {index} of a drained buffer (tag {tag}) does not fit the records before it")]
pub struct RecordError {
    /// Position in the buffer.
    pub index: usize,
    /// Its tag.
    pub tag: u16,
}

/// A rep-string instruction whose end record is still to come.
#[derive(Default)]
struct RepState {
    starts: Vec<(SiteId, u32, u64)>,
    count: u64,
    flags: u64,
}

/// Converts records to events; keeps what spans two drains of the buffer.
#[derive(Default)]
pub struct Converter {
    awaiting_target: Option<(RecordKind, u64)>,
    rep: RepState,
    alloc: Option<(AllocKind, [u64; 3], Option<u64>)>,
    syscall: (u64, u64, [u64; 2]),
    /// The last call's address: allocator calls are attributed to it, as
    /// the ptrace recorder does.
    pub last_callsite: u64,
    /// Accesses converted so far.
    pub accesses: u64,
    /// Instructions to count beyond one per rep-string instruction (the
    /// ptrace recorder counts each iteration as one), not yet taken.
    pub extra_instructions: u64,
}

impl Converter {
    /// Converts `records`, handing runs of plain accesses and every other
    /// event to `sink` in order.
    pub fn convert<S: EventSink>(
        &mut self,
        records: &[u64],
        table: &RecordTable,
        function_starts: &HashSet<u64>,
        sink: &mut S,
    ) -> Result<(), S::Error> {
        // Plain accesses, calls and returns (nearly every record) are not
        // converted at all: the sink takes each run of them as it is,
        // encoding by tag, and stops at the first record of another kind,
        // which is converted here. Each record is read once.
        let mut index = 0;
        loop {
            if self.awaiting_target.is_none() {
                let run = sink.leading_events(&records[index..])?;
                self.accesses += (run.taken - run.flow + run.implied) as u64;
                self.last_callsite = run.last_callsite.unwrap_or(self.last_callsite);
                index += run.taken;
            }
            let Some(&record) = records.get(index) else { return Ok(()) };
            self.other(index, record, table, function_starts, sink)?;
            index += 1;
        }
    }

    /// Converts record `index`, one the sink did not take (or any record
    /// while a call's or jump's target is awaited).
    fn other<S: EventSink>(
        &mut self,
        index: usize,
        record: u64,
        table: &RecordTable,
        function_starts: &HashSet<u64>,
        sink: &mut S,
    ) -> Result<(), S::Error> {
        let (tag, value) = layout::split(record);
        let mut push = |e: &Event| sink.event(e);
        let bad = || RecordError { index, tag };
        let kind = table.kind(tag).ok_or_else(bad)?;
        if self.awaiting_target.is_some() && kind != RecordKind::Target {
            return Err(bad().into());
        }
        match kind {
            RecordKind::Access(site) => {
                self.accesses += 1 + table.implied_len(site) as u64;
                push(&Event::Access { site, addr: value })?;
            }
            RecordKind::RepStart { site, size } => self.rep.starts.push((site, size, value)),
            RecordKind::RepCount => self.rep.count = value,
            RecordKind::RepFlags => self.rep.flags = value,
            RecordKind::RepEnd => {
                let rep = std::mem::take(&mut self.rep);
                self.extra_instructions += rep.count.wrapping_sub(value).min(rep.count).saturating_sub(1);
                let down = rep.flags & event_rules::DIRECTION_FLAG != 0;
                for (site, size, start) in rep.starts {
                    let Some((addr, bytes)) = event_rules::rep_range(start, rep.count, value, size, down) else {
                        break;
                    };
                    self.accesses += 1;
                    push(&Event::AccessSized { site, addr, size: bytes })?;
                }
            }
            RecordKind::Call { callsite, target: Some(target) } => {
                self.last_callsite = callsite;
                push(&Event::Call { callsite, target, sp: value })?;
            }
            RecordKind::Jump { callsite, target: Some(target), flow } => {
                self.jump(callsite, flow, target, value, function_starts, &mut push)?;
            }
            RecordKind::Call { target: None, .. } | RecordKind::Jump { target: None, .. } => {
                self.awaiting_target = Some((kind, value));
            }
            RecordKind::Target => match self.awaiting_target.take() {
                Some((RecordKind::Call { callsite, .. }, sp)) => {
                    self.last_callsite = callsite;
                    push(&Event::Call { callsite, target: value, sp })?;
                }
                Some((RecordKind::Jump { callsite, flow, .. }, sp)) => {
                    self.jump(callsite, flow, value, sp, function_starts, &mut push)?;
                }
                _ => return Err(bad().into()),
            },
            RecordKind::Return => push(&Event::Return { sp: value })?,
            RecordKind::AllocArg { kind, n } => {
                let (k, args, _) = self.alloc.get_or_insert((kind, [0; 3], None));
                *k = kind;
                if let Some(slot) = args.get_mut(usize::from(n)) {
                    *slot = value;
                }
            }
            RecordKind::AllocResult => {
                let Some((kind, args, _)) = self.alloc else { return Err(bad().into()) };
                if kind == AllocKind::PosixMemalign {
                    self.alloc = Some((kind, args, Some(value)));
                } else {
                    self.alloc = None;
                    let alloc = event_rules::allocator_call(kind, args, value, self.last_callsite, |_| None);
                    push(&Event::Alloc(alloc))?;
                }
            }
            RecordKind::AllocStored => {
                let Some((kind, args, Some(ret))) = self.alloc.take() else { return Err(bad().into()) };
                let alloc = event_rules::allocator_call(kind, args, ret, self.last_callsite, |_| Some(value));
                push(&Event::Alloc(alloc))?;
            }
            RecordKind::SyscallNumber { pc } => self.syscall = (pc, value, [0; 2]),
            RecordKind::SyscallArg(n) => {
                if let Some(slot) = self.syscall.2.get_mut(usize::from(n)) {
                    *slot = value;
                }
            }
            RecordKind::SyscallResult => {
                let (pc, nr, [a0, a1]) = self.syscall;
                if let Some(alloc) = event_rules::syscall_allocation(nr, a0, a1, value, pc) {
                    push(&Event::Alloc(alloc))?;
                }
            }
        }
        Ok(())
    }

    fn jump<E>(
        &mut self,
        callsite: u64,
        flow: layout::Flow,
        target: u64,
        sp: u64,
        function_starts: &HashSet<u64>,
        push: &mut impl FnMut(&Event) -> Result<(), E>,
    ) -> Result<(), E> {
        let direct = (flow != layout::Flow::Indirect).then_some(target);
        if event_rules::is_tail_call(flow.flow_control(), direct, target, function_starts) {
            push(&Event::TailCall { callsite, target, sp })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::layout::Flow;

    fn rec(table: &mut RecordTable, kind: RecordKind, value: u64) -> u64 {
        trace_rt::format::pack_access(table.tag(kind).expect("tag"), value)
    }

    /// A sink that unpacks runs of packed events as the trace writer
    /// encodes them.
    struct Events {
        kinds: Arc<[PackedKind]>,
        events: Vec<Event>,
    }

    impl EventSink for Events {
        type Error = RecordError;

        fn leading_events(&mut self, records: &[u64]) -> Result<PackedRun, RecordError> {
            let mut run = PackedRun::default();
            let kind = |r: u64| {
                let (tag, value) = trace_rt::format::unpack_access(r);
                (self.kinds.get(usize::from(tag)).copied().unwrap_or(PackedKind::Other), value)
            };
            while let Some(&record) = records.get(run.taken) {
                let (event, n) = match kind(record) {
                    (PackedKind::Access(site, _), addr) => (Event::Access { site, addr }, 1),
                    (PackedKind::Call { callsite, target }, sp) => (Event::Call { callsite, target, sp }, 1),
                    (PackedKind::IndirectCall { callsite }, sp) => match records.get(run.taken + 1).map(|&r| kind(r)) {
                        Some((PackedKind::CallTarget, target)) => (Event::Call { callsite, target, sp }, 2),
                        _ => break,
                    },
                    (PackedKind::Return, sp) => (Event::Return { sp }, 1),
                    (PackedKind::CallTarget | PackedKind::Other, _) => break,
                };
                if let Event::Call { callsite, .. } = event {
                    run.last_callsite = Some(callsite);
                }
                run.flow += if matches!(event, Event::Access { .. }) { 0 } else { n };
                run.taken += n;
                self.events.push(event);
            }
            Ok(run)
        }

        fn event(&mut self, event: &Event) -> Result<(), RecordError> {
            self.events.push(*event);
            Ok(())
        }
    }

    fn convert(table: &mut RecordTable, records: &[u64], starts: &HashSet<u64>) -> Result<Vec<Event>, RecordError> {
        let mut sink = Events { kinds: table.packed_kinds(), events: Vec::new() };
        Converter::default().convert(records, table, starts, &mut sink)?;
        Ok(sink.events)
    }

    /// Records cut into two drains anywhere (between an indirect call and
    /// its target's record too) convert to the events of the whole, and the
    /// allocator call after them is attributed to the last call.
    #[test]
    fn records_split_across_drains_convert_as_a_whole() {
        let mut t = RecordTable::default();
        let starts = HashSet::new();
        let records = [
            rec(&mut t, RecordKind::Access(3), 0x7000),
            rec(&mut t, RecordKind::Call { callsite: 0x1000, target: None }, 0x7ff0),
            rec(&mut t, RecordKind::Target, 0x2000),
            rec(&mut t, RecordKind::Access(4), 0x7008),
            rec(&mut t, RecordKind::Return, 0x7ff8),
            rec(&mut t, RecordKind::Call { callsite: 0x1010, target: Some(0x3000) }, 0x7ff0),
            rec(&mut t, RecordKind::AllocArg { kind: AllocKind::Malloc, n: 0 }, 24),
            rec(&mut t, RecordKind::AllocResult, 0x9000),
        ];
        let whole = convert(&mut t, &records, &starts).expect("converts");
        assert_eq!(whole[1], Event::Call { callsite: 0x1000, target: 0x2000, sp: 0x7ff0 });
        let malloc = event_rules::allocator_call(AllocKind::Malloc, [24, 0, 0], 0x9000, 0x1010, |_| None);
        assert_eq!(whole.last(), Some(&Event::Alloc(malloc)), "attributed to the direct call before it");
        for cut in 0..=records.len() {
            let mut sink = Events { kinds: t.packed_kinds(), events: Vec::new() };
            let mut converter = Converter::default();
            converter.convert(&records[..cut], &t, &starts, &mut sink).expect("first drain");
            converter.convert(&records[cut..], &t, &starts, &mut sink).expect("second drain");
            assert_eq!(sink.events, whole, "cut at {cut}");
            assert_eq!(converter.accesses, 2);
        }
    }

    #[test]
    fn records_become_the_events_of_the_ptrace_recorder() {
        let mut t = RecordTable::default();
        let starts = HashSet::from([0x2000]);
        let records = [
            rec(&mut t, RecordKind::Access(3), 0x7000),
            rec(&mut t, RecordKind::Call { callsite: 0x1000, target: None }, 0x7ff0),
            rec(&mut t, RecordKind::Target, 0x2000),
            rec(&mut t, RecordKind::Jump { callsite: 0x2004, target: None, flow: Flow::Indirect }, 0x7ff0),
            rec(&mut t, RecordKind::Target, 0x2100),
            rec(&mut t, RecordKind::AllocArg { kind: AllocKind::Calloc, n: 0 }, 4),
            rec(&mut t, RecordKind::AllocArg { kind: AllocKind::Calloc, n: 1 }, 8),
            rec(&mut t, RecordKind::AllocArg { kind: AllocKind::Calloc, n: 2 }, 99),
            rec(&mut t, RecordKind::AllocResult, 0x9000),
            rec(&mut t, RecordKind::Return, 0x7ff8),
            rec(&mut t, RecordKind::RepStart { site: 5, size: 8 }, 0x5000),
            rec(&mut t, RecordKind::RepCount, 10),
            rec(&mut t, RecordKind::RepFlags, 0x202),
            rec(&mut t, RecordKind::RepEnd, 0),
        ];
        let events = convert(&mut t, &records, &starts).expect("converts");
        let calloc = event_rules::allocator_call(AllocKind::Calloc, [4, 8, 99], 0x9000, 0x1000, |_| None);
        assert_eq!(
            events,
            vec![
                Event::Access { site: 3, addr: 0x7000 },
                Event::Call { callsite: 0x1000, target: 0x2000, sp: 0x7ff0 },
                Event::Alloc(calloc),
                Event::Return { sp: 0x7ff8 },
                Event::AccessSized { site: 5, addr: 0x5000, size: 80 },
            ],
            "an indirect jump to a non-function is no tail call"
        );
    }

    #[test]
    fn a_record_out_of_place_is_an_error() {
        let mut t = RecordTable::default();
        let records =
            [rec(&mut t, RecordKind::Call { callsite: 1, target: None }, 0x10), rec(&mut t, RecordKind::Return, 0x18)];
        assert!(convert(&mut t, &records, &HashSet::new()).is_err());
        assert!(convert(&mut t, &[u64::MAX], &HashSet::new()).is_err(), "unknown tag");
        let access = rec(&mut t, RecordKind::Access(1), 0x20);
        let call = rec(&mut t, RecordKind::Call { callsite: 1, target: None }, 0x10);
        let err = convert(&mut t, &[access, call, access], &HashSet::new()).expect_err("no target after the call");
        assert_eq!(err.index, 2, "an access where the target belongs is out of place, not taken as a run");
    }
}
