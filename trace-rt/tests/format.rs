//! Round-trip, truncation and corruption tests of the trace format.

use proptest::prelude::*;
use trace_rt::format::{
    AccessKind, AllocKind, Allocation, CustomAllocation, CustomOp, Damage, DataMapping, Event, FormatError, Implied,
    ImpliedAccess, MappedRange, Metadata, Module, PackedKind, PackedRun, Record, Site, TargetExit, TraceEnd,
    TraceReader, TraceWriter, Trailer, TruncationReason, pack_access, unpack_access,
};

fn site_strategy() -> impl Strategy<Value = Site> {
    (any::<u64>(), 1u8..16, 0u8..3, 1u32..4096, 1u16..16).prop_map(|(pc, len, k, size, count)| Site {
        pc,
        len,
        kind: [AccessKind::Read, AccessKind::Write, AccessKind::Modify][k as usize],
        size,
        count,
        implied: Implied::NONE,
    })
}

/// Any event, with site ids below `sites`.
fn event_strategy(sites: u32) -> impl Strategy<Value = Event> {
    let alloc = (0usize..9, any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
        |(k, size, align, ptr_in, ptr_out, callsite)| {
            Event::Alloc(Allocation { kind: AllocKind::ALL[k], size, align, ptr_in, ptr_out, callsite })
        },
    );
    prop_oneof![
        // Addresses of either half of the 48-bit space (packable) and any.
        8 => (0..sites, prop_oneof![0u64..1 << 47, 0xffff_8000_0000_0000u64.., any::<u64>()])
            .prop_map(|(site, addr)| Event::Access { site, addr }),
        1 => (0..sites, any::<u64>(), any::<u64>()).prop_map(|(site, addr, size)| Event::AccessSized { site, addr, size }),
        // Calls whose target and stack pointer fit 48 bits (as a packed
        // indirect call) and any.
        1 => (any::<u64>(), prop_oneof![0u64..1 << 47, any::<u64>()], prop_oneof![0u64..1 << 47, any::<u64>()])
            .prop_map(|(callsite, target, sp)| Event::Call { callsite, target, sp }),
        1 => (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(callsite, target, sp)| Event::TailCall { callsite, target, sp }),
        1 => any::<u64>().prop_map(|sp| Event::Return { sp }),
        1 => alloc,
        1 => (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(index, pc, sp)| Event::InvocationStart { index, pc, sp }),
        1 => any::<u32>().prop_map(|index| Event::InvocationEnd { index }),
        1 => any::<u32>().prop_map(|parent| Event::ThreadStart { parent }),
        1 => any::<i32>().prop_map(|status| Event::ThreadExit { status }),
        1 => (any::<i32>(), any::<u64>(), any::<u64>()).prop_map(|(signo, pc, addr)| Event::Signal { signo, pc, addr }),
        1 => any::<u64>().prop_map(|count| Event::Stepped { count }),
        1 => (0usize..3).prop_map(|r| Event::Truncated { reason: [TruncationReason::Interrupted, TruncationReason::TargetKilled, TruncationReason::RecorderStopped][r] }),
        1 => any::<u64>().prop_map(|pc| Event::InvocationSkipped { pc }),
        1 => Just(Event::Exec { path: 0 }),
        1 => (any::<u64>(), any::<u64>()).prop_map(|(usable, time_ns)| Event::AllocDetail { usable, time_ns }),
        1 => Just(Event::AllocStack { stack: 0 }),
        1 => (any::<u64>(), any::<u64>()).prop_map(|(from, to)| Event::ProgramBreak { from, to }),
        1 => (0u8..3, any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(op, size, ptr_in, ptr_out, callsite)| {
            Event::CustomAllocation(trace_rt::format::CustomAllocation {
                allocator: 0,
                op: trace_rt::format::CustomOp::from_u8(op).expect("an op"),
                size,
                ptr_in,
                ptr_out,
                callsite,
            })
        }),
    ]
}

fn metadata() -> Metadata {
    Metadata {
        argv: vec!["./prog".into(), "arg".into()],
        executable: "/tmp/prog".into(),
        build_id: Some("abcdef".into()),
        function: Some("work".into()),
        pid: 42,
        start_unix_ms: 1,
        ..Metadata::new("test")
    }
}

fn module() -> Module {
    Module {
        path: "/tmp/prog".into(),
        build_id: None,
        ranges: vec![MappedRange { start: 0x1000, end: 0x2000, file_offset: 0, perms: "r-xp".into() }],
    }
}

/// The heap as `/proc/PID/maps` names it (written since v7).
fn mapping() -> DataMapping {
    DataMapping { start: 0x5000_0000, end: 0x5002_1000, name: "[heap]".into() }
}

/// Writes `events` (thread, event) with small chunks so that chunking and
/// per-chunk delta restarts are exercised.
fn write(sites: &[Site], events: &[(u32, Event)], trailer: &Trailer, chunk: usize) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &metadata()).expect("header");
    w.set_chunk_target(chunk);
    w.add_modules(&[module()]);
    w.add_mappings(&[mapping()]);
    for s in sites {
        w.add_site(*s);
    }
    w.add_string("/bin/true");
    for (t, e) in events {
        w.push(*t, e).expect("push");
    }
    w.finish(trailer).expect("finish")
}

