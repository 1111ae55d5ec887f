//! Work off the UI thread. A [`Job`] runs one piece of work at a time on
//! Bevy's async compute pool, keyed by what it was asked for: asking for a
//! new key cancels the running work (it checks a flag) and queues the new
//! one, which starts when the running one returns; the last finished result
//! stays until a newer one replaces it, so the UI always has something to
//! show.
//!
//! Work that ends wakes the window ([`set_waker`]): the window does not
//! draw continuously while it waits for work ([`crate::pacing`]), so a
//! result is shown (and queued work started) as soon as it is in — except
//! while a picture of the view is being drawn ([`Job::picture`]): then
//! other work's results wait for the picture (or the next paced frame).
//! A frame on the CPU renderer costs about 45 ms of CPU on the two cores
//! the picture is drawn on, and the frame a label job's end woke in the
//! middle of a zoom step showed nothing new (the old picture, stretched).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bevy::tasks::{AsyncComputeTaskPool, Task};

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

/// Pictures being drawn now ([`Job::picture`]).
static PICTURES_DRAWING: AtomicUsize = AtomicUsize::new(0);

/// Counts a picture as being drawn while it lives.
struct Drawing;

impl Drawing {
    fn start() -> Drawing {
        PICTURES_DRAWING.fetch_add(1, Ordering::SeqCst);
        Drawing
    }
}

impl Drop for Drawing {
    fn drop(&mut self) {
        PICTURES_DRAWING.fetch_sub(1, Ordering::SeqCst);
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

/// What work returns: `None` when cancelled.
type Outcome<T> = Option<Result<T, String>>;

/// Work on the pool, and what it is for.
struct Running<K, T> {
    key: K,
    task: Task<()>,
    /// The work's outcome, put here before the work wakes the window: a
    /// frame it wakes finds it (the task itself is finished only a moment
    /// later, and a frame that polled it too soon left the result to the
    /// next paced frame, up to a second later).
    outcome: Arc<Mutex<Option<Outcome<T>>>>,
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
    /// Whether it draws a picture of the view (see the module docs).
    picture: bool,
    /// Whether work started from now on wakes the window when it ends
    /// ([`Job::set_wakes_window`]).
    wakes: bool,
}

impl<K, T> Default for Job<K, T> {
    fn default() -> Self {
        Job { running: None, pending: None, done: None, failed: None, picture: false, wakes: true }
    }
}

impl<K, T> Job<K, T> {
    /// A job drawing a picture of the view: while it runs, other jobs that
    /// end do not wake the window; it wakes it when it ends.
    pub fn picture() -> Self {
        Job { picture: true, ..Job::default() }
    }

    /// Whether work started from now on wakes the window when it ends
    /// (the default). Work that does not leaves its result to the next
    /// frame the window draws anyway: the preview while a trace decodes,
    /// whose frames are paced, and each of which costs the decoder CPU.
    pub fn set_wakes_window(&mut self, wakes: bool) {
        self.wakes = wakes;
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
        // Counted from the request, so that work ending before the picture
        // has reached the pool does not wake the window either.
        let drawing = self.picture.then(Drawing::start);
        let wakes = self.wakes;
        let outcome = Arc::new(Mutex::new(None));
        let slot = outcome.clone();
        let task = AsyncComputeTaskPool::get().spawn(async move {
            let result = work(flag);
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
            let picture = drawing.is_some();
            drop(drawing);
            // Cancelled work too: what is queued behind it starts at the
            // next frame.
            if wakes && (picture || PICTURES_DRAWING.load(Ordering::SeqCst) == 0) {
                wake_window();
            }
        });
        self.running = Some(Running { key, task, outcome, cancel });
    }

    /// Takes in finished work and starts what was queued; true if a new
    /// result arrived.
    pub fn poll(&mut self) -> bool {
        let Some(r) = self.running.as_ref() else { return false };
        let outcome = r.outcome.lock().unwrap_or_else(|p| p.into_inner()).take();
        // Finished without an outcome: the work panicked (a bug; the panic
        // message is on stderr). Said as a failure, not shown as nothing.
        let panicked = || Some(Err("the work stopped on an internal error (see the terminal)".to_string()));
        let Some(result) = outcome.or_else(|| r.task.is_finished().then(panicked)) else { return false };
        let Some(Running { key, task, .. }) = self.running.take() else { return false };
        // Done or about to be: nothing to wait for.
        task.detach();
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

    /// Work started while the job is told not to wake the window ends
    /// without waking it; its result is there for the next frame.
    #[test]
    fn quiet_work_leaves_its_result_to_the_next_frame() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let (before, _turn) = wakes::count();
        let mut job: Job<u32, u32> = Job::default();
        job.set_wakes_window(false);
        job.want(1, |_| Some(10));
        assert!(wait_for(|| job.poll()), "the work ends");
        assert_eq!(job.latest().map(|(k, v)| (*k, *v)), Some((1, 10)));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(wakes::since(before), 0, "quiet work woke the window");
        job.set_wakes_window(true);
        job.want(2, |_| Some(20));
        assert!(wait_for(|| wakes::since(before) == 1), "work that wakes the window again");
    }

    /// Polls until `done` or ten seconds.
    fn wait_for(mut done: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// Other work ending while a picture is drawn does not wake the window;
    /// the picture's end does, and the frame it wakes finds the picture.
    #[test]
    fn work_ending_during_a_picture_waits_for_it() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let (before, _turn) = wakes::count();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let mut picture: Job<u32, u32> = Job::picture();
        picture.want(1, move |_| {
            let _ = wait.recv();
            Some(10)
        });
        let mut labels: Job<u32, u32> = Job::default();
        labels.want(1, |_| Some(5));
        assert!(wait_for(|| labels.poll()), "the other work ends");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(wakes::since(before), 0, "no wake-up while the picture is drawn");
        go.send(()).expect("the picture waits");
        assert!(wait_for(|| wakes::since(before) == 1), "the picture's end wakes the window");
        assert!(picture.poll(), "the frame it wakes finds the picture");
        assert_eq!(picture.latest().map(|(k, v)| (*k, *v)), Some((1, 10)));
        // No picture drawn: other work wakes the window again.
        labels.want(2, |_| Some(6));
        assert!(wait_for(|| wakes::since(before) == 2), "other work wakes the window");
        assert!(labels.poll(), "and the frame finds its result");
    }
}
