//! Binary encoding of [`Event`]s inside one events chunk, and of the site table.

use super::varint::{Cursor, MAX_LEN, put_i64, put_raw, put_u64, zigzag};
use super::{
    AccessKind, AllocKind, Allocation, CustomAllocation, CustomOp, Event, IMPLIED_MOST, Implied, ImpliedAccess,
    PackedKind, PackedRun, Site, SiteId, TruncationReason,
};

const TAG_ACCESS: u8 = 1;
const TAG_ACCESS_SIZED: u8 = 2;
const TAG_CALL: u8 = 3;
const TAG_TAIL_CALL: u8 = 4;
const TAG_RETURN: u8 = 5;
const TAG_ALLOC: u8 = 6;
const TAG_INVOCATION_START: u8 = 7;
const TAG_INVOCATION_END: u8 = 8;
const TAG_THREAD_START: u8 = 9;
const TAG_THREAD_EXIT: u8 = 10;
const TAG_SIGNAL: u8 = 11;
const TAG_STEPPED: u8 = 12;
const TAG_TRUNCATED: u8 = 13;
const TAG_EXEC: u8 = 14;
/// `kind:varint len:varint byte*`: skipped by readers that do not know `kind`.
const TAG_EXTENSION: u8 = 15;
const TAG_INVOCATION_SKIPPED: u8 = 16;
/// Extension kind of [`Event::AllocDetail`].
const EXT_ALLOC_DETAIL: u64 = 1;
/// Extension kind of [`Event::AllocStack`].
const EXT_ALLOC_STACK: u64 = 2;
/// Extension kind of [`Event::ProgramBreak`].
const EXT_PROGRAM_BREAK: u64 = 3;
/// Extension kind of [`Event::CustomAllocation`].
const EXT_CUSTOM_ALLOCATION: u64 = 4;