/// As [`write`], with the events packed where they can be
/// ([`TraceWriter::push_packed`]): the sites are defined as the events come
/// to need them, and the events go one by one and as packed runs, switching
/// every `run` events.
fn write_packed(sites: &[Site], events: &[(u32, Event)], trailer: &Trailer, chunk: usize, run: usize) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &metadata()).expect("header");
    w.set_chunk_target(chunk);
    w.add_modules(&[module()]);
    w.add_string("/bin/true");
    let mut defined = 0;
    for (i, group) in events.chunk_by(|a, b| a.0 == b.0).flat_map(|g| g.chunks(run)).enumerate() {
        let needed = group
            .iter()
            .filter_map(|(_, e)| match e {
                Event::Access { site, .. } | Event::AccessSized { site, .. } => Some(*site as usize + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        while defined < needed {
            assert_eq!(w.add_site(sites[defined]), defined as u32);
            defined += 1;
        }
        let thread = group[0].0;
        if i % 2 == 0 {
            group.iter().try_for_each(|(_, e)| w.push(thread, e)).expect("push");
            continue;
        }
        // Packable runs go packed, the other events one by one.
        let mut packer = Packer::default();
        for (_, e) in group {
            if !packer.pack(e) {
                packer.push_to(&mut w, thread);
                w.push(thread, e).expect("push");
            }
        }
        packer.push_to(&mut w, thread);
    }
    while defined < sites.len() {
        w.add_site(sites[defined]);
        defined += 1;
    }
    w.finish(trailer).expect("finish")
}

/// Packs events into records and a table of what their tags stand for, as
/// the rewrite backend does: accesses, calls (direct, or an indirect call
/// and its target's record), returns.
#[derive(Default)]
struct Packer {
    kinds: Vec<PackedKind>,
    records: Vec<u64>,
    /// The calls and returns among `records`.
    flow: usize,
}

impl Packer {
    /// Packs `e`; false if it does not pack (its values do not survive 48
    /// bits, or it is not an access, call or return).
    fn pack(&mut self, e: &Event) -> bool {
        let fits = |v: u64| unpack_access(pack_access(0, v)).1 == v;
        let packed = match *e {
            Event::Access { site, addr } if fits(addr) => vec![(PackedKind::Access(site, 0), addr)],
            Event::Call { callsite, target, sp } if fits(sp) && callsite % 2 == 0 => {
                vec![(PackedKind::Call { callsite, target }, sp)]
            }
            Event::Call { callsite, target, sp } if fits(sp) && fits(target) => {
                vec![(PackedKind::IndirectCall { callsite }, sp), (PackedKind::CallTarget, target)]
            }
            Event::Return { sp } if fits(sp) => vec![(PackedKind::Return, sp)],
            _ => return false,
        };
        for (kind, value) in packed {
            // Tags in no particular order: a tag taken for its site reads
            // back wrong.
            let tag = match self.kinds.iter().position(|&k| k == kind) {
                Some(t) => t,
                None => {
                    self.kinds.push(kind);
                    self.kinds.len() - 1
                }
            };
            self.flow += usize::from(!matches!(kind, PackedKind::Access(..)));
            self.records.push(pack_access(tag as u16 ^ 0x5a5a, value));
        }
        true
    }

    /// Hands the records packed so far to `w`, which must take them all.
    fn push_to(&mut self, w: &mut TraceWriter<Vec<u8>>, thread: u32) {
        if self.records.is_empty() {
            return;
        }
        let mut table = vec![PackedKind::Other; 1 << 16];
        for (t, &k) in self.kinds.iter().enumerate() {
            table[t ^ 0x5a5a] = k;
        }
        let run = w.push_packed(thread, &self.records, &table).expect("push_packed");
        assert_eq!((run.taken, run.flow), (self.records.len(), self.flow));
        self.records.clear();
        self.flow = 0;
    }
}

fn read_all(bytes: &[u8]) -> Result<(Vec<Record>, TraceEnd, Vec<Site>), FormatError> {
    read_all_with_damage(bytes).map(|(records, end, sites, _)| (records, end, sites))
}

/// Everything a reader tells about a file.
type ReadBack = (Vec<Record>, TraceEnd, Vec<Site>, Vec<Damage>);

fn read_all_with_damage(bytes: &[u8]) -> Result<ReadBack, FormatError> {
    let mut r = TraceReader::new(bytes)?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record()? {
        out.push(rec);
    }
    let end = r.end().cloned().expect("end known after the last record");
    Ok((out, end, r.sites().to_vec(), r.damage().to_vec()))
}

/// As [`read_all_with_damage`], through the decoding pass's fast path:
/// accesses by `next_access`, the rest by `next_record`.
fn read_all_accesses_first(bytes: &[u8]) -> Result<ReadBack, FormatError> {
    let mut r = TraceReader::new(bytes)?;
    let mut out = Vec::new();
    loop {
        if let Some((thread, site, addr)) = r.next_access() {
            out.push(Record { thread, event: Event::Access { site, addr } });
            continue;
        }
        let Some(rec) = r.next_record()? else { break };
        out.push(rec);
    }
    let end = r.end().cloned().expect("end known after the last record");
    Ok((out, end, r.sites().to_vec(), r.damage().to_vec()))
}

/// Both ways of reading `bytes` tell the same (errors included).
fn assert_fast_path_agrees(bytes: &[u8], what: &str) {
    let slow = format!("{:?}", read_all_with_damage(bytes));
    let fast = format!("{:?}", read_all_accesses_first(bytes));
    assert!(slow == fast, "{what}: next_access then next_record read\n{fast}\nnext_record alone\n{slow}");
}

/// Events of one thread keep their order; threads may interleave differently.
fn per_thread(records: &[(u32, Event)]) -> std::collections::BTreeMap<u32, Vec<Event>> {
    let mut m = std::collections::BTreeMap::<u32, Vec<Event>>::new();
    for (t, e) in records {
        m.entry(*t).or_default().push(*e);
    }
    m
}

/// Events whose sites are taken modulo the number of sites (all defined).
fn with_defined_sites(sites: &[Site], events: Vec<(u32, Event)>) -> Vec<(u32, Event)> {
    let n = sites.len() as u32;
    events
        .into_iter()
        .map(|(t, e)| match e {
            Event::Access { site, addr } => (t, Event::Access { site: site % n, addr }),
            Event::AccessSized { site, addr, size } => (t, Event::AccessSized { site: site % n, addr, size }),
            e => (t, e),
        })
        .collect()
}

/// `sites` where every third one implies accesses of sites below it (as a
/// recorder defines them: the implied sites first), at offsets of either
/// sign.
fn with_implied(mut sites: Vec<Site>) -> Vec<Site> {
    for i in (3..sites.len()).step_by(3) {
        let implied = &mut sites[i].implied;
        implied.push(ImpliedAccess { site: (i - 1) as u32, offset: 8 });
        if i % 2 == 0 {
            implied.push(ImpliedAccess { site: 0, offset: -4096 });
        }
    }
    sites
}

/// What a reader hands out for `events` (the slow reference): each access
/// followed by the accesses its site implies.
fn expand(sites: &[Site], events: &[(u32, Event)]) -> Vec<(u32, Event)> {
    let mut out = Vec::new();
    for &(t, e) in events {
        out.push((t, e));
        if let Event::Access { site, addr } = e {
            for a in sites[site as usize].implied.as_slice() {
                out.push((t, Event::Access { site: a.site, addr: addr.wrapping_add(i64::from(a.offset) as u64) }));
            }
        }
    }
    out
}

/// Reads `bytes` back: undamaged, the same sites, ended by `trailer`, each
/// thread's events in order.
fn assert_reads_back(bytes: &[u8], sites: &[Site], events: &[(u32, Event)], trailer: Trailer) {
    let (records, end, read_sites, damage) = read_all_with_damage(bytes).expect("reads back");
    assert!(damage.is_empty(), "{damage:?}");
    assert_eq!(read_sites, sites);
    assert_eq!(end, TraceEnd::Finished(trailer));
    let got: Vec<(u32, Event)> = records.iter().map(|r| (r.thread, r.event)).collect();
    assert_eq!(per_thread(&got), per_thread(events));
}

proptest! {
    /// Packed events write the file their events do.
    #[test]
    fn packed_round_trip(
        sites in prop::collection::vec(site_strategy(), 1..20),
        events in prop::collection::vec((0u32..3, event_strategy(20)), 0..300),
        chunk in 1usize..512,
        run in 1usize..40,
    ) {
        let sites = with_implied(sites);
        let events = with_defined_sites(&sites, events);
        let trailer = Trailer { exit: Some(TargetExit::Code(3)), truncated: None };
        let bytes = write_packed(&sites, &events, &trailer, chunk, run);
        assert_reads_back(&bytes, &sites, &expand(&sites, &events), trailer);
        assert_fast_path_agrees(&bytes, "packed");
    }

    #[test]
    fn round_trip(
        sites in prop::collection::vec(site_strategy(), 1..20),
        events in prop::collection::vec((0u32..3, event_strategy(20)), 0..300),
        chunk in 1usize..512,
    ) {
        let sites = with_implied(sites);
        let events = with_defined_sites(&sites, events);
        let trailer = Trailer { exit: Some(TargetExit::Code(3)), truncated: None };
        let bytes = write(&sites, &events, &trailer, chunk);
        assert_reads_back(&bytes, &sites, &expand(&sites, &events), trailer);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        if let Ok(mut r) = TraceReader::new(&bytes[..]) {
            while let Ok(Some(_)) = r.next_record() {}
        }
    }
}

fn sample() -> (Vec<Site>, Vec<(u32, Event)>) {
    let sites = vec![
        Site { pc: 0x11f8, len: 4, kind: AccessKind::Read, size: 16, count: 1, implied: Implied::NONE },
        Site { pc: 0x1205, len: 4, kind: AccessKind::Write, size: 16, count: 1, implied: Implied::NONE },
    ];
    let mut events = vec![(7, Event::InvocationStart { index: 0, pc: 0x11e0, sp: 0x7ff0 })];
    for i in 0..2000u64 {
        events.push((7, Event::Access { site: 0, addr: 0x4040 + 16 * i }));
        events.push((7, Event::Access { site: 1, addr: 0x4040 + 16 * i }));
    }
    events.push((7, Event::InvocationEnd { index: 0 }));
    (sites, events)
}

#[test]
fn every_cut_reads_a_prefix_and_says_truncated() {
    let (sites, events) = sample();
    let bytes = write(&sites, &events, &Trailer::default(), 600);
    let full = read_all(&bytes).expect("full file").0;
    assert_eq!(full.len(), events.len());
    let mut saw_partial = false;
    for cut in 0..bytes.len() {
        match read_all(&bytes[..cut]) {
            Ok((records, end, _)) => {
                assert!(end.is_truncated(), "cut at {cut} must be truncated, got {end:?}");
                assert!(records.len() <= full.len());
                assert_eq!(&full[..records.len()], &records[..], "cut at {cut} must read a prefix");
                saw_partial |= !records.is_empty() && records.len() < full.len();
            }
            Err(FormatError::NoHeader | FormatError::NotATrace | FormatError::NoMetadata) => {
                assert!(cut < 200, "only a cut inside the header or metadata may fail, not at {cut}");
            }
            Err(e) => panic!("cut at {cut}: unexpected error {e}"),
        }
    }
    assert!(saw_partial, "some cut must keep part of the events");
}

/// Every flipped byte is noticed: an error (header, metadata), a damaged
/// region skipped, or a truncation — never events silently different.
#[test]
fn flipped_bytes_are_errors_or_reported_damage() {
    let (sites, events) = sample();
    check_flipped_bytes(&write(&sites, &events, &Trailer::default(), 600));
    check_flipped_bytes(&write(&implied_sites(), &implied_events(), &Trailer::default(), 64));
}

/// Every byte of `bytes` flipped: an error, or damage reported.
fn check_flipped_bytes(bytes: &[u8]) {
    let (full, ..) = read_all(bytes).expect("intact file");
    for i in 0..bytes.len() {
        let mut b = bytes.to_vec();
        b[i] ^= 0x5a;
        assert_fast_path_agrees(&b, &format!("flip at {i}"));
        if (10..16).contains(&i) {
            // Flags and reserved bytes of the file header: no meaning yet.
            assert_eq!(read_all(&b).expect("reads").0, full);
            continue;
        }
        match read_all_with_damage(&b) {
            Err(_) => {}
            Ok((records, end, _, damage)) => {
                let noticed = !damage.is_empty() || end.is_truncated();
                assert!(noticed, "flip at {i} went unnoticed");
                // What was read is the original's events, minus lost chunks.
                let mut it = full.iter();
                for r in &records {
                    assert!(it.any(|f| f == r), "flip at {i} produced an event not in the original: {r:?}");
                }
            }
        }
    }
}

/// A corrupt length in a middle chunk is damage, not the end of the file:
/// the reader resynchronises and reads every later chunk.
#[test]
fn a_corrupt_middle_chunk_is_skipped_and_reported() {
    let (sites, events) = sample();
    let bytes = write(&sites, &events, &Trailer::default(), 600);
    let offsets = chunk_offsets(&bytes);
    assert!(offsets.len() > 8, "several chunks");
    // Past the metadata, modules, mappings, sites and strings.
    for (k, &at) in offsets.iter().enumerate().skip(5).take(offsets.len() - 7) {
        assert_eq!(bytes[at + 4], 4, "an events chunk");
        for (field, value) in [(12usize, 0x00ff_0000u32), (12, 3), (0, 0), (20, 1)] {
            let mut b = bytes.clone();
            b[at + field..at + field + 4].copy_from_slice(&value.to_le_bytes());
            let (records, end, _, damage) = read_all_with_damage(&b).expect("still readable");
            assert_eq!(damage.len(), 1, "chunk {k} field {field}: {damage:?}");
            assert_eq!(damage[0].offset, at as u64);
            assert_eq!(damage[0].bytes, (offsets[k + 1] - at) as u64, "exactly that chunk skipped");
            assert_eq!(end, TraceEnd::Finished(Trailer::default()), "the rest, trailer included, was read");
            assert!(records.len() < full_len(&bytes) && records.len() > full_len(&bytes) / 2);
        }
    }
    // Truncation at the end is not damage.
    let cut = &bytes[..bytes.len() - 10];
    let (_, end, _, damage) = read_all_with_damage(cut).expect("readable");
    assert!(damage.is_empty());
    assert!(matches!(end, TraceEnd::Cut { mid_chunk: true, .. }));
    assert!(end.describe().contains("cut inside its last chunk"));
}

fn full_len(bytes: &[u8]) -> usize {
    read_all(bytes).expect("reads").0.len()
}

/// Byte offsets of every chunk after the file header.
fn chunk_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = 16;
    let mut out = Vec::new();
    while at + 24 <= bytes.len() {
        out.push(at);
        let len = u32::from_le_bytes(bytes[at + 12..at + 16].try_into().expect("4 bytes")) as usize;
        at += 24 + len;
    }
    out
}

#[test]
fn interrupted_trailer_reads_as_truncated() {
    let (sites, events) = sample();
    let trailer = Trailer { exit: Some(TargetExit::Signal(9)), truncated: Some(TruncationReason::Interrupted) };
    let (records, end, _) = read_all(&write(&sites, &events, &trailer, 4096)).expect("reads");
    assert_eq!(records.len(), events.len());
    assert!(end.is_truncated());
}

#[test]
fn rejects_non_traces_and_future_versions() {
    assert!(matches!(TraceReader::new(&b"\x7fELF and then some bytes"[..]), Err(FormatError::NotATrace)));
    assert!(matches!(TraceReader::new(&b""[..]), Err(FormatError::NotATrace)));
    let (sites, events) = sample();
    let mut bytes = write(&sites, &events, &Trailer::default(), 4096);
    bytes[8] = 99;
    let newer = TraceReader::new(&bytes[..]).err().expect("version 99 refused");
    assert!(matches!(newer, FormatError::UnsupportedVersion { found: 99, .. }));
    let range = format!("(versions {} to {})", trace_rt::format::OLDEST_VERSION, trace_rt::format::VERSION);
    assert!(newer.to_string().ends_with(&format!("{range}: a newer linetrace wrote it")), "{newer}");
    bytes[8] = 0;
    let older = TraceReader::new(&bytes[..]).err().expect("version 0 refused");
    assert!(older.to_string().ends_with(&range), "{older}");
}

#[test]
fn writer_rejects_undefined_sites() {
    let mut w = TraceWriter::new(Vec::new(), &metadata()).expect("header");
    assert!(w.push(1, &Event::Access { site: 0, addr: 1 }).is_err());
}

#[test]
fn strided_loop_compresses_below_one_and_a_half_bytes_per_access() {
    let (sites, events) = sample();
    let bytes = write(&sites, &events, &Trailer::default(), 1 << 20);
    let per_access = bytes.len() as f64 / 4000.0;
    assert!(per_access < 1.5, "{per_access} bytes per access");
}

/// Version-1 fixture, kept forever: the reader must always read it.
#[test]
fn reads_the_version_1_fixture() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1-work.lntrace");
    let (sites, events) = sample();
    let bytes = std::fs::read(&path).expect("fixture present");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
    let (records, end, read_sites) = read_all(&bytes).expect("fixture reads");
    assert_eq!(read_sites, sites);
    assert_eq!(end, TraceEnd::Finished(Trailer::default()));
    let got: Vec<(u32, Event)> = records.iter().map(|r| (r.thread, r.event)).collect();
    assert_eq!(got, events);
    let r = TraceReader::new(&bytes[..]).expect("header");
    assert_eq!(r.metadata(), &metadata());
}

