//! Round-trip, truncation and corruption tests of the trace format.

use proptest::prelude::*;
use trace_rt::format::{
    AccessKind, AllocKind, Allocation, Event, FormatError, MappedRange, Metadata, Module, Record, Site, TargetExit,
    TraceEnd, TraceReader, TraceWriter, Trailer, TruncationReason,
};

fn site_strategy() -> impl Strategy<Value = Site> {
    (any::<u64>(), 1u8..16, 0u8..3, 1u32..4096, 1u16..16).prop_map(|(pc, len, k, size, count)| Site {
        pc,
        len,
        kind: [AccessKind::Read, AccessKind::Write, AccessKind::Modify][k as usize],
        size,
        count,
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
        8 => (0..sites, any::<u64>()).prop_map(|(site, addr)| Event::Access { site, addr }),
        1 => (0..sites, any::<u64>(), any::<u64>()).prop_map(|(site, addr, size)| Event::AccessSized { site, addr, size }),
        1 => (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(callsite, target, sp)| Event::Call { callsite, target, sp }),
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

/// Writes `events` (thread, event) with small chunks so that chunking and
/// per-chunk delta restarts are exercised.
fn write(sites: &[Site], events: &[(u32, Event)], trailer: &Trailer, chunk: usize) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &metadata()).expect("header");
    w.set_chunk_target(chunk);
    w.add_modules(&[module()]);
    for s in sites {
        w.add_site(*s);
    }
    for (t, e) in events {
        w.push(*t, e).expect("push");
    }
    w.finish(trailer).expect("finish")
}

fn read_all(bytes: &[u8]) -> Result<(Vec<Record>, TraceEnd, Vec<Site>), FormatError> {
    let mut r = TraceReader::new(bytes)?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record()? {
        out.push(rec);
    }
    let end = r.end().cloned().expect("end known after the last record");
    Ok((out, end, r.sites().to_vec()))
}

/// Events of one thread keep their order; threads may interleave differently.
fn per_thread(records: &[(u32, Event)]) -> std::collections::BTreeMap<u32, Vec<Event>> {
    let mut m = std::collections::BTreeMap::<u32, Vec<Event>>::new();
    for (t, e) in records {
        m.entry(*t).or_default().push(*e);
    }
    m
}

proptest! {
    #[test]
    fn round_trip(
        sites in prop::collection::vec(site_strategy(), 1..20),
        events in prop::collection::vec((0u32..3, event_strategy(20)), 0..300),
        chunk in 1usize..512,
    ) {
        let events: Vec<(u32, Event)> = events.into_iter().map(|(t, e)| match e {
            Event::Access { site, addr } => (t, Event::Access { site: site % sites.len() as u32, addr }),
            Event::AccessSized { site, addr, size } => (t, Event::AccessSized { site: site % sites.len() as u32, addr, size }),
            e => (t, e),
        }).collect();
        let trailer = Trailer { exit: Some(TargetExit::Code(3)), truncated: None };
        let bytes = write(&sites, &events, &trailer, chunk);
        let (records, end, read_sites) = read_all(&bytes).expect("reads back");
        prop_assert_eq!(read_sites, sites);
        prop_assert_eq!(end, TraceEnd::Finished(trailer));
        let got: Vec<(u32, Event)> = records.iter().map(|r| (r.thread, r.event)).collect();
        prop_assert_eq!(per_thread(&got), per_thread(&events));
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
        Site { pc: 0x11f8, len: 4, kind: AccessKind::Read, size: 16, count: 1 },
        Site { pc: 0x1205, len: 4, kind: AccessKind::Write, size: 16, count: 1 },
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

#[test]
fn flipped_bytes_give_errors_not_panics() {
    let (sites, events) = sample();
    let bytes = write(&sites, &events, &Trailer::default(), 600);
    let mut errors = 0;
    for i in (0..bytes.len()).step_by(7) {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        if read_all(&b).is_err() {
            errors += 1;
        }
    }
    // Every flip lands in a checksummed payload, a header, or the magic.
    assert!(errors > bytes.len() / 7 * 9 / 10, "only {errors} of {} flips detected", bytes.len() / 7);
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
    assert!(matches!(TraceReader::new(&bytes[..]), Err(FormatError::UnsupportedVersion { found: 99, .. })));
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
/// Regenerate only for a *new* version file, with LINETRACE_BLESS=1.
#[test]
fn reads_the_version_1_fixture() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1-work.lntrace");
    let (sites, events) = sample();
    if std::env::var_os("LINETRACE_BLESS").is_some() && !path.exists() {
        std::fs::write(&path, write(&sites, &events, &Trailer::default(), 4096)).expect("write fixture");
    }
    let bytes = std::fs::read(&path).expect("fixture present");
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
