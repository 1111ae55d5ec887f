//! SIGINT/SIGTERM/SIGHUP handling for the recorder.
//!
//! The recorder may be blocked in `waitpid` while the target runs natively,
//! so setting a flag is not enough: the handler also kills the target, which
//! wakes `waitpid` up. The recording then ends with a readable trace marked
//! truncated.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);
static TARGET: AtomicI32 = AtomicI32::new(0);

/// Installs the handlers (idempotent per signal registration; call once).
pub fn install() -> std::io::Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        // SAFETY: the action only does atomic operations and kill(2), both
        // async-signal-safe.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                SIGNAL.store(sig, Ordering::SeqCst);
                REQUESTED.store(true, Ordering::SeqCst);
                let pid = TARGET.load(Ordering::SeqCst);
                if pid > 0 {
                    libc::kill(pid, libc::SIGKILL);
                }
            })?;
        }
    }
    Ok(())
}

/// True once an interrupt arrived.
#[inline]
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// The signal that interrupted the recording (0: none).
pub fn signal() -> i32 {
    SIGNAL.load(Ordering::SeqCst)
}

/// Tells the handler which process to kill (0: none).
pub(crate) fn set_target(pid: i32) {
    TARGET.store(pid, Ordering::SeqCst);
}