/// An extension event: `tag kind len body`.
///
/// `fill` appends the body straight to `b` (no buffer of its own: one was
/// allocated per allocator call before, a tenth of `record --allocations`'
/// conversion). Bodies are short, so the length is first given one byte and
/// moved along only when it needs more.
fn put_extension(b: &mut Vec<u8>, kind: u64, fill: impl FnOnce(&mut Vec<u8>)) {
    b.push(TAG_EXTENSION);
    put_u64(b, kind);
    let at = b.len();
    b.push(0);
    fill(b);
    let len = b.len() - at - 1;
    if len < 0x80 {
        b[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(MAX_LEN);
        put_u64(&mut prefix, len as u64);
        b.splice(at..at + 1, prefix);
    }
}

/// Per-site "previous address" state that restarts with every chunk.
///
/// Restarting clears the table (8 bytes per site used so far, once per
/// chunk of ~1 MiB): cheaper than a generation stamp compared on every
/// access, which was the encoder's slowest step.
struct DeltaState {
    /// Previous address by site (0: none in this chunk).
    last: Vec<u64>,
    /// Since v5: the site of the last long-form `Access` by the site's low
    /// bits ([`RECENT_SITES`] slots; `NO_SITE`: none in this chunk). An
    /// access whose site is in its slot is written `0x80 | slot`, then the
    /// delta: one byte instead of a tag and the site's varint.
    recent: [SiteId; RECENT_SITES],
}

/// Slots of [`DeltaState::recent`]: the tags from 0x80 up.
const RECENT_SITES: usize = 128;
/// The first tag of the short form of an `Access` (since v5).
const TAG_RECENT_ACCESS: u8 = 0x80;
/// An empty slot of [`DeltaState::recent`].
const NO_SITE: SiteId = SiteId::MAX;

impl Default for DeltaState {
    fn default() -> Self {
        DeltaState { last: Vec::new(), recent: [NO_SITE; RECENT_SITES] }
    }
}

/// The slot of `site` in [`DeltaState::recent`].
#[inline(always)]
fn recent_slot(site: SiteId) -> usize {
    site as usize % RECENT_SITES
}

impl DeltaState {
    fn restart(&mut self) {
        self.last.fill(0);
        self.recent = [NO_SITE; RECENT_SITES];
    }

    /// Makes room for sites below `sites`.
    fn ensure(&mut self, sites: usize) {
        if self.last.len() < sites {
            self.last.resize(sites, 0);
        }
    }

    #[inline(always)]
    fn slot(&mut self, site: SiteId) -> &mut u64 {
        let i = site as usize;
        if i >= self.last.len() {
            self.last.resize(i + 1, 0);
        }
        &mut self.last[i]
    }

    /// Returns the previous address of `site` in this chunk (0 if none) and
    /// stores `addr` as the new one.
    #[inline(always)]
    fn swap(&mut self, site: SiteId, addr: u64) -> u64 {
        std::mem::replace(self.slot(site), addr)
    }

    /// Decoder side: applies `delta` to the previous address of `site`.
    #[inline(always)]
    fn advance(&mut self, site: SiteId, delta: i64) -> u64 {
        let e = self.slot(site);
        *e = e.wrapping_add(delta as u64);
        *e
    }
}

/// Previous call-site, call target and stack pointer of the flow events
/// (calls, tail calls, returns) within one chunk: since format v3 these are
/// stored as differences to it. A loop calling a comparator repeats the same
/// call site and target and moves the stack pointer by a few bytes, so a call
/// takes 4-5 bytes instead of ~19 and a return 2 instead of ~7.
#[derive(Default, Clone, Copy)]
struct FlowState {
    callsite: u64,
    target: u64,
    sp: u64,
}

/// Encoder side of a field stored as a difference ([`FlowState`],
/// [`AllocState`]): the difference of `value` to `*previous`, which becomes
/// `value`.
#[inline(always)]
fn delta(previous: &mut u64, value: u64) -> i64 {
    let d = value.wrapping_sub(*previous) as i64;
    *previous = value;
    d
}

/// Decoder side of [`delta`]: `*previous` plus `delta`, which becomes the
/// previous.
#[inline(always)]
fn undelta(previous: &mut u64, delta: i64) -> u64 {
    *previous = previous.wrapping_add(delta as u64);
    *previous
}

/// Previous pointer, call site and time of the allocation events within
/// one chunk: since format v4 these are stored as differences to it (the
/// byte layout is in the [module documentation](super)). An allocator
/// hands out addresses near the ones before, a program calls it from a few
/// places, and calls come microseconds apart: a call with its detail and
/// stack in a malloc/free loop takes 18 bytes before compression instead of
/// 33 (`allocator_calls_take_a_few_bytes_each`).
#[derive(Default, Clone, Copy)]
struct AllocState {
    pointer: u64,
    callsite: u64,
    time: u64,
}

/// `flags_kind` bits of a v4 `ALLOC`: the kind, and which pointers follow.
const ALLOC_KIND_BITS: u8 = 0x3f;
const ALLOC_HAS_PTR_IN: u8 = 0x40;
const ALLOC_HAS_PTR_OUT: u8 = 0x80;
const _: () = {
    let mut i = 0;
    while i < AllocKind::ALL.len() {
        assert!(AllocKind::ALL[i] as u8 & !ALLOC_KIND_BITS == 0, "an allocation kind must fit in flags_kind's bits");
        i += 1;
    }
};

/// Encodes the events of one thread into raw (uncompressed) chunk payloads.
///
/// This is the piece a per-thread buffer in the traced process owns.
#[derive(Default)]
pub struct ChunkEncoder {
    buf: Vec<u8>,
    deltas: DeltaState,
    flow: FlowState,
    alloc: AllocState,
}

impl ChunkEncoder {
    /// An empty encoder.
    pub fn new() -> Self {
        let mut e = ChunkEncoder::default();
        e.deltas.restart();
        e
    }

    /// Bytes of raw payload buffered so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Hands out the buffered payload and starts a new chunk.
    pub fn take(&mut self) -> Vec<u8> {
        self.deltas.restart();
        self.flow = FlowState::default();
        self.alloc = AllocState::default();
        std::mem::take(&mut self.buf)
    }

    /// Gives back a buffer `take` handed out, to be filled again without
    /// growing a new one.
    pub fn reuse(&mut self, mut buf: Vec<u8>) {
        if self.buf.is_empty() {
            buf.clear();
            self.buf = buf;
        }
    }

    /// Appends an `Access` event: the same bytes as [`ChunkEncoder::push`]
    /// writes for it, by the hot path of recorders (one per memory access).
    #[inline(always)]
    pub fn push_access(&mut self, site: SiteId, addr: u64) {
        let prev = self.deltas.swap(site, addr);
        let delta = addr.wrapping_sub(prev) as i64;
        self.buf.reserve(ACCESS_MOST);
        let len = self.buf.len();
        // SAFETY: `reserve` made room for ACCESS_MOST bytes after `len`,
        // which bounds what is written; the length grows by what was.
        unsafe {
            let n = put_access_raw(self.buf.as_mut_ptr().add(len), &mut self.deltas.recent, site, delta);
            self.buf.set_len(len + n);
        }
    }

    /// Appends the leading packed events of `packed` ([`super::unpack_access`];
    /// what a tag stands for is `kinds[tag]`) as [`Self::push`] would, until a
    /// record of [`PackedKind::Other`] (or a tag beyond the table) or until
    /// the payload reaches `limit` bytes (checked every 1024 records, so it
    /// may pass it by up to 32 KiB). An [`PackedKind::IndirectCall`] is
    /// taken with the [`PackedKind::CallTarget`] record after it, or not at
    /// all. Returns what it took, or the first tag of an access to a site not
    /// below `defined` (the events before it are appended).
    pub fn push_packed(
        &mut self,
        packed: &[u64],
        kinds: &[PackedKind],
        defined: SiteId,
        limit: usize,
    ) -> Result<PackedRun, u16> {
        // The hot loop of a recording: room is reserved per block, not per
        // event, and bytes are stored without a bounds check each.
        const BLOCK: usize = 1024;
        self.deltas.ensure(defined as usize);
        let mut run = PackedRun::default();
        while run.taken < packed.len() && self.buf.len() < limit {
            let end = packed.len().min(run.taken + BLOCK);
            self.buf.reserve((end - run.taken) * PACKED_MOST);
            let mut len = self.buf.len();
            let DeltaState { last, recent } = &mut self.deltas;
            // The sites defined (`ensure` made room for them).
            let last = &mut last[..defined as usize];
            let mut next = run.taken;
            let mut stop = None;
            while next < end {
                let (tag, value) = super::unpack_access(packed[next]);
                // SAFETY (each arm that writes): `reserve` made room for
                // PACKED_MOST bytes per record of the block after the length
                // at its start, and a record writes at most that many (an
                // indirect call's target, none).
                let dst = unsafe { self.buf.as_mut_ptr().add(len) };
                let kind = kinds.get(usize::from(tag));
                // Accesses first, on their own: nearly every record is one.
                // Finding the site in `last` is the check that it is defined.
                if let Some(&PackedKind::Access(site, implied)) = kind
                    && let Some(previous) = last.get_mut(site as usize)
                {
                    let prev = std::mem::replace(previous, value);
                    len += unsafe { put_access_raw(dst, recent, site, value.wrapping_sub(prev) as i64) };
                    run.implied += usize::from(implied);
                    next += 1;
                    continue;
                }
                // Everything else out of line: merged with the test above,
                // the kinds became a jump table in front of every access.
                match unsafe {
                    put_packed_flow(dst, kind, tag, value, &packed[next + 1..], kinds, &mut self.flow, &mut run)
                } {
                    PackedStep::Wrote { bytes, records } => {
                        len += bytes;
                        next += records;
                    }
                    PackedStep::Stop(why) => {
                        stop = Some(why);
                        break;
                    }
                }
            }
            // SAFETY: every byte up to `len` was written above, within the
            // reserved capacity.
            unsafe { self.buf.set_len(len) };
            run.taken = next;
            match stop {
                None => {}
                Some(Ok(())) => break,
                Some(Err(tag)) => return Err(tag),
            }
        }
        Ok(run)
    }

    /// Appends one event.
    #[inline]
    pub fn push(&mut self, event: &Event) {
        if let Event::Access { site, addr } = *event {
            return self.push_access(site, addr);
        }
        let b = &mut self.buf;
        match *event {
            Event::Access { .. } => {}
            Event::AccessSized { site, addr, size } => {
                b.push(TAG_ACCESS_SIZED);
                put_u64(b, site.into());
                let prev = self.deltas.swap(site, addr);
                put_i64(b, addr.wrapping_sub(prev) as i64);
                put_u64(b, size);
            }
            Event::Call { callsite, target, sp } | Event::TailCall { callsite, target, sp } => {
                let tag = if matches!(event, Event::Call { .. }) { TAG_CALL } else { TAG_TAIL_CALL };
                b.reserve(PACKED_MOST);
                // SAFETY: room for PACKED_MOST bytes was reserved after the
                // length, which grows by what was written.
                unsafe {
                    let n = put_flow_raw(b.as_mut_ptr().add(b.len()), tag, &mut self.flow, [callsite, target, sp]);
                    b.set_len(b.len() + n);
                }
            }
            Event::Return { sp } => {
                b.reserve(PACKED_MOST);
                // SAFETY: as for calls.
                unsafe {
                    let n = put_return_raw(b.as_mut_ptr().add(b.len()), &mut self.flow, sp);
                    b.set_len(b.len() + n);
                }
            }
            Event::Alloc(a) => {
                b.push(TAG_ALLOC);
                let has_in = if a.ptr_in != 0 { ALLOC_HAS_PTR_IN } else { 0 };
                let has_out = if a.ptr_out != 0 { ALLOC_HAS_PTR_OUT } else { 0 };
                b.push(a.kind as u8 | has_in | has_out);
                put_u64(b, a.size);
                put_u64(b, a.align);
                let s = &mut self.alloc;
                for ptr in [a.ptr_in, a.ptr_out] {
                    if ptr != 0 {
                        put_i64(b, delta(&mut s.pointer, ptr));
                    }
                }
                put_i64(b, delta(&mut s.callsite, a.callsite));
            }
            Event::InvocationStart { index, pc, sp } => {
                b.push(TAG_INVOCATION_START);
                put_u64(b, index.into());
                put_u64(b, pc);
                put_u64(b, sp);
            }
            Event::InvocationEnd { index } => {
                b.push(TAG_INVOCATION_END);
                put_u64(b, index.into());
            }
            Event::ThreadStart { parent } => {
                b.push(TAG_THREAD_START);
                put_u64(b, parent.into());
            }
            Event::ThreadExit { status } => {
                b.push(TAG_THREAD_EXIT);
                put_i64(b, status.into());
            }
            Event::Signal { signo, pc, addr } => {
                b.push(TAG_SIGNAL);
                put_i64(b, signo.into());
                put_u64(b, pc);
                put_u64(b, addr);
            }
            Event::Stepped { count } => {
                b.push(TAG_STEPPED);
                put_u64(b, count);
            }
            Event::Truncated { reason } => {
                b.push(TAG_TRUNCATED);
                b.push(reason as u8);
            }
            Event::Exec { path } => {
                b.push(TAG_EXEC);
                put_u64(b, path.into());
            }
            Event::InvocationSkipped { pc } => {
                b.push(TAG_INVOCATION_SKIPPED);
                put_u64(b, pc);
            }
            Event::AllocDetail { usable, time_ns } => {
                let time = delta(&mut self.alloc.time, time_ns);
                put_extension(b, EXT_ALLOC_DETAIL, |body| {
                    put_u64(body, usable);
                    put_i64(body, time);
                })
            }
            Event::AllocStack { stack } => put_extension(b, EXT_ALLOC_STACK, |body| put_u64(body, stack.into())),
            Event::ProgramBreak { from, to } => put_extension(b, EXT_PROGRAM_BREAK, |body| {
                put_u64(body, from);
                put_u64(body, to);
            }),
            Event::CustomAllocation(c) => put_extension(b, EXT_CUSTOM_ALLOCATION, |body| {
                put_u64(body, c.allocator.into());
                body.push(c.op as u8);
                for v in [c.size, c.ptr_in, c.ptr_out, c.callsite] {
                    put_u64(body, v);
                }
            }),
        }
    }
}

/// What [`put_packed_flow`] did with a packed record.
enum PackedStep {
    /// Wrote `bytes` for `records` records.
    Wrote { bytes: usize, records: usize },
    /// Stopped before the record: at one of another kind (`Ok`), or at an
    /// access of a site not defined (`Err`, its tag).
    Stop(Result<(), u16>),
}

/// Writes packed record (`tag`, `value`) of `kind` at `dst` when it is a
/// call (with its target's record, the first of `after`) or a return,
/// counting it in `run`.
///
/// # Safety
/// `dst` must be valid for writing [`PACKED_MOST`] bytes.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn put_packed_flow(
    dst: *mut u8,
    kind: Option<&PackedKind>,
    tag: u16,
    value: u64,
    after: &[u64],
    kinds: &[PackedKind],
    flow: &mut FlowState,
    run: &mut PackedRun,
) -> PackedStep {
    let (bytes, records) = match kind {
        Some(&PackedKind::Access(..)) => return PackedStep::Stop(Err(tag)),
        Some(&PackedKind::Call { callsite, target }) => {
            run.flow += 1;
            run.last_callsite = Some(callsite);
            (unsafe { put_flow_raw(dst, TAG_CALL, flow, [callsite, target, value]) }, 1)
        }
        Some(&PackedKind::IndirectCall { callsite }) => {
            let target = after.first().map(|&t| super::unpack_access(t));
            let is_target = |&(t, _): &(u16, u64)| kinds.get(usize::from(t)) == Some(&PackedKind::CallTarget);
            let Some((_, target)) = target.filter(is_target) else {
                return PackedStep::Stop(Ok(()));
            };
            run.flow += 2;
            run.last_callsite = Some(callsite);
            (unsafe { put_flow_raw(dst, TAG_CALL, flow, [callsite, target, value]) }, 2)
        }
        Some(&PackedKind::Return) => {
            run.flow += 1;
            (unsafe { put_return_raw(dst, flow, value) }, 1)
        }
        Some(&PackedKind::CallTarget | PackedKind::Other) | None => return PackedStep::Stop(Ok(())),
    };
    PackedStep::Wrote { bytes, records }
}