#[test]
fn seeking_to_a_chunk_resumes_there() {
    let (sites, events) = sample();
    let bytes = write(&sites, &events, &Trailer::default(), 600);
    let mut r = TraceReader::new(std::io::Cursor::new(&bytes)).expect("reader");
    let mut positions = Vec::new();
    let mut index = 0usize;
    let mut serial = 0;
    while let Some(_rec) = r.next_record().expect("record") {
        if r.chunk_serial() != serial {
            serial = r.chunk_serial();
            positions.push((r.chunk_position(), index));
        }
        index += 1;
    }
    assert!(positions.len() > 3, "several chunks");
    let (pos, first) = positions[positions.len() / 2];
    let mut again = TraceReader::new(std::io::Cursor::new(&bytes)).expect("reader");
    again.seek_to_chunk(pos, &sites).expect("seek");
    let rest: Vec<Event> = std::iter::from_fn(|| again.next_record().expect("record")).map(|r| r.event).collect();
    let expected: Vec<Event> = events[first..].iter().map(|e| e.1).collect();
    assert_eq!(rest, expected);
}

/// Calls, tail calls and returns between accesses (sites of [`sample`]): the
/// call site cycling, a near and a far (shared-library) target, the stack
/// pointer going down and back up. Fixtures of every version hold them, since
/// v3 encodes them differently.
fn flow_events() -> Vec<(u32, Event)> {
    let mut sp = 0x7ffe_f000u64;
    let mut events = vec![(7, Event::InvocationStart { index: 1, pc: 0x11e0, sp })];
    for i in 0..60u64 {
        let target = if i % 2 == 0 { 0x1300 } else { 0x7f12_3456_7000 + i };
        sp -= 8 + 16 * (i % 4);
        events.push((7, Event::Call { callsite: 0x1200 + (i % 3) * 5, target, sp }));
        events.push((7, Event::Access { site: 0, addr: sp - 24 }));
        if i % 5 == 4 {
            events.push((7, Event::TailCall { callsite: 0x1310, target: 0x1400, sp: sp + 8 }));
        }
        if i % 3 != 1 {
            sp += 8;
            events.push((7, Event::Return { sp }));
        }
    }
    events.push((7, Event::InvocationEnd { index: 1 }));
    events
}

