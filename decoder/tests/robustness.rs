//! Well-formed traces with unreasonable content (addresses at the top of
//! the address space, huge sizes, returns without calls, frees of unknown
//! pointers, many threads) decode, draw and tabulate without panicking.

use decoder::model::{DecodeOptions, Model};
use decoder::raster::{BitmapView, ColourBy, Palette, RenderOptions, rasterize_bitmap, render};
use decoder::symbols::Symbolizer;
use decoder::tables::{Grouping, access_table, allocation_table};
use proptest::prelude::*;
use trace_rt::format::{AccessKind, AllocKind, Allocation, Event, Implied, Metadata, Site, TraceWriter, Trailer};

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![any::<u64>(), 0u64..4096, (u64::MAX - 4096)..=u64::MAX, Just(0x7fff_0000u64)]
}

fn event(sites: u32) -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (0..sites, value()).prop_map(|(site, addr)| Event::Access { site, addr }),
        1 => (0..sites, value(), 0u64..100_000).prop_map(|(site, addr, size)| Event::AccessSized { site, addr, size }),
        1 => (value(), value(), value()).prop_map(|(callsite, target, sp)| Event::Call { callsite, target, sp }),
        1 => (value(), value(), value()).prop_map(|(callsite, target, sp)| Event::TailCall { callsite, target, sp }),
        1 => value().prop_map(|sp| Event::Return { sp }),
        1 => (0u32..4, value(), value()).prop_map(|(index, pc, sp)| Event::InvocationStart { index, pc, sp }),
        1 => (0u32..4).prop_map(|index| Event::InvocationEnd { index }),
        1 => (0usize..9, value(), value(), value()).prop_map(|(k, size, ptr_in, ptr_out)| Event::Alloc(Allocation {
            kind: AllocKind::ALL[k],
            size,
            align: 0,
            ptr_in,
            ptr_out,
            callsite: 0x1000,
        })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn odd_traces_never_panic(
        sizes in prop::collection::vec(prop_oneof![1u32..64, Just(u32::MAX)], 1..4),
        events in prop::collection::vec((0u32..3, event(4)), 1..200),
    ) {
        let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
        let mut w = TraceWriter::new(std::fs::File::create(&path).expect("create"), &Metadata::new("test")).expect("header");
        w.set_chunk_target(64);
        for (i, &size) in sizes.iter().enumerate() {
            w.add_site(Site { pc: 0x1000 + i as u64, len: 4, kind: [AccessKind::Read, AccessKind::Write, AccessKind::Modify][i % 3], size, count: 1, implied: Implied::NONE });
        }
        let n = sizes.len() as u32;
        for (thread, e) in events {
            let e = match e {
                Event::Access { site, addr } => Event::Access { site: site % n, addr },
                Event::AccessSized { site, addr, size } => Event::AccessSized { site: site % n, addr, size },
                e => e,
            };
            w.push(thread, &e).expect("push");
        }
        w.finish(&Trailer::default()).expect("finish");
        let options = DecodeOptions { snapshot_every: 3, ..DecodeOptions::default() };
        if let Ok(model) = Model::decode(&path, &options, &mut |_| {}) {
            let symbols = Symbolizer::new(&model.modules);
            let _ = access_table(&model, &symbols, Grouping::Function);
            let _ = access_table(&model, &symbols, Grouping::Line);
            let _ = allocation_table(&model, &symbols);
            if model.columns > 0 {
                for colour_by in [ColourBy::BytesRead, ColourBy::DistinctBytes, ColourBy::Age] {
                    let options = RenderOptions { width: 64, height: 48, columns: None, alpha: 0.5, colour_by };
                    let drawn = render(&model, &options, &|pc| symbols.locate(pc).function.clone(), &mut |_, _| true);
                    prop_assert!(drawn.is_ok(), "render failed: {:?}", drawn.err());
                }
                // Every way of drawing: exact (wide), spans (narrow), and
                // the summary (a view far wider than the trace).
                for (columns, width) in [(model.columns as f64, 1000u32), (model.columns as f64, 16), (1e7, 16)] {
                    let view = BitmapView {
                        columns: (0.0, columns),
                        rows: (0.0, 40.0),
                        width,
                        height: 20,
                        alpha: 0.7,
                        colour_by: ColourBy::Age,
                    };
                    let drawn = rasterize_bitmap(&model, &view, &Palette::default());
                    prop_assert!(drawn.is_ok(), "raster failed: {:?}", drawn.err());
                }
            }
        }
    }
}

#[test]
fn a_huge_access_is_a_clear_error() {
    let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let mut w =
        TraceWriter::new(std::fs::File::create(&path).expect("create"), &Metadata::new("test")).expect("header");
    let site = w.add_site(Site { pc: 1, len: 2, kind: AccessKind::Read, size: 1, count: 1, implied: Implied::NONE });
    w.push(1, &Event::AccessSized { site, addr: 0, size: u64::MAX }).expect("push");
    w.finish(&Trailer::default()).expect("finish");
    let err = Model::decode(&path, &DecodeOptions::default(), &mut |_| {}).err().expect("rejected");
    assert!(err.to_string().contains("corrupt trace"), "{err}");
}