/// Most bytes of an `Access` record: the tag, a site (32 bits: 5 bytes) and
/// a delta; also room enough for `put_raw`'s contract at either varint.
const ACCESS_MOST: usize = 1 + 5 + MAX_LEN;

/// Most bytes of any record [`ChunkEncoder::push_packed`] writes: a call's
/// (the tag and three differences), with room for `put_raw`'s contract.
const PACKED_MOST: usize = 1 + 3 * MAX_LEN;
const _: () = assert!(PACKED_MOST >= ACCESS_MOST);

/// Writes a call or tail-call record (`tag`, then the differences of call
/// site, target and stack pointer to `flow`'s, zig-zag) at `dst`; returns
/// its length.
///
/// # Safety
/// `dst` must be valid for writing [`PACKED_MOST`] bytes.
#[inline(always)]
unsafe fn put_flow_raw(dst: *mut u8, tag: u8, flow: &mut FlowState, [callsite, target, sp]: [u64; 3]) -> usize {
    // SAFETY: each varint takes at most MAX_LEN bytes, and the tag one.
    unsafe {
        dst.write(tag);
        let mut n = 1 + put_raw(dst.add(1), zigzag(delta(&mut flow.callsite, callsite)));
        n += put_raw(dst.add(n), zigzag(delta(&mut flow.target, target)));
        n + put_raw(dst.add(n), zigzag(delta(&mut flow.sp, sp)))
    }
}