/// Allocator calls as `record --allocations` writes them: each call with
/// its detail and stack, some program break moves and custom allocator
/// calls; null and non-null pointers, addresses of both kinds of mapping.
fn allocation_events() -> Vec<(u32, Event)> {
    let mut events = Vec::new();
    let mut live: Vec<u64> = Vec::new();
    for i in 0..200u64 {
        let (kind, size, align, ptr_in, ptr_out) = match i % 7 {
            0 | 1 | 4 => (AllocKind::Malloc, 16 + (i * 37) % 4000, 0, 0, 0x5555_5555_a000 + i * 48),
            2 if !live.is_empty() => (AllocKind::Free, 0, 0, live.remove(0), 0),
            3 if !live.is_empty() => (AllocKind::Realloc, 9000 + i, 0, live.remove(0), 0x7f00_1000_0000 + i * 4096),
            5 => (AllocKind::PosixMemalign, 256, 64, 0, 0x5555_5556_0000 + i * 320),
            6 => (AllocKind::Malloc, 1 << 20, 0, 0, 0), // failed
            _ => (AllocKind::Calloc, 24, 0, 0, 0x5555_5555_9000 + i),
        };
        if ptr_out != 0 {
            live.push(ptr_out);
        }
        let callsite = if i % 3 == 0 { 0x1180 } else { 0x7f12_3456_0000 + i % 5 };
        events.push((3, Event::Alloc(Allocation { kind, size, align, ptr_in, ptr_out, callsite })));
        events.push((3, Event::AllocDetail { usable: size + 8 - size % 8, time_ns: 1_000_000 + i * i * 733 }));
        events.push((3, Event::AllocStack { stack: (i % 4) as u32 }));
        if i % 50 == 49 {
            events.push((3, Event::ProgramBreak { from: 0x5555_5557_0000 + i, to: 0x5555_5559_0000 + i }));
            events.push((
                3,
                Event::CustomAllocation(CustomAllocation {
                    allocator: 0,
                    op: CustomOp::Alloc,
                    size: i,
                    ptr_in: 0x6000,
                    ptr_out: 0x6100 + i,
                    callsite: 0x1190,
                }),
            ));
        }
    }
    events
}

