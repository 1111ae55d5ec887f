//! Work off the UI thread. A [`Job`] runs one piece of work at a time on
//! Bevy's async compute pool, keyed by what it was asked for: asking for a
//! new key cancels the running work (it checks a flag) and starts the new
//! one; the last finished result stays until a newer one replaces it, so
//! the UI always has something to show.

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

/// One kind of background work, keyed by `K`.
pub struct Job<K, T> {
    running: Option<(K, Task<Option<T>>, Cancel)>,
    done: Option<(K, T)>,
}

impl<K, T> Default for Job<K, T> {
    fn default() -> Self {
        Job { running: None, done: None }
    }
}

impl<K: PartialEq + Clone + Send + 'static, T: Send + 'static> Job<K, T> {
    /// Makes sure work for `key` is running or done; `work` is started only
    /// if neither. It returns `None` when cancelled.
    pub fn want(&mut self, key: K, work: impl FnOnce(Cancel) -> Option<T> + Send + 'static) {
        if self.done.as_ref().is_some_and(|(k, _)| *k == key) || self.running.as_ref().is_some_and(|(k, ..)| *k == key)
        {
            return;
        }
        if let Some((_, task, cancel)) = self.running.take() {
            cancel.set();
            // Dropping a task cancels it where it awaits; ours run to their
            // next check of the flag.
            task.detach();
        }
        let cancel = Cancel::default();
        let flag = cancel.clone();
        let task = AsyncComputeTaskPool::get().spawn(async move { work(flag) });
        self.running = Some((key, task, cancel));
    }

    /// Takes in finished work; true if a new result arrived.
    pub fn poll(&mut self) -> bool {
        let Some((_, task, _)) = self.running.as_mut() else { return false };
        let Some(result) = block_on(poll_once(task)) else { return false };
        let (key, ..) = self.running.take().expect("checked above");
        match result {
            Some(value) => {
                self.done = Some((key, value));
                true
            }
            None => false,
        }
    }

    /// The last finished result and what it was for.
    pub fn latest(&self) -> Option<&(K, T)> {
        self.done.as_ref()
    }

    /// The result, if it is for `key`.
    pub fn result_for(&self, key: &K) -> Option<&T> {
        self.done.as_ref().filter(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether work is running.
    pub fn busy(&self) -> bool {
        self.running.is_some()
    }

    /// Forgets results and stops work (a new trace was loaded).
    pub fn clear(&mut self) {
        if let Some((_, task, cancel)) = self.running.take() {
            cancel.set();
            task.detach();
        }
        self.done = None;
    }
}