/// Writes a return record (tag, zig-zag difference of the stack pointer to
/// `flow`'s) at `dst`; returns its length.
///
/// # Safety
/// `dst` must be valid for writing [`PACKED_MOST`] bytes.
#[inline(always)]
unsafe fn put_return_raw(dst: *mut u8, flow: &mut FlowState, sp: u64) -> usize {
    // SAFETY: the tag, then one varint of at most MAX_LEN bytes.
    unsafe {
        dst.write(TAG_RETURN);
        1 + put_raw(dst.add(1), zigzag(delta(&mut flow.sp, sp)))
    }
}

/// Writes an `Access` record at `dst`: the short form (`0x80 | slot`, the
/// zig-zag delta) when `site` is in its slot of `recent`, else the long
/// form (tag, site, delta), which puts it there. Returns its length.
///
/// # Safety
/// `dst` must be valid for writing [`ACCESS_MOST`] bytes.
#[inline(always)]
unsafe fn put_access_raw(dst: *mut u8, recent: &mut [SiteId; RECENT_SITES], site: SiteId, delta: i64) -> usize {
    let slot = recent_slot(site);
    // SAFETY: the site's varint starts at 1 and takes at most 5 bytes, so
    // the delta's starts at most at 6, with MAX_LEN bytes left after it.
    unsafe {
        let n = if recent[slot] == site {
            dst.write(TAG_RECENT_ACCESS | slot as u8);
            1
        } else {
            recent[slot] = site;
            dst.write(TAG_ACCESS);
            1 + put_raw(dst.add(1), u64::from(site))
        };
        n + put_raw(dst.add(n), zigzag(delta))
    }
}

/// Decodes the raw payload of one events chunk.
pub struct ChunkDecoder {
    deltas: DeltaState,
    flow: FlowState,
    /// Format v3 and later: flow events are differences ([`FlowState`]).
    flow_deltas: bool,
    /// Format v5 and later: accesses of a recent site have a short form
    /// ([`DeltaState::recent`]).
    recent_sites: bool,
    /// Format v6 and later: an access of a site may imply more
    /// ([`Site::implied`]).
    implying: bool,
    /// The implied accesses still to hand out.
    pending: PendingImplied,
    alloc: AllocState,
    /// Format v4 and later: allocation events are differences
    /// ([`AllocState`]).
    alloc_deltas: bool,
}

/// The accesses an access just decoded implies, not handed out yet.
#[derive(Clone, Copy, Default)]
struct PendingImplied {
    /// The implying access's site.
    site: SiteId,
    /// Its address.
    base: u64,
    /// The next one to hand out.
    next: u8,
    /// How many it implies (0: none pending).
    len: u8,
}

impl Default for ChunkDecoder {
    fn default() -> Self {
        ChunkDecoder::new()
    }
}

impl ChunkDecoder {
    /// A decoder of payloads this crate writes ([`super::VERSION`]).
    pub fn new() -> Self {
        ChunkDecoder::for_version(super::VERSION)
    }

