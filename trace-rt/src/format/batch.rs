//! A batch of one thread's events laid out for handing between threads.
//!
//! Nearly every event a recorder produces is a plain [`Event::Access`]; an
//! [`Event`] is 48 bytes, a plain access needs 12 (site and address). A
//! batch keeps plain accesses in two columns and every other event beside
//! them with its position, so a recorder converting records on one core
//! and the writer encoding them on another move a quarter of the memory.

use super::{Event, SiteId};

/// Events of one thread, in order: plain accesses in columns, the others
/// with the number of plain accesses before them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventBatch {
    sites: Vec<SiteId>,
    addrs: Vec<u64>,
    /// (plain accesses before it, event).
    others: Vec<(usize, Event)>,
}

/// One run of a batch: plain accesses, then (unless the batch ends) the
/// event that follows them.
pub(crate) struct Run<'a> {
    pub(crate) sites: &'a [SiteId],
    pub(crate) addrs: &'a [u64],
    pub(crate) then: Option<&'a Event>,
}

impl EventBatch {
    /// An empty batch.
    pub fn new() -> Self {
        EventBatch::default()
    }

    /// Appends an event.
    #[inline]
    pub fn push(&mut self, event: &Event) {
        match *event {
            Event::Access { site, addr } => {
                self.sites.push(site);
                self.addrs.push(addr);
            }
            _ => self.others.push((self.sites.len(), *event)),
        }
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.sites.len() + self.others.len()
    }

    /// True when the batch holds no event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.sites.clear();
        self.addrs.clear();
        self.others.clear();
    }

    /// The events in order, as runs of plain accesses each followed by
    /// another event.
    pub(crate) fn runs(&self) -> impl Iterator<Item = Run<'_>> {
        let mut from = 0;
        let others = self.others.iter().map(Some).chain(std::iter::once(None));
        others.map(move |other| {
            let to = other.map_or(self.sites.len(), |(at, _)| *at);
            let run = Run { sites: &self.sites[from..to], addrs: &self.addrs[from..to], then: other.map(|(_, e)| e) };
            from = to;
            run
        })
    }

    /// The events in order.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        self.runs().flat_map(|run| {
            let accesses = run.sites.iter().zip(run.addrs).map(|(&site, &addr)| Event::Access { site, addr });
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
        assert_eq!(batch.runs().count(), 4, "one run per other event, and the last");
        batch.clear();
        assert!(batch.is_empty() && batch.events().next().is_none());
    }
}