/// Reads the fixture `tests/data/NAME` of format `version` and checks its
/// events, sites, strings and metadata. The fixture of the current version
/// is written when missing and `LINETRACE_BLESS` is set.
fn check_fixture(name: &str, version: u16, sites: &[Site], events: &[(u32, Event)]) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    if version == trace_rt::format::VERSION && std::env::var_os("LINETRACE_BLESS").is_some() && !path.exists() {
        std::fs::write(&path, write(sites, events, &Trailer::default(), 4096)).expect("write fixture");
    }
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), version);
    let mut r = TraceReader::new(&bytes[..]).expect("header");
    let got: Vec<(u32, Event)> =
        std::iter::from_fn(|| r.next_record().expect("record")).map(|r| (r.thread, r.event)).collect();
    assert_eq!(got, expand(sites, events));
    assert_eq!(r.sites(), sites);
    assert_eq!(r.strings(), &["/bin/true".to_string()]);
    assert_eq!(r.metadata(), &metadata());
    assert_eq!(r.mappings(), if version >= 7 { vec![mapping()] } else { Vec::new() });
    assert!(r.damage().is_empty());
    assert_fast_path_agrees(&bytes, name);
}

/// Version-2 fixtures, kept forever: the reader must always read them
/// (v2-flow was written by the v2 writer of commit 0e929e0).
#[test]
fn reads_the_version_2_fixtures() {
    let (sites, mut events) = sample();
    events.push((7, Event::InvocationSkipped { pc: 0x11e0 }));
    events.push((7, Event::Exec { path: 0 }));
    check_fixture("v2-work.lntrace", 2, &sites, &events);
    check_fixture("v2-flow.lntrace", 2, &sites, &flow_events());
}

/// Version-3 fixture, kept forever (written with LINETRACE_BLESS=1 when
/// missing).
#[test]
fn reads_the_version_3_fixture() {
    let (sites, mut events) = sample();
    events.extend(flow_events());
    events.push((7, Event::InvocationSkipped { pc: 0x11e0 }));
    events.push((7, Event::Exec { path: 0 }));
    check_fixture("v3-work.lntrace", 3, &sites, &events);
}

/// Version-3 fixture of allocation events, kept forever (written by the
/// v3 writer of commit f91be81 with LINETRACE_BLESS=1).
#[test]
fn reads_the_version_3_allocation_fixture() {
    let (sites, _) = sample();
    check_fixture("v3-allocations.lntrace", 3, &sites, &allocation_events());
}

/// Version-4 fixture, kept forever (written with LINETRACE_BLESS=1 when
/// missing).
#[test]
fn reads_the_version_4_fixture() {
    let (sites, mut events) = sample();
    events.extend(flow_events());
    // One thread: the reader hands events over chunk by chunk.
    events.extend(allocation_events().into_iter().map(|(_, e)| (7, e)));
    events.push((7, Event::InvocationSkipped { pc: 0x11e0 }));
    check_fixture("v4-work.lntrace", 4, &sites, &events);
}

/// Version-5 fixture, kept forever (written with LINETRACE_BLESS=1 when
/// missing): accesses of recent sites in their short form.
#[test]
fn reads_the_version_5_fixture() {
    let (mut sites, mut events) = sample();
    events.extend(flow_events());
    events.extend(allocation_events().into_iter().map(|(_, e)| (7, e)));
    events.push((7, Event::InvocationSkipped { pc: 0x11e0 }));
    // Sites 1 and 129 share a recent-site slot: a loop over them and site
    // 0 has short forms, and long ones where a site took the other's slot.
    sites.extend((2..130).map(|i| Site {
        pc: 0x2000 + 4 * i,
        len: 4,
        kind: AccessKind::Read,
        size: 8,
        count: 1,
        implied: Implied::NONE,
    }));
    for i in 0..40u64 {
        events.push((7, Event::Access { site: 0, addr: 0x7000 + 8 * i }));
        events.push((7, Event::Access { site: if i % 3 == 0 { 129 } else { 1 }, addr: 0x9000 + 4 * i }));
    }
    check_fixture("v5-work.lntrace", 5, &sites, &events);
}

/// Version-6 fixture, kept forever (written with LINETRACE_BLESS=1 when
/// missing): accesses implying others.
#[test]
fn reads_the_version_6_fixture() {
    let (sites, mut events) = sample();
    events.extend(flow_events());
    events.extend(allocation_events().into_iter().map(|(_, e)| (7, e)));
    let mut sites: Vec<Site> = sites.into_iter().chain(implied_sites()).collect();
    // `implied_sites` numbers its sites from 0; here they follow the two of
    // `sample`.
    for s in &mut sites[2..] {
        let mut renumbered = Implied::NONE;
        for a in s.implied.as_slice() {
            renumbered.push(ImpliedAccess { site: a.site + 2, offset: a.offset });
        }
        s.implied = renumbered;
    }
    events.extend(implied_events().into_iter().map(|(t, e)| match e {
        Event::Access { site, addr } => (t, Event::Access { site: site + 2, addr }),
        e => (t, e),
    }));
    check_fixture("v6-work.lntrace", 6, &sites, &events);
}

/// Version-7 fixture, kept forever (written with LINETRACE_BLESS=1 when
/// missing): the data mappings.
#[test]
fn reads_the_version_7_fixture() {
    let (sites, mut events) = sample();
    events.extend(flow_events());
    events.extend(allocation_events().into_iter().map(|(_, e)| (7, e)));
    check_fixture("v7-work.lntrace", 7, &sites, &events);
}

/// v5 writes an access of a site seen recently in the chunk in its short
/// form: a strided loop over a few sites takes two bytes an access before
/// compression (v4: three), sites sharing a slot take the long form in
/// turn, and both decode back the same.
#[test]
fn accesses_of_recent_sites_take_two_bytes() {
    let sites: Vec<Site> = (0..300)
        .map(|i| Site { pc: 0x1000 + 4 * i, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE })
        .collect();
    let size = |events: &[(u32, Event)]| {
        let mut encoder = trace_rt::format::ChunkEncoder::new();
        events.iter().for_each(|(_, e)| encoder.push(e));
        encoder.len()
    };
    let strided: Vec<(u32, Event)> =
        (0..3000u64).map(|i| (1, Event::Access { site: 200 + (i % 3) as u32, addr: 0x10_0000 + 8 * i })).collect();
    assert!(size(&strided) <= 2 * strided.len() + 16, "{} bytes", size(&strided));
    // Sites 5 and 133 share slot 5: each access takes the long form.
    let clashing: Vec<(u32, Event)> = (0..3000u64)
        .map(|i| (1, Event::Access { site: [5, 133][(i % 2) as usize], addr: 0x10_0000 + 8 * i }))
        .collect();
    assert!(size(&clashing) >= 3 * clashing.len(), "{} bytes", size(&clashing));
    for events in [strided, clashing] {
        assert_reads_back(&write(&sites, &events, &Trailer::default(), 1000), &sites, &events, Trailer::default());
    }
}