    /// A decoder of the payloads of a file of format `version`.
    pub fn for_version(version: u16) -> Self {
        ChunkDecoder {
            deltas: DeltaState::default(),
            flow: FlowState::default(),
            flow_deltas: version >= 3,
            recent_sites: version >= 5,
            implying: version >= 6,
            pending: PendingImplied::default(),
            alloc: AllocState::default(),
            alloc_deltas: version >= 4,
        }
    }

    /// Must be called before decoding each new chunk's payload.
    pub fn start_chunk(&mut self) {
        self.deltas.restart();
        self.pending = PendingImplied::default();
        self.flow = FlowState::default();
        self.alloc = AllocState::default();
    }

    /// An `ALLOC` record's fields after its tag: absolute before v4,
    /// differences after ([`AllocState`]).
    fn allocation(&mut self, c: &mut Cursor<'_>) -> Result<Allocation, &'static str> {
        const CUT: &str = "event record cut short";
        let flags_kind = c.u8().ok_or(CUT)?;
        if !self.alloc_deltas {
            return Ok(Allocation {
                kind: AllocKind::from_u8(flags_kind).ok_or("unknown allocation kind")?,
                size: c.u64().ok_or(CUT)?,
                align: c.u64().ok_or(CUT)?,
                ptr_in: c.u64().ok_or(CUT)?,
                ptr_out: c.u64().ok_or(CUT)?,
                callsite: c.u64().ok_or(CUT)?,
            });
        }
        let kind = AllocKind::from_u8(flags_kind & ALLOC_KIND_BITS).ok_or("unknown allocation kind")?;
        let (size, align) = (c.u64().ok_or(CUT)?, c.u64().ok_or(CUT)?);
        let s = &mut self.alloc;
        let mut pointer = |stored: bool| -> Result<u64, &'static str> {
            Ok(if stored { undelta(&mut s.pointer, c.i64().ok_or(CUT)?) } else { 0 })
        };
        let ptr_in = pointer(flags_kind & ALLOC_HAS_PTR_IN != 0)?;
        let ptr_out = pointer(flags_kind & ALLOC_HAS_PTR_OUT != 0)?;
        let callsite = undelta(&mut s.callsite, c.i64().ok_or(CUT)?);
        Ok(Allocation { kind, size, align, ptr_in, ptr_out, callsite })
    }

    /// A call or tail call's fields: absolute before v3, differences after.
    #[inline]
    fn flow_call(&mut self, c: &mut Cursor<'_>) -> Option<(u64, u64, u64)> {
        if !self.flow_deltas {
            return Some((c.u64()?, c.u64()?, c.u64()?));
        }
        let f = &mut self.flow;
        Some((undelta(&mut f.callsite, c.i64()?), undelta(&mut f.target, c.i64()?), undelta(&mut f.sp, c.i64()?)))
    }

    /// A return's stack pointer: absolute before v3, a difference after.
    #[inline]
    fn flow_return(&mut self, c: &mut Cursor<'_>) -> Option<u64> {
        if self.flow_deltas { Some(undelta(&mut self.flow.sp, c.i64()?)) } else { c.u64() }
    }

    /// Decodes the next event from `c`, skipping extension records of kinds
    /// this reader does not know: `Ok(None)` when only such records were
    /// left. `sites` is the site table read so far: a reference to a site it
    /// does not define is corruption. Returns an error message on malformed
    /// input.
    #[inline]
    pub fn next(&mut self, c: &mut Cursor<'_>, sites: &[Site]) -> Result<Option<Event>, &'static str> {
        loop {
            if self.in_implied() {
                return match self.take_implied(sites) {
                    Ok((site, addr)) => Ok(Some(Event::Access { site, addr })),
                    Err(what) => {
                        self.pending = PendingImplied::default();
                        Err(what)
                    }
                };
            }
            if c.is_empty() {
                return Ok(None);
            }
            if let Some(event) = self.next_record(c, sites)? {
                return Ok(Some(event));
            }
        }
    }

    /// Decodes the next event from `c` if it is an [`Event::Access`]
    /// (site, address); otherwise, or if the record is malformed, `None`
    /// with nothing consumed ([`Self::next`] then decodes it, or says what
    /// is wrong with it).
    ///
    /// The decoding pass's fast path: nearly every event is an access, and
    /// an `Event` returned through `Result<Option<_>>` layers was moved in
    /// pieces that the CPU could not forward to the loads reading it back
    /// (a third of the decoding thread's time went to those stalls); a
    /// pair comes back in registers.
    #[inline(always)]
    pub fn next_access(&mut self, c: &mut Cursor<'_>, sites: &[Site]) -> Option<(SiteId, u64)> {
        if self.in_implied() {
            // A failure is left to `next`, which reports it.
            return self.take_implied(sites).ok();
        }
        let mut ahead = *c;
        let tag = ahead.u8()?;
        if !self.is_plain_access(tag) {
            return None;
        }
        let access = self.plain_access(tag, &mut ahead, sites).ok()?;
        *c = ahead;
        Some(access)
    }

    /// Whether accesses implied by the last one are still to come: the
    /// payload is not done, even when its bytes are.
    #[inline(always)]
    pub fn in_implied(&self) -> bool {
        self.pending.len != 0
    }

    /// The next access the last decoded one implies; nothing changes when
    /// the site table does not define it.
    #[inline(always)]
    fn take_implied(&mut self, sites: &[Site]) -> Result<(SiteId, u64), &'static str> {
        let p = &mut self.pending;
        let implied = sites.get(p.site as usize).and_then(|s| s.implied.as_slice().get(usize::from(p.next)));
        let Some(&ImpliedAccess { site, offset }) = implied else {
            return Err("an implied access the site table does not define");
        };
        if !sites.get(site as usize).is_some_and(Site::is_defined) {
            return Err("an implied access of an undefined site");
        }
        let addr = p.base.wrapping_add(i64::from(offset) as u64);
        p.next += 1;
        if p.next == p.len {
            *p = PendingImplied::default();
        }
        Ok((site, addr))
    }

