//! Whether a picture may take a second thread.
//!
//! Large pictures are drawn in two halves at once, a thread each
//! ([`crate::raster`]'s bitmaps, [`crate::heap_raster`]'s heaps): on two
//! cores a zoom step's picture comes in about half the time. A caller that
//! needs the other core for itself draws on one thread instead,
//! [`on_one_thread`]: a viewer whose frames follow a pan (a picture per
//! frame, each soon replaced) keeps a core for its frames.
//!
//! ```
//! use decoder::drawing_threads::{on_one_thread, second_thread_allowed};
//! assert!(second_thread_allowed());
//! on_one_thread(|| assert!(!second_thread_allowed()));
//! assert!(second_thread_allowed());
//! ```

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::DecodeError;
use crate::raster::Progress;

thread_local! {
    /// Set while the calling thread draws on its own.
    static ONE_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Runs `draw` with every picture it makes drawn on the calling thread
/// alone (the same pictures: a second thread only shares out the pixels).
pub fn on_one_thread<T>(draw: impl FnOnce() -> T) -> T {
    /// Puts the flag back as it was, also when `draw` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ONE_THREAD.with(|one| one.set(self.0));
        }
    }
    let _restore = Restore(ONE_THREAD.with(|one| one.replace(true)));
    draw()
}

/// Whether a picture drawn now may take a second thread.
pub fn second_thread_allowed() -> bool {
    !ONE_THREAD.with(Cell::get)
}

/// Runs `left` on the calling thread and `right` on a second one, at
/// once, and returns both results: the one way a picture or a summary is
/// made in two parts. `left` reports the progress of both (its work done,
/// out of twice its work), and when `progress` says stop, or `left`
/// fails, `right` stops too (its work would be thrown away). If `right`
/// panics, it counts as cancelled.
pub(crate) fn in_two_parts<L, R: Send>(
    progress: Progress<'_>,
    left: impl FnOnce(Progress<'_>) -> Result<L, DecodeError>,
    right: impl FnOnce(Progress<'_>) -> Result<R, DecodeError> + Send,
) -> (Result<L, DecodeError>, Result<R, DecodeError>) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let other = s.spawn(|| right(&mut |_, _| !stop.load(Ordering::Relaxed)));
        let mine = left(&mut |done, all| {
            let go = progress(done, all * 2);
            if !go {
                stop.store(true, Ordering::Relaxed);
            }
            go
        });
        if mine.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        (mine, other.join().unwrap_or(Err(DecodeError::Cancelled)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_holds_inside_only_and_after_a_panic_is_lifted() {
        let nested = on_one_thread(|| on_one_thread(second_thread_allowed) || second_thread_allowed());
        assert!(!nested, "inside, also after a nested call ended");
        assert!(second_thread_allowed());
        let panicked = std::panic::catch_unwind(|| on_one_thread(|| panic!("drawing failed")));
        assert!(panicked.is_err());
        assert!(second_thread_allowed(), "lifted after the panic");
        let other = on_one_thread(|| std::thread::spawn(second_thread_allowed).join().expect("joins"));
        assert!(other, "another thread is not held");
    }

    /// The second part is told to stop when the first fails, and when the
    /// caller's progress says stop; otherwise it runs to its end.
    #[test]
    fn the_second_part_stops_when_the_first_fails_or_is_cancelled() {
        // The second part waits (at most 10 s) to be told to stop.
        let waits = |progress: Progress<'_>| -> Result<bool, DecodeError> {
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_secs(10) {
                if !progress(0, 1) {
                    return Ok(true);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Ok(false)
        };
        let (left, right) = in_two_parts(&mut |_, _| true, |_| Err::<(), _>(DecodeError::Cancelled), waits);
        assert!(left.is_err());
        assert!(matches!(right, Ok(true)), "stopped after the first part failed");
        let (left, right) = in_two_parts(&mut |_, _| false, |p| Ok(p(1, 2)), waits);
        assert!(matches!(left, Ok(false)));
        assert!(matches!(right, Ok(true)), "stopped with the caller's progress");
        let (left, right) = in_two_parts(&mut |_, _| true, |p| Ok(p(1, 2)), |p| Ok(p(0, 1)));
        assert!(matches!((left, right), (Ok(true), Ok(true))), "neither stopped");
    }
}
