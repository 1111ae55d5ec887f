//! Work off the UI thread. A [`Job`] runs one piece of work at a time on
//! Bevy's async compute pool, keyed by what it was asked for: asking for a
//! new key cancels the running work (it checks a flag) and queues the new
//! one, which starts when the running one returns; the last finished result
//! stays until a newer one replaces it, so the UI always has something to
//! show.
//!
//! Work that ends wakes the window ([`set_waker`]): the window does not
//! draw continuously while it waits for work ([`crate::pacing`]), so a
//! result is shown (and queued work started) as soon as it is in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bevy::tasks::{AsyncComputeTaskPool, Task, block_on, poll_once};

/// What wakes the window when work ends.
static WAKER: OnceLock<Box<dyn Fn() + Send + Sync>> = OnceLock::new();

/// Sets what wakes the window when a job's work ends (once; later calls
/// change nothing).
pub fn set_waker(wake: impl Fn() + Send + Sync + 'static) {
    let _ = WAKER.set(Box::new(wake));
}

/// Wakes the window (when a waker is set): work off the UI thread that
/// ended calls this, so its result is shown at once, not at the next paced
/// frame.
pub fn wake_window() {
    if let Some(wake) = WAKER.get() {
        wake();
    }
}

/// A flag the work checks to give up early.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Whether the work should stop.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The work of a job: `None` when cancelled. (In a mutex so that the job,
/// a Bevy resource, is `Sync`; only the UI thread touches it.)
type Work<T> = std::sync::Mutex<Box<dyn FnOnce(Cancel) -> Option<Result<T, String>> + Send>>;

/// Work on the pool, and what it is for.
struct Running<K, T> {
    key: K,
    task: Task<Option<Result<T, String>>>,
    cancel: Cancel,
}

/// One kind of background work, keyed by `K`. At most one piece runs at a
/// time: asking for another key while one runs cancels it and queues the
/// newest request, which starts when the running one returns — so views
/// changing every frame never pile work up on the pool.
pub struct Job<K, T> {
    running: Option<Running<K, T>>,
    /// The newest request, waiting for the running work to stop.
    pending: Option<(K, Work<T>)>,
    done: Option<(K, T)>,
    /// The last work that failed, and why (its key is never run again
    /// until another key was asked for).
    failed: Option<(K, String)>,
}

impl<K, T> Default for Job<K, T> {
    fn default() -> Self {
        Job { running: None, pending: None, done: None, failed: None }
    }
}

impl<K: PartialEq + Clone + Send + 'static, T: Send + 'static> Job<K, T> {
    /// Makes sure work for `key` is running, queued or done; `work` is used
    /// only if none. It returns `None` when cancelled.
    pub fn want(&mut self, key: K, work: impl FnOnce(Cancel) -> Option<T> + Send + 'static) {
        self.want_fallible(key, move |cancel| work(cancel).map(Ok));
    }

    /// Like [`Job::want`] for work that can fail with a message for people:
    /// the failure is kept ([`Job::failure`]) next to the last good result.
    pub fn want_fallible(&mut self, key: K, work: impl FnOnce(Cancel) -> Option<Result<T, String>> + Send + 'static) {
        let running_it = self.running.as_ref().is_some_and(|r| r.key == key && !r.cancel.is_set());
        if running_it
            || self.done.as_ref().is_some_and(|(k, _)| *k == key)
            || self.pending.as_ref().is_some_and(|(k, _)| *k == key)
            || self.failed.as_ref().is_some_and(|(k, _)| *k == key)
        {
            return;
        }
        self.failed = None;
        match &self.running {
            Some(r) => {
                r.cancel.set();
                self.pending = Some((key, std::sync::Mutex::new(Box::new(work))));
            }
            None => self.start(key, std::sync::Mutex::new(Box::new(work))),
        }
    }

    fn start(&mut self, key: K, work: Work<T>) {
        let cancel = Cancel::default();
        let flag = cancel.clone();
        let work = work.into_inner().unwrap_or_else(|e| e.into_inner());
        let task = AsyncComputeTaskPool::get().spawn(async move {
            let result = work(flag);
            // Cancelled work too: what is queued behind it starts at the
            // next frame.
            wake_window();
            result
        });
        self.running = Some(Running { key, task, cancel });
    }

    /// Takes in finished work and starts what was queued; true if a new
    /// result arrived.
    pub fn poll(&mut self) -> bool {
        let Some(r) = self.running.as_mut() else { return false };
        let Some(result) = block_on(poll_once(&mut r.task)) else { return false };
        let Some(Running { key, .. }) = self.running.take() else { return false };
        if let Some((next, work)) = self.pending.take() {
            self.start(next, work);
        }
        match result {
            // A result for a view that changed meanwhile still beats an
            // older one: the UI stretches it until the new one comes.
            Some(Ok(value)) => {
                self.done = Some((key, value));
                true
            }
            Some(Err(why)) => {
                if self.pending.is_none() && self.running.is_none() {
                    self.failed = Some((key, why));
                }
                false
            }
            None => false,
        }
    }

    /// The last failure, if the newest work asked for failed.
    pub fn failure(&self) -> Option<&(K, String)> {
        self.failed.as_ref()
    }

    /// The last finished result and what it was for.
    pub fn latest(&self) -> Option<&(K, T)> {
        self.done.as_ref()
    }

    /// The result, if it is for `key`.
    pub fn result_for(&self, key: &K) -> Option<&T> {
        self.done.as_ref().filter(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether work is running or queued.
    pub fn busy(&self) -> bool {
        self.running.is_some() || self.pending.is_some()
    }

    /// Forgets results and stops work (a new trace was loaded).
    pub fn clear(&mut self) {
        if let Some(r) = self.running.take() {
            r.cancel.set();
            // Dropping a task cancels it where it awaits; ours run to their
            // next check of the flag.
            r.task.detach();
        }
        self.pending = None;
        self.done = None;
        self.failed = None;
    }
}

/// Counting wake-ups in tests: the waker is set once per process, so the
/// tests that count share one counter and take turns.
#[cfg(test)]
pub(crate) mod wakes {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, MutexGuard};

    static WAKES: AtomicUsize = AtomicUsize::new(0);
    static TURN: Mutex<()> = Mutex::new(());

    /// Wake-ups so far, and the turn to count them (hold it while counting).
    pub(crate) fn count() -> (usize, MutexGuard<'static, ()>) {
        let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        super::set_waker(|| {
            WAKES.fetch_add(1, Ordering::SeqCst);
        });
        (WAKES.load(Ordering::SeqCst), turn)
    }

    /// Wake-ups since `before`.
    pub(crate) fn since(before: usize) -> usize {
        WAKES.load(Ordering::SeqCst) - before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Ended work wakes the window, cancelled work included, and the work
    /// queued behind cancelled work runs.
    #[test]
    fn ended_work_wakes_the_window() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let (before, _turn) = wakes::count();
        let mut job: Job<u32, u32> = Job::default();
        job.want(1, |cancel| {
            // Runs until cancelled by the request for key 2.
            while !cancel.is_set() {
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        });
        job.want(2, |_| Some(20));
        let start = Instant::now();
        while job.latest().is_none() && start.elapsed() < Duration::from_secs(10) {
            job.poll();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(job.latest().map(|(k, v)| (*k, *v)), Some((2, 20)));
        assert_eq!(wakes::since(before), 2, "the cancelled work and the finished one");
    }
}