    /// Notes the accesses an access of `site` at `addr` implies.
    #[inline(always)]
    fn imply(&mut self, sites: &[Site], site: SiteId, addr: u64) {
        if self.implying {
            let len = sites.get(site as usize).map_or(0, |s| s.implied.len());
            if len != 0 {
                self.pending = PendingImplied { site, base: addr, next: 0, len: len as u8 };
            }
        }
    }

    /// Whether `tag` starts an [`Event::Access`] record: `TAG_ACCESS`, or a
    /// recent-site tag in a file with recent sites.
    #[inline(always)]
    fn is_plain_access(&self, tag: u8) -> bool {
        tag == TAG_ACCESS || (tag >= TAG_RECENT_ACCESS && self.recent_sites)
    }

    /// The fields of an [`Event::Access`] record whose tag
    /// ([`Self::is_plain_access`]) was just read:
    /// the one rule of both [`Self::next`] and [`Self::next_access`].
    /// When it fails, the decoder's state is as before (only `c` moved).
    #[inline(always)]
    fn plain_access(&mut self, tag: u8, c: &mut Cursor<'_>, sites: &[Site]) -> Result<(SiteId, u64), &'static str> {
        const CUT: &str = "event record cut short";
        if tag != TAG_ACCESS {
            let site = self.deltas.recent[usize::from(tag & !TAG_RECENT_ACCESS)];
            if site == NO_SITE {
                return Err("access refers to an empty recent-site slot");
            }
            let delta = c.i64().ok_or(CUT)?;
            let addr = self.deltas.advance(site, delta);
            self.imply(sites, site, addr);
            return Ok((site, addr));
        }
        let site = defined_site(c, sites)?;
        let delta = c.i64().ok_or(CUT)?;
        let addr = self.deltas.advance(site, delta);
        if self.recent_sites {
            self.deltas.recent[recent_slot(site)] = site;
        }
        self.imply(sites, site, addr);
        Ok((site, addr))
    }

    #[inline]
    fn next_record(&mut self, c: &mut Cursor<'_>, sites: &[Site]) -> Result<Option<Event>, &'static str> {
        const CUT: &str = "event record cut short";
        let tag = c.u8().ok_or(CUT)?;
        let ev = match tag {
            _ if self.is_plain_access(tag) => {
                let (site, addr) = self.plain_access(tag, c, sites)?;
                Event::Access { site, addr }
            }
            TAG_ACCESS_SIZED => {
                let site = defined_site(c, sites)?;
                let delta = c.i64().ok_or(CUT)?;
                let addr = self.deltas.advance(site, delta);
                Event::AccessSized { site, addr, size: c.u64().ok_or(CUT)? }
            }
            TAG_CALL => {
                let (callsite, target, sp) = self.flow_call(c).ok_or(CUT)?;
                Event::Call { callsite, target, sp }
            }
            TAG_TAIL_CALL => {
                let (callsite, target, sp) = self.flow_call(c).ok_or(CUT)?;
                Event::TailCall { callsite, target, sp }
            }
            TAG_RETURN => Event::Return { sp: self.flow_return(c).ok_or(CUT)? },
            TAG_ALLOC => Event::Alloc(self.allocation(c)?),
            TAG_INVOCATION_START => {
                Event::InvocationStart { index: c.u32().ok_or(CUT)?, pc: c.u64().ok_or(CUT)?, sp: c.u64().ok_or(CUT)? }
            }
            TAG_INVOCATION_END => Event::InvocationEnd { index: c.u32().ok_or(CUT)? },
            TAG_THREAD_START => Event::ThreadStart { parent: c.u32().ok_or(CUT)? },
            TAG_THREAD_EXIT => Event::ThreadExit {
                status: i32::try_from(c.i64().ok_or(CUT)?).map_err(|_| "exit status out of range")?,
            },
            TAG_SIGNAL => Event::Signal {
                signo: i32::try_from(c.i64().ok_or(CUT)?).map_err(|_| "signal number out of range")?,
                pc: c.u64().ok_or(CUT)?,
                addr: c.u64().ok_or(CUT)?,
            },
            TAG_STEPPED => Event::Stepped { count: c.u64().ok_or(CUT)? },
            TAG_TRUNCATED => Event::Truncated {
                reason: TruncationReason::from_u8(c.u8().ok_or(CUT)?).ok_or("unknown truncation reason")?,
            },
            TAG_EXEC => Event::Exec { path: c.u32().ok_or(CUT)? },
            TAG_INVOCATION_SKIPPED => Event::InvocationSkipped { pc: c.u64().ok_or(CUT)? },
            TAG_EXTENSION => {
                let kind = c.u64().ok_or(CUT)?;
                let len = c.u64().ok_or(CUT)?;
                if kind == EXT_ALLOC_DETAIL {
                    let mut body = Cursor::new(c.take(len).ok_or(CUT)?);
                    let usable = body.u64().ok_or(CUT)?;
                    let time_ns = if self.alloc_deltas {
                        undelta(&mut self.alloc.time, body.i64().ok_or(CUT)?)
                    } else {
                        body.u64().ok_or(CUT)?
                    };
                    Event::AllocDetail { usable, time_ns }
                } else if kind == EXT_ALLOC_STACK {
                    let mut body = Cursor::new(c.take(len).ok_or(CUT)?);
                    Event::AllocStack { stack: body.u32().ok_or(CUT)? }
                } else if kind == EXT_PROGRAM_BREAK {
                    let mut body = Cursor::new(c.take(len).ok_or(CUT)?);
                    Event::ProgramBreak { from: body.u64().ok_or(CUT)?, to: body.u64().ok_or(CUT)? }
                } else if kind == EXT_CUSTOM_ALLOCATION {
                    let mut body = Cursor::new(c.take(len).ok_or(CUT)?);
                    Event::CustomAllocation(CustomAllocation {
                        allocator: body.u32().ok_or(CUT)?,
                        op: CustomOp::from_u8(body.u8().ok_or(CUT)?).ok_or("unknown custom allocator op")?,
                        size: body.u64().ok_or(CUT)?,
                        ptr_in: body.u64().ok_or(CUT)?,
                        ptr_out: body.u64().ok_or(CUT)?,
                        callsite: body.u64().ok_or(CUT)?,
                    })
                } else {
                    // A kind added after this reader: skipped.
                    c.skip(len).ok_or(CUT)?;
                    return Ok(None);
                }
            }
            _ => return Err("unknown event tag"),
        };
        Ok(Some(ev))
    }
}

/// Starts a v2 events payload: the thread's chunk number and the time of
/// its first event.
pub(crate) fn put_events_prefix(buf: &mut Vec<u8>, seq: u64, time: u64) {
    put_u64(buf, seq);
    put_u64(buf, time);
}

/// Reads the v2 events prefix: `(seq, time)`.
pub(crate) fn read_events_prefix(c: &mut Cursor<'_>) -> Result<(u64, u64), &'static str> {
    const CUT: &str = "events chunk prefix cut short";
    Ok((c.u64().ok_or(CUT)?, c.u64().ok_or(CUT)?))
}

/// Encodes sites `first_id..` as a raw v2 `Sites` chunk payload.
pub(crate) fn encode_sites(first_id: SiteId, sites: &[Site]) -> Vec<u8> {
    let mut b = Vec::with_capacity(sites.len() * 8 + 8);
    put_u64(&mut b, first_id.into());
    put_u64(&mut b, sites.len() as u64);
    let mut prev_pc = 0u64;
    for s in sites {
        // Sites are mostly defined in code order: delta-code the pc.
        put_i64(&mut b, s.pc.wrapping_sub(prev_pc) as i64);
        prev_pc = s.pc;
        b.push(s.len);
        // Since v6, bit 7 of the kind says implied accesses follow the
        // site's fields: `n:u8 (site:varint offset:zigzag)*`.
        let implies = if s.implied.is_empty() { 0 } else { KIND_IMPLIES };
        b.push(s.kind as u8 | implies);
        put_u64(&mut b, s.size.into());
        put_u64(&mut b, s.count.into());
        if !s.implied.is_empty() {
            b.push(s.implied.len() as u8);
            for a in s.implied.as_slice() {
                put_u64(&mut b, a.site.into());
                put_i64(&mut b, a.offset.into());
            }
        }
    }
    b
}

/// Bit of a v6 site's kind byte: implied accesses follow its fields.
const KIND_IMPLIES: u8 = 0x80;

/// Most sites one file may define: a site id past it is corruption (and
/// would make the reader's table huge).
pub const MAX_SITES: u32 = 1 << 26;

/// An access record's site id, read from `c`: an error unless `sites`
/// defines it.
#[inline(always)]
fn defined_site(c: &mut Cursor<'_>, sites: &[Site]) -> Result<SiteId, &'static str> {
    let site = c.u32().ok_or("event record cut short")?;
    if sites.get(site as usize).is_some_and(Site::is_defined) {
        Ok(site)
    } else {
        Err("access refers to an undefined site")
    }
}

/// Decodes a raw `Sites` chunk payload into `table`. In a v1 file the sites
/// follow the ones already defined; a v2 chunk says where they start, which
/// may leave a hole of undefined sites (a lost chunk) before them.
pub(crate) fn decode_sites(raw: &[u8], version: u16, table: &mut Vec<Site>) -> Result<(), &'static str> {
    const CUT: &str = "site table cut short";
    let mut c = Cursor::new(raw);
    let first = if version >= 2 { c.u32().ok_or(CUT)? } else { table.len() as u32 };
    let n = c.u64().ok_or(CUT)?;
    // Every site takes at least 5 bytes: a larger count is corruption.
    if n > raw.len() as u64 {
        return Err("site count larger than the chunk");
    }
    let end = u64::from(first) + n;
    if end > u64::from(MAX_SITES) {
        return Err("site id beyond the format limit");
    }
    let (first, end) = (first as usize, end as usize);
    if end > table.len() {
        table.resize(end, Site::UNDEFINED);
    }
    let mut pc = 0u64;
    for slot in &mut table[first..end] {
        pc = pc.wrapping_add(c.i64().ok_or(CUT)? as u64);
        let len = c.u8().ok_or(CUT)?;
        let kind_byte = c.u8().ok_or(CUT)?;
        let implies = version >= 6 && kind_byte & KIND_IMPLIES != 0;
        let kind_byte = if version >= 6 { kind_byte & !KIND_IMPLIES } else { kind_byte };
        let kind = AccessKind::from_u8(kind_byte).ok_or("unknown access kind")?;
        let size = c.u32().ok_or(CUT)?;
        let count = u16::try_from(c.u64().ok_or(CUT)?).map_err(|_| "element count out of range")?;
        if count == 0 {
            return Err("a site with no elements");
        }
        let mut implied = Implied::NONE;
        if implies {
            let n = c.u8().ok_or(CUT)?;
            if n == 0 || usize::from(n) > IMPLIED_MOST {
                return Err("a site implying no accesses, or too many");
            }
            for _ in 0..n {
                let site = c.u32().ok_or(CUT)?;
                let offset = i32::try_from(c.i64().ok_or(CUT)?).map_err(|_| "implied access offset out of range")?;
                implied.push(ImpliedAccess { site, offset });
            }
        }
        if slot.is_defined() {
            return Err("a site defined twice");
        }
        *slot = Site { pc, len, kind, size, count, implied };
    }
    if !c.is_empty() {
        return Err("trailing bytes after the site table");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A site's implied accesses survive the site table's encoding; a kind
    /// byte saying "implies" with none, or more than [`IMPLIED_MOST`], is an
    /// error of the table, not a short or wrong list.
    #[test]
    fn implied_accesses_survive_the_site_table() {
        let mut site = Site { pc: 0x20, len: 4, kind: AccessKind::Modify, size: 8, count: 1, implied: Implied::NONE };
        for (s, offset) in [(3, -8), (0, 0), (7, i32::MAX)] {
            assert!(site.implied.push(ImpliedAccess { site: s, offset }));
        }
        let sites = [Site { implied: Implied::NONE, ..site }, site];
        let mut table = Vec::new();
        decode_sites(&encode_sites(0, &sites), 6, &mut table).expect("decodes");
        assert_eq!(table, sites);
        for n in [0u8, IMPLIED_MOST as u8 + 1] {
            // first 0, count 1: pc delta, len, kind with KIND_IMPLIES, size,
            // count, then `n` (site, offset) pairs.
            let mut raw = vec![0u8, 1, 0x20, 4, KIND_IMPLIES, 8, 1, n];
            raw.extend(std::iter::repeat_n([0u8, 0], usize::from(n)).flatten());
            let mut table = Vec::new();
            assert!(decode_sites(&raw, 6, &mut table).is_err(), "{n} implied accesses");
        }
        let one = [0u8, 1, 0x20, 4, KIND_IMPLIES, 8, 1, 1, 0, 0];
        assert!(decode_sites(&one, 6, &mut Vec::new()).is_ok(), "one implied access decodes");
        // Before v6 bit 7 of the kind is no flag: an unknown kind.
        assert!(decode_sites(&encode_sites(0, &sites), 5, &mut Vec::new()).is_err());
    }

    /// What decoding `raw` gives: the events, then the error that stopped
    /// it. With `accesses_first`, as the decoding pass reads: accesses by
    /// `next_access`, the rest by `next`.
    fn decode_all(raw: &[u8], sites: &[Site], accesses_first: bool) -> (Vec<Event>, Option<&'static str>) {
        let mut decoder = ChunkDecoder::new();
        decoder.start_chunk();
        let mut c = Cursor::new(raw);
        let mut events = Vec::new();
        loop {
            if accesses_first && let Some((site, addr)) = decoder.next_access(&mut c, sites) {
                events.push(Event::Access { site, addr });
                continue;
            }
            match decoder.next(&mut c, sites) {
                Ok(Some(event)) => events.push(event),
                Ok(None) => return (events, None),
                Err(what) => return (events, Some(what)),
            }
        }
    }

    /// The access fast path reads what `next` reads, on a payload cut
    /// anywhere and with any byte changed to values that make other tags,
    /// recent-site slots (empty ones too), undefined sites and long varints:
    /// a malformed record is left to `next`, which says what is wrong.
    #[test]
    fn the_access_fast_path_reads_what_next_reads() {
        let site = |pc| Site { pc, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE };
        let sites = [site(0x10), site(0x20), Site::UNDEFINED, site(0x40)];
        let mut encoder = ChunkEncoder::new();
        for i in 0..40u64 {
            encoder.push(&Event::Access { site: (i % 4 == 2) as u32 * 3, addr: 0x1000 + 8 * i });
            encoder.push(&Event::Access { site: 1, addr: 0x9000 - 64 * i });
            if i % 7 == 0 {
                encoder.push(&Event::Call { callsite: 0x50, target: 0x90, sp: 0x7000 });
                encoder.push(&Event::AccessSized { site: 0, addr: 0x2000 + i, size: 3 });
                encoder.push(&Event::Return { sp: 0x7008 });
            }
        }
        let raw = encoder.take();
        let (all, error) = decode_all(&raw, &sites, false);
        assert_eq!((all.len(), error), (40 * 2 + 6 * 3, None));
        for cut in 0..raw.len() {
            assert_eq!(decode_all(&raw[..cut], &sites, true), decode_all(&raw[..cut], &sites, false), "cut at {cut}");
        }
        let mut differing = 0;
        for at in 0..raw.len() {
            for value in [0x00, 0x02, 0x7f, 0x80, 0x81, 0x83, 0xa5, 0xff] {
                let mut bad = raw.clone();
                bad[at] = value;
                let slow = decode_all(&bad, &sites, false);
                assert_eq!(decode_all(&bad, &sites, true), slow, "byte {at} set to {value:#x}");
                differing += usize::from(slow.1.is_some());
            }
        }
        assert!(differing > 100, "the changes made malformed records: {differing}");
    }

    /// An extension body of 128 bytes or more needs a longer length than
    /// the one byte first given to it: the reader skips exactly that body
    /// (a kind it does not know) and reads the event after it.
    #[test]
    fn a_long_extension_body_keeps_its_length_right() {
        for body_len in [0usize, 1, 127, 128, 300] {
            let mut encoder = ChunkEncoder::new();
            put_extension(&mut encoder.buf, 99, |body| body.extend(std::iter::repeat_n(0xab, body_len)));
            encoder.push(&Event::AllocDetail { usable: 24, time_ns: 1_000_000_007 });
            let raw = encoder.take();
            let mut decoder = ChunkDecoder::new();
            decoder.start_chunk();
            let mut cursor = Cursor::new(&raw);
            let got = decoder.next(&mut cursor, &[]).expect("decodes");
            assert_eq!(got, Some(Event::AllocDetail { usable: 24, time_ns: 1_000_000_007 }), "body of {body_len}");
            assert!(cursor.is_empty());
        }
    }
}