/// Sites 0-2 plain; 3 is site 0 implying an access of site 1 at the same
/// address (a load, then a store of it: `x[i] += y`); 4 is site 2 implying
/// site 1 eight bytes on and site 0 eight bytes back.
fn implied_sites() -> Vec<Site> {
    let plain = |pc, kind| Site { pc, len: 4, kind, size: 8, count: 1, implied: Implied::NONE };
    let mut sites = vec![plain(0x10, AccessKind::Read), plain(0x14, AccessKind::Write), plain(0x18, AccessKind::Read)];
    let mut load = sites[0];
    load.implied.push(ImpliedAccess { site: 1, offset: 0 });
    let mut three = sites[2];
    three.implied.push(ImpliedAccess { site: 1, offset: 8 });
    three.implied.push(ImpliedAccess { site: 0, offset: -8 });
    sites.extend([load, three]);
    sites
}

/// Accesses of [`implied_sites`] with calls and returns between them.
fn implied_events() -> Vec<(u32, Event)> {
    let mut events = Vec::new();
    for i in 0..200u64 {
        events.push((7, Event::Access { site: 3, addr: 0x5000 + 8 * i }));
        events.push((7, Event::Access { site: 2, addr: 0x9000 + 64 * i }));
        if i % 10 == 0 {
            events.push((7, Event::Call { callsite: 0x20, target: 0x40, sp: 0x7f00 }));
            events.push((7, Event::Access { site: 4, addr: 0x6000 + 24 * i }));
            events.push((7, Event::Return { sp: 0x7f08 }));
        }
    }
    events
}

/// v6 reads an access of a site that implies others as that access, then
/// each implied one at its offset, in order; in chunks of any size (an
/// implying access may be the last of its chunk), through `next_record`
/// alone or the fast path first.
#[test]
fn implied_accesses_come_right_after_the_access_implying_them() {
    let (sites, events) = (implied_sites(), implied_events());
    let expanded = expand(&sites, &events);
    assert_eq!(expanded.len(), events.len() + 200 + 2 * 20);
    assert_eq!(expanded[1], (7, Event::Access { site: 1, addr: 0x5000 }));
    for chunk in [1, 7, 64, 4096] {
        let bytes = write(&sites, &events, &Trailer::default(), chunk);
        assert_reads_back(&bytes, &sites, &expanded, Trailer::default());
        assert_fast_path_agrees(&bytes, &format!("chunks of {chunk} bytes"));
    }
}

/// A site implying an access of a site the table does not define is damage
/// of the chunk that uses it: never a panic, never an access of an
/// undefined site.
#[test]
fn implied_accesses_of_undefined_sites_are_damage() {
    let plain = Site { pc: 0x10, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE };
    let mut implying = plain;
    implying.implied.push(ImpliedAccess { site: 9, offset: 0 });
    let events = [(1, Event::Access { site: 1, addr: 0x100 }), (1, Event::Access { site: 0, addr: 0x200 })];
    let bytes = write(&[plain, implying], &events, &Trailer::default(), 4096);
    let (records, _, _, damage) = read_all_with_damage(&bytes).expect("reads");
    assert_eq!(damage.len(), 1, "{damage:?}");
    assert!(damage[0].what.contains("undefined site"), "{damage:?}");
    assert!(records.iter().all(|r| !matches!(r.event, Event::Access { site: 9, .. })), "{records:?}");
    assert_fast_path_agrees(&bytes, "undefined implied site");
}

/// v4 stores allocator calls as differences to the calls before them: a
/// loop allocating and freeing blocks near each other from two places
/// takes 18 bytes a call with its detail and stack before compression,
/// where v3 took 33 (pointers and call sites 7 bytes each, the time 6),
/// and decodes back the same.
#[test]
fn allocator_calls_take_a_few_bytes_each() {
    let mut events = Vec::new();
    let mut live = std::collections::VecDeque::new();
    for i in 0..1000u64 {
        let callsite = if i % 2 == 0 { 0x5555_5555_5180 } else { 0x5555_5555_51c4 };
        let (kind, ptr_in, ptr_out) = match live.len() {
            0..8 => (AllocKind::Malloc, 0, 0x5555_5556_0000 + 48 * i),
            _ => (AllocKind::Free, live.pop_front().expect("a block"), 0),
        };
        if ptr_out != 0 {
            live.push_back(ptr_out);
        }
        let size = if ptr_out != 0 { 40 } else { 0 };
        events.push(Event::Alloc(Allocation { kind, size, align: 0, ptr_in, ptr_out, callsite }));
        events.push(Event::AllocDetail { usable: 40, time_ns: 1_700_000_000_000 + 310 * i + i % 7 });
        events.push(Event::AllocStack { stack: (i % 3) as u32 });
    }
    let mut encoder = trace_rt::format::ChunkEncoder::new();
    for e in &events {
        encoder.push(e);
    }
    let per_call = encoder.len() as f64 / 1000.0;
    assert!(per_call <= 19.0, "{per_call} bytes per allocator call with its detail and stack");
    assert!(decode_payload(&encoder.take(), &[]) == events, "the calls decode back");
}

/// The events of one raw chunk payload (the differences chain through it).
fn decode_payload(raw: &[u8], sites: &[Site]) -> Vec<Event> {
    let mut decoder = trace_rt::format::ChunkDecoder::new();
    decoder.start_chunk();
    let mut c = trace_rt::format::varint::Cursor::new(raw);
    std::iter::from_fn(|| decoder.next(&mut c, sites).expect("decodes")).collect()
}

/// v3 stores a call made again from the same site to the same target in a
/// few bytes: the flow events of a comparator loop cost less than a third
/// of their v2 size before compression.
#[test]
fn repeated_calls_take_a_few_bytes_each() {
    let sites = [Site { pc: 0x10, len: 2, kind: AccessKind::Read, size: 4, count: 1, implied: Implied::NONE }];
    let mut encoder = trace_rt::format::ChunkEncoder::new();
    let mut sp = 0x7ffe_f000u64;
    for i in 0..1000u64 {
        sp = sp.wrapping_add(if i % 2 == 0 { 16 } else { 0u64.wrapping_sub(16) });
        encoder.push(&Event::Call { callsite: 0x4011_2233, target: 0x7f00_1234_5678, sp });
        encoder.push(&Event::Return { sp: sp + 8 });
    }
    let per_pair = encoder.len() as f64 / 1000.0;
    assert!(per_pair <= 7.0, "{per_pair} bytes per call and return");
    // The payload decodes back (same chunk, so the differences chain).
    let mut n = 0;
    let mut sp = 0x7ffe_f000u64;
    for e in decode_payload(&encoder.take(), &sites) {
        if n % 2 == 0 {
            sp = sp.wrapping_add(if n % 4 == 0 { 16 } else { 0u64.wrapping_sub(16) });
            assert_eq!(e, Event::Call { callsite: 0x4011_2233, target: 0x7f00_1234_5678, sp });
        } else {
            assert_eq!(e, Event::Return { sp: sp + 8 });
        }
        n += 1;
    }
    assert_eq!(n, 2000);
}

