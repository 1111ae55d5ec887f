//! A batch of one thread's events laid out for handing between threads.
//!
//! Nearly every event a recorder produces is a plain [`Event::Access`]; an
//! [`Event`] is 48 bytes. A batch keeps plain accesses *packed*, 8 bytes
//! each, exactly as the rewrite backend's record buffer holds them (a tag
//! naming the site above a 48-bit address, see [`unpack_access`]), and every
//! other event beside them with its position. The recorder that converts
//! records on one core then copies runs of records as they are, and the
//! writer on the other core turns each tag into its site while it encodes:
//! no 12-byte (site, address) pair is written and read back in between.

use std::sync::Arc;

use super::{Event, SiteId};

/// Bits of a packed access's address; the tag is in the bits above.
pub const PACKED_ADDRESS_BITS: u32 = 48;

/// Splits a packed access (or any 64-bit record of that layout) into its
/// 16-bit tag and its address. The address is sign-extended from 48 bits,
/// so the kernel half of the address space (the vsyscall page) and small
/// negative values survive.
#[inline(always)]
pub fn unpack_access(packed: u64) -> (u16, u64) {
    let tag = (packed >> PACKED_ADDRESS_BITS) as u16;
    let addr = ((packed << (64 - PACKED_ADDRESS_BITS)) as i64 >> (64 - PACKED_ADDRESS_BITS)) as u64;
    (tag, addr)
}

/// Events of one thread, in order: plain accesses packed, the others with
/// the number of packed accesses before them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventBatch {
    packed: Vec<u64>,
    /// The site of each tag of `packed`; tags of no site hold `SiteId::MAX`.
    tags: Arc<[SiteId]>,
    /// (packed accesses before it, event).
    others: Vec<(usize, Event)>,
}

/// One run of a batch: packed accesses, then (unless the batch ends) the
/// event that follows them.
pub(crate) struct Run<'a> {
    pub(crate) packed: &'a [u64],
    pub(crate) then: Option<&'a Event>,
}

impl EventBatch {
    /// An empty batch.
    pub fn new() -> Self {
        EventBatch::default()
    }

    /// Appends an event. Accesses given this way are kept as events; only
    /// [`Self::push_packed`] packs.
    #[inline]
    pub fn push(&mut self, event: &Event) {
        self.others.push((self.packed.len(), *event));
    }

    /// Sets the table that turns the tags of packed accesses into sites
    /// (shared: a recorder hands the same table to every batch until it
    /// grows). A tag beyond it, or naming `SiteId::MAX`, makes the writer
    /// refuse the batch.
    pub fn set_tags(&mut self, tags: Arc<[SiteId]>) {
        self.tags = tags;
    }

    /// The table set by [`Self::set_tags`].
    pub fn tags(&self) -> &[SiteId] {
        &self.tags
    }

    /// Appends plain accesses packed as [`unpack_access`] reads them, each
    /// `Event::Access { site: tags[tag], addr }`.
    #[inline]
    pub fn push_packed(&mut self, packed: &[u64]) {
        self.packed.extend_from_slice(packed);
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.packed.len() + self.others.len()
    }

    /// True when the batch holds no event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Empties the batch, keeping its memory (and its tag table).
    pub fn clear(&mut self) {
        self.packed.clear();
        self.others.clear();
    }

    /// The events in order, as runs of packed accesses each followed by
    /// another event.
    pub(crate) fn runs(&self) -> impl Iterator<Item = Run<'_>> {
        let mut from = 0;
        let others = self.others.iter().map(Some).chain(std::iter::once(None));
        others.map(move |other| {
            let to = other.map_or(self.packed.len(), |(at, _)| *at);
            let run = Run { packed: &self.packed[from..to], then: other.map(|(_, e)| e) };
            from = to;
            run
        })
    }

    /// The events in order; a packed access whose tag has no site comes
    /// out with site `SiteId::MAX`.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        self.runs().flat_map(|run| {
            let accesses = run.packed.iter().map(|&p| {
                let (tag, addr) = unpack_access(p);
                Event::Access { site: self.tags.get(usize::from(tag)).copied().unwrap_or(SiteId::MAX), addr }
            });
            accesses.chain(run.then.copied())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_back_in_order() {
        let events = [
            Event::Return { sp: 1 },
            Event::Access { site: 1, addr: 10 },
            Event::Access { site: 2, addr: 20 },
            Event::Stepped { count: 3 },
            Event::Stepped { count: 4 },
            Event::Access { site: 3, addr: 30 },
        ];
        let mut batch = EventBatch::new();
        events.iter().for_each(|e| batch.push(e));
        assert_eq!(batch.len(), 6);
        assert_eq!(batch.events().collect::<Vec<_>>(), events);
        assert_eq!(batch.runs().count(), 7, "accesses pushed as events are events");
        batch.clear();
        assert!(batch.is_empty() && batch.events().next().is_none());
    }

    #[test]
    fn packed_accesses_take_their_site_from_the_tag_table() {
        let mut batch = EventBatch::new();
        batch.set_tags(Arc::from([7, SiteId::MAX, 9]));
        let pack = |tag: u64, addr: u64| tag << PACKED_ADDRESS_BITS | (addr & ((1 << PACKED_ADDRESS_BITS) - 1));
        batch.push_packed(&[pack(0, 0x1000), pack(2, 0x2000)]);
        batch.push(&Event::Return { sp: 8 });
        batch.push_packed(&[pack(2, 0xffff_ffff_ff60_0000), pack(1, 0), pack(5, 0)]);
        assert_eq!(
            batch.events().collect::<Vec<_>>(),
            [
                Event::Access { site: 7, addr: 0x1000 },
                Event::Access { site: 9, addr: 0x2000 },
                Event::Return { sp: 8 },
                Event::Access { site: 9, addr: 0xffff_ffff_ff60_0000 },
                Event::Access { site: SiteId::MAX, addr: 0 },
                Event::Access { site: SiteId::MAX, addr: 0 },
            ],
            "sign-extended addresses; tags of no site"
        );
        assert_eq!(batch.runs().count(), 2);
    }
}
