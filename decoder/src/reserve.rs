//! Room for tables that grow with the columns, reserved once the decoding
//! pass expects how many columns the trace has.

/// Reserves room for `vec` to grow to twice `estimate` elements, at most
/// `cap`: for a table written once, in order, to a length estimated while
/// it is written (the summary's levels, the columns' miss flags).
///
/// Why twice: room is address space, and only the pages written cost
/// memory, but a table outgrowing its room is copied into twice the room,
/// and while it is copied both are resident. The estimate is made early
/// and can be well short: 80M columns for the 100M-read benchmark trace,
/// whose summary's level 0 was then copied at 84M. With room for twice
/// the estimate, the decode of that trace peaked at 332,624-334,928 KiB
/// instead of 355,192-356,564 KiB (`/usr/bin/time -f %M`, 5 alternating
/// rounds; its time did not change beyond the noise). Only a hint: without
/// the memory, the table grows as it goes.
///
/// (On huge pages, the room cost more than it saved: the working-set
/// thread's page faults went from 55,064 to 5,588, but the decode's system
/// time from 0.35-0.55 s to 0.65-0.98 s.)
pub(crate) fn for_estimate<T>(vec: &mut Vec<T>, estimate: usize, cap: usize) {
    let room = estimate.saturating_mul(2).min(cap);
    let _ = vec.try_reserve_exact(room.saturating_sub(vec.len()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_twice_the_estimate_within_the_cap_and_never_less_than_held() {
        let mut v: Vec<u64> = Vec::new();
        for_estimate(&mut v, 1000, usize::MAX);
        assert!(v.capacity() >= 2000, "capacity {}", v.capacity());
        let mut capped: Vec<u64> = Vec::new();
        for_estimate(&mut capped, 1000, 1500);
        assert!((1500..2000).contains(&capped.capacity()), "capacity {}", capped.capacity());
        let mut full = vec![7u64; 3000];
        for_estimate(&mut full, 1000, usize::MAX);
        assert_eq!(full.len(), 3000);
        assert!(full.iter().all(|&x| x == 7));
    }
}