/// Extension records of kinds a reader does not know are skipped.
#[test]
fn unknown_extension_records_are_skipped() {
    let sites = [Site { pc: 0x10, len: 2, kind: AccessKind::Read, size: 4, count: 1, implied: Implied::NONE }];
    // 0x20: a one-byte delta, so the access record is 3 bytes.
    let events = [(1, Event::Access { site: 0, addr: 0x20 }), (1, Event::Return { sp: 8 })];
    let bytes = write(&sites, &events, &Trailer::default(), 1 << 20);
    // Rebuild the one events chunk with an extension record in the middle.
    let at = chunk_offsets(&bytes).into_iter().find(|&o| bytes[o + 4] == 4).expect("an events chunk");
    let len = u32::from_le_bytes(bytes[at + 12..at + 16].try_into().expect("4")) as usize;
    let raw_len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().expect("4")) as usize;
    let raw = zstd::bulk::decompress(&bytes[at + 24..at + 24 + len], raw_len).expect("zstd");
    // Prefix (seq 0, time: one varint), the access (3 bytes), then the return.
    let mut c = raw.clone();
    let prefix_len = 1 + raw[1..].iter().position(|b| b & 0x80 == 0).expect("varint") + 1;
    let split = prefix_len + 3;
    let mut patched = c[..split].to_vec();
    patched.extend_from_slice(&[15, 99, 3, 0xaa, 0xbb, 0xcc]);
    patched.extend_from_slice(&c.split_off(split));
    let payload = zstd::bulk::compress(&patched, 3).expect("zstd");
    let mut header = bytes[at..at + 24].to_vec();
    header[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[16..20].copy_from_slice(&(patched.len() as u32).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&header[4..20]);
    h.update(&payload);
    header[20..24].copy_from_slice(&h.finalize().to_le_bytes());
    let mut file = bytes[..at].to_vec();
    file.extend_from_slice(&header);
    file.extend_from_slice(&payload);
    file.extend_from_slice(&bytes[at + 24 + len..]);
    let (records, _, _, damage) = read_all_with_damage(&file).expect("reads");
    assert!(damage.is_empty(), "{damage:?}");
    let got: Vec<(u32, Event)> = records.iter().map(|r| (r.thread, r.event)).collect();
    assert_eq!(got, events);
}

/// The threads with events, from the chunk headers alone: each thread once,
/// and no answer for a file whose last chunk is cut.
#[test]
fn event_threads_come_from_the_chunk_headers() {
    let (sites, mut events) = sample();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.lntrace");
    let one = write(&sites, &events, &Trailer::default(), 256);
    std::fs::write(&path, &one).expect("write");
    let threads = trace_rt::format::event_threads(&path).expect("readable");
    assert_eq!(threads, Some([7].into()));
    events.push((9, Event::Access { site: 0, addr: 0x4040 }));
    let two = write(&sites, &events, &Trailer::default(), 256);
    std::fs::write(&path, &two).expect("write");
    assert_eq!(trace_rt::format::event_threads(&path).expect("readable"), Some([7, 9].into()));
    std::fs::write(&path, &two[..two.len() - 3]).expect("write");
    assert_eq!(trace_rt::format::event_threads(&path).expect("readable"), None, "a cut chunk");
    std::fs::write(&path, b"not a trace at all").expect("write");
    assert!(trace_rt::format::event_threads(&path).is_err());
}

/// A packed access of a site never defined is an error, after the events
/// before it are taken; a record of another kind ends a run.
#[test]
fn a_packed_run_stops_at_other_records_and_refuses_undefined_sites() {
    let mut w = TraceWriter::new(Vec::new(), &metadata()).expect("header");
    w.add_site(Site { pc: 0x1000, len: 3, kind: AccessKind::Read, size: 4, count: 1, implied: Implied::NONE });
    let kinds = [
        PackedKind::Access(0, 0),
        PackedKind::Other,
        PackedKind::Access(7, 0),
        PackedKind::IndirectCall { callsite: 9 },
    ];
    let records = [pack_access(0, 0x10), pack_access(0, 0x20), pack_access(1, 0), pack_access(0, 0x30)];
    let run = w.push_packed(1, &records, &kinds).expect("two accesses");
    assert_eq!(run, PackedRun { taken: 2, flow: 0, last_callsite: None, implied: 0 });
    let beyond = [pack_access(0, 0x10), pack_access(9, 0x20)];
    assert_eq!(w.push_packed(1, &beyond, &kinds).expect("one access").taken, 1, "a tag beyond the table");
    let lone_call = [pack_access(3, 0x7ff0), pack_access(0, 0x10)];
    assert_eq!(w.push_packed(1, &lone_call, &kinds).expect("no target").taken, 0, "an indirect call needs its target");
    let err = w.push_packed(1, &[pack_access(0, 0x40), pack_access(2, 0x50)], &kinds).expect_err("site 7");
    assert!(err.to_string().contains("site 7, never defined"), "{err}");
    let bytes = w.finish(&Trailer::default()).expect("finish");
    let (records, _, _) = read_all(&bytes).expect("reads");
    let addrs: Vec<u64> = records
        .iter()
        .filter_map(|r| match r.event {
            Event::Access { addr, .. } => Some(addr),
            _ => None,
        })
        .collect();
    assert_eq!(addrs, [0x10, 0x20, 0x10, 0x40]);
}

/// Chunks compressed on a thread of their own make the same file as chunks
/// compressed by the writer: as many chunks, holding the same events.
#[test]
fn compressing_on_a_thread_writes_the_same_file() {
    let (sites, mut events) = sample();
    events.extend(flow_events());
    let inline = write(&sites, &events, &Trailer::default(), 600);
    let mut w = TraceWriter::new(Vec::new(), &metadata()).expect("header").compress_on_own_thread().expect("thread");
    w.set_chunk_target(600);
    w.add_modules(&[module()]);
    w.add_mappings(&[mapping()]);
    sites.iter().for_each(|s| {
        w.add_site(*s);
    });
    w.add_string("/bin/true");
    events.iter().for_each(|(t, e)| w.push(*t, e).expect("push"));
    let threaded = w.finish(&Trailer::default()).expect("finish");
    assert!(chunk_offsets(&inline).len() > 5, "several chunks");
    // The chunks' clock differs, and it is a varint inside the compressed
    // payload, so chunk sizes may differ by a byte or two: compare the chunk
    // count and what the chunks hold, not offsets.
    assert_eq!(chunk_offsets(&inline).len(), chunk_offsets(&threaded).len());
    assert_eq!(read_all(&inline).expect("inline reads"), read_all(&threaded).expect("threaded reads"));
}

