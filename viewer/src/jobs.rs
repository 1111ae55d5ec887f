//! Work off the UI thread. A [`Job`] runs one piece of work at a time on
//! Bevy's async compute pool, keyed by what it was asked for: asking for a
//! new key cancels the running work (it checks a flag) and queues the new
//! one, which starts when the running one returns; the last finished result
//! stays until a newer one replaces it, so the UI always has something to
//! show.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bevy::tasks::{AsyncComputeTaskPool, Task, block_on, poll_once};

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
        let task = AsyncComputeTaskPool::get().spawn(async move { work(flag) });
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
