//! The time stamp counter as a clock: the allocation agent stamps each call
//! with `rdtsc` where the kernel's own clock is the TSC (about 10 ns a call
//! against clock_gettime's 22 ns, measured here), and linetrace turns the
//! counts into CLOCK_MONOTONIC nanoseconds, the unit of the trace format.
//!
//! The conversion is anchored at the latest pair of readings (counter,
//! CLOCK_MONOTONIC) taken just before the records are read, with the rate
//! measured from the first pair to it: a record is converted shortly after
//! it was written, so its error is the rate's error times that short lag,
//! not times the whole run (NTP slews the monotonic clock by up to 500 ppm).
//! Converted times never go back: a call's time is at least the time of
//! the call handed over before it.

/// Whether the kernel keeps time with the TSC (its clocksource is `tsc`):
/// then the counter runs at a constant rate and agrees across cores, which
/// is what the kernel checked before choosing it.
pub fn kernel_clock_is_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

/// A reading of both clocks, as close together as two reads get.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Pair {
    ticks: u64,
    ns: u64,
}

impl Pair {
    fn now() -> Pair {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: rdtsc has no preconditions on x86-64; clock_gettime
        // writes the timespec it is given.
        let (ticks, ok) = unsafe {
            let ticks = core::arch::x86_64::_rdtsc();
            (ticks, libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) == 0)
        };
        let ns = if ok { ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64 } else { 0 };
        Pair { ticks, ns }
    }
}

/// Turns counter readings into CLOCK_MONOTONIC nanoseconds.
#[derive(Clone, Debug)]
pub struct TscClock {
    first: Pair,
    latest: Pair,
    ns_per_tick: f64,
    /// The last time handed out (times never go back).
    last: u64,
}

impl Default for TscClock {
    fn default() -> Self {
        TscClock::new()
    }
}

impl TscClock {
    /// A clock whose rate is measured from now on: create it before the
    /// program starts.
    pub fn new() -> TscClock {
        let first = Pair::now();
        TscClock { first, latest: first, ns_per_tick: 0.0, last: 0 }
    }

    /// Reads both clocks again: call before reading records, which then all
    /// carry earlier counts.
    pub fn update(&mut self) {
        self.set_latest(Pair::now());
    }

    fn set_latest(&mut self, latest: Pair) {
        if latest.ticks > self.first.ticks && latest.ns > self.first.ns {
            self.latest = latest;
            self.ns_per_tick = (latest.ns - self.first.ns) as f64 / (latest.ticks - self.first.ticks) as f64;
        }
    }

    /// The CLOCK_MONOTONIC time of counter reading `ticks`.
    pub fn ns(&mut self, ticks: u64) -> u64 {
        let from_latest = (ticks as f64 - self.latest.ticks as f64) * self.ns_per_tick;
        let ns = (self.latest.ns as f64 + from_latest).max(0.0) as u64;
        self.last = self.last.max(ns);
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter at 3 ticks per nanosecond from a known start.
    fn clock_at_3_ticks_per_ns() -> TscClock {
        let mut clock = TscClock { first: Pair { ticks: 3_000, ns: 1_000 }, ..TscClock::new() };
        clock.last = 0;
        clock.set_latest(Pair { ticks: 3_003_000, ns: 1_001_000 });
        clock
    }

    #[test]
    fn counts_become_nanoseconds_at_the_measured_rate() {
        let mut clock = clock_at_3_ticks_per_ns();
        assert_eq!(clock.ns(3_003_000), 1_001_000, "the latest pair itself");
        assert_eq!(clock.ns(3_003_300), 1_001_100, "100 ns after it");
        // A later reading with a slightly different rate: anchored there.
        clock.set_latest(Pair { ticks: 6_003_000, ns: 2_001_200 });
        assert_eq!(clock.ns(6_003_000), 2_001_200);
    }

    #[test]
    fn times_never_go_back() {
        let mut clock = clock_at_3_ticks_per_ns();
        assert_eq!(clock.ns(3_003_300), 1_001_100);
        assert_eq!(clock.ns(3_000_000), 1_001_100, "an earlier count after a later one keeps the later time");
    }

    #[test]
    fn the_real_counter_follows_the_monotonic_clock() {
        if !kernel_clock_is_tsc() {
            return;
        }
        let mut clock = TscClock::new();
        std::thread::sleep(std::time::Duration::from_millis(20));
        // SAFETY: see Pair::now.
        let ticks = unsafe { core::arch::x86_64::_rdtsc() };
        let truth = Pair::now().ns;
        clock.update();
        let got = clock.ns(ticks);
        assert!(got.abs_diff(truth) < 50_000, "within 50 us: {got} against {truth}");
    }
}