/// An output that fails once `room` bytes were written (a full disk).
struct FullDisk {
    room: usize,
}

impl std::io::Write for FullDisk {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.room {
            return Err(std::io::Error::other("disk full"));
        }
        self.room -= buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A write error on the compressing thread reaches the recorder by
/// `finish` at the latest.
#[test]
fn a_write_error_while_compressing_comes_back() {
    let (sites, events) = sample();
    // Room for half of the file.
    let room = write(&sites, &events, &Trailer::default(), 600).len() / 2;
    let mut w = TraceWriter::new(FullDisk { room }, &metadata()).expect("header");
    w.set_chunk_target(600);
    let mut w = w.compress_on_own_thread().expect("thread");
    sites.iter().for_each(|s| {
        w.add_site(*s);
    });
    // Pushing may already fail once the error came back.
    let pushed = events.iter().try_for_each(|(t, e)| w.push(*t, e));
    let err = pushed.and_then(|()| w.finish(&Trailer::default()).map(|_| ())).expect_err("the disk is full");
    let cause = std::error::Error::source(&err).map(ToString::to_string).unwrap_or_default();
    assert!(matches!(err, FormatError::Io(_)) && cause.contains("disk full"), "{err}: {cause}");
}

/// A writer dropped without `finish` (a recorder that failed) has every
/// chunk it made in the file when the drop returns: the file reads as a
/// truncated trace with all the events flushed before.
#[test]
fn a_writer_dropped_unfinished_leaves_every_chunk_written() {
    let (sites, events) = sample();
    let file = tempfile::NamedTempFile::new().expect("temp file");
    // A slow disk: the thread is still writing when the writer is dropped.
    struct Slow(std::fs::File);
    impl std::io::Write for Slow {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(std::time::Duration::from_millis(10));
            self.0.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.0.flush()
        }
    }
    let out = Slow(std::fs::File::create(file.path()).expect("create"));
    let mut w = TraceWriter::new(out, &metadata()).expect("header").compress_on_own_thread().expect("thread");
    w.set_chunk_target(600);
    sites.iter().for_each(|s| {
        w.add_site(*s);
    });
    events.iter().for_each(|(t, e)| w.push(*t, e).expect("push"));
    w.flush().expect("flush");
    drop(w);
    let bytes = std::fs::read(file.path()).expect("read");
    let (records, end, _) = read_all(&bytes).expect("reads");
    assert!(end.is_truncated(), "{end:?}");
    assert_eq!(records.len(), events.len());
}

/// A writer dropped with events still buffered (a recorder that failed
/// between flushes) writes them: the file reads as a truncated trace with
/// every event pushed.
#[test]
fn a_writer_dropped_unflushed_writes_what_it_buffered() {
    let (sites, events) = sample();
    let mut out = Vec::new();
    {
        let mut w = TraceWriter::new(&mut out, &metadata()).expect("header");
        sites.iter().for_each(|s| {
            w.add_site(*s);
        });
        events.iter().for_each(|(t, e)| w.push(*t, e).expect("push"));
    }
    let (records, end, read_sites) = read_all(&out).expect("reads");
    assert!(end.is_truncated(), "{end:?}");
    assert_eq!((records.len(), read_sites), (events.len(), sites));
}

proptest! {
    /// Packed events encode to the bytes their events do, one at a time; a
    /// record of another kind, or an access of a site not defined, stops the
    /// run there.
    #[test]
    fn packed_events_encode_as_single_events(
        records in prop::collection::vec((prop_oneof![2000 => 0u16..4, 200 => 6u16..10, 1 => 4u16..6, 1 => 10u16..12], any::<u64>()), 0..3000),
        limit in 1usize..20_000,
    ) {
        // Tags 0..4 are accesses of sites 3, 0, 2, 1; tag 4 of an undefined
        // site; tag 5 is beyond the table...
        let kinds = [
            PackedKind::Access(3, 0), PackedKind::Access(0, 0), PackedKind::Access(2, 0), PackedKind::Access(1, 0),
            PackedKind::Access(9, 0), PackedKind::Other,
            // ...6..10: calls, returns and indirect calls with their targets...
            PackedKind::Return, PackedKind::Call { callsite: 0x401000, target: 0x402000 },
            PackedKind::IndirectCall { callsite: 0x401100 }, PackedKind::CallTarget,
            // ...10 and 11: others (11 is beyond the table).
            PackedKind::Other,
        ];
        let packed: Vec<u64> = records.iter().map(|&(tag, value)| pack_access(tag, value)).collect();
        let mut fast = trace_rt::format::ChunkEncoder::new();
        let result = fast.push_packed(&packed, &kinds, 4, limit);
        // The reference: one event at a time, the limit checked before the
        // first record and then before the first after 1024 more (an
        // indirect call and its target are never split).
        let mut one_by_one = trace_rt::format::ChunkEncoder::new();
        let mut run = PackedRun::default();
        let mut check_at = 0;
        let expected = loop {
            let n = run.taken;
            let Some(&p) = packed.get(n) else { break Ok(run) };
            if n >= check_at {
                if one_by_one.len() >= limit {
                    break Ok(run);
                }
                check_at = n + 1024;
            }
            let (tag, value) = unpack_access(p);
            let event = match kinds.get(usize::from(tag)) {
                Some(&PackedKind::Access(site, _)) if site < 4 => Event::Access { site, addr: value },
                Some(&PackedKind::Access(..)) => break Err(tag),
                Some(&PackedKind::Call { callsite, target }) => Event::Call { callsite, target, sp: value },
                Some(&PackedKind::IndirectCall { callsite }) => match packed.get(n + 1).map(|&t| unpack_access(t)) {
                    Some((9, target)) => Event::Call { callsite, target, sp: value },
                    _ => break Ok(run),
                },
                Some(PackedKind::Return) => Event::Return { sp: value },
                _ => break Ok(run),
            };
            let taken = if kinds[usize::from(tag)] == (PackedKind::IndirectCall { callsite: 0x401100 }) { 2 } else { 1 };
            if let Event::Call { callsite, .. } = event {
                run.last_callsite = Some(callsite);
            }
            if !matches!(event, Event::Access { .. }) {
                run.flow += taken;
            }
            run.taken += taken;
            one_by_one.push(&event);
        };
        prop_assert_eq!(result, expected);
        prop_assert_eq!(fast.take(), one_by_one.take());
    }
}
