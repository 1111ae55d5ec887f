//! A thread that carries out messages in order and ends with a result:
//! the trace writer's compressing thread.
//!
//! Messages go through a bounded channel (a sender waits when the thread
//! falls behind, which bounds memory). Buffers the thread is done with come
//! back through a second channel to be filled again. The thread's error
//! stops it; the next [`Worker::send`] (or [`Worker::join`]) returns it.

use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::thread::JoinHandle;

use super::FormatError;

/// The sending side of a worker thread with messages `M`, buffers `B` handed
/// back, and result `R`.
pub(crate) struct Worker<M, B, R> {
    messages: Option<SyncSender<M>>,
    recycled: Receiver<B>,
    thread: Option<JoinHandle<Result<R, FormatError>>>,
}

impl<M: Send + 'static, B: Send + 'static, R: Send + 'static> Worker<M, B, R> {
    /// Starts thread `name` running `work` on the messages, with at most
    /// `in_flight` messages waiting; `work` hands buffers back on its sender.
    pub(crate) fn start(
        name: &str,
        in_flight: usize,
        work: impl FnOnce(&Receiver<M>, &Sender<B>) -> Result<R, FormatError> + Send + 'static,
    ) -> Result<Self, FormatError> {
        let (messages, received) = sync_channel(in_flight);
        let (recycle, recycled) = channel();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || work(&received, &recycle))?;
        Ok(Worker { messages: Some(messages), recycled, thread: Some(thread) })
    }
}

impl<M, B, R> Worker<M, B, R> {
    /// Sends a message; if the thread stopped, its error.
    pub(crate) fn send(&mut self, message: M) -> Result<(), FormatError> {
        let Some(messages) = &self.messages else { return Err(FormatError::WriterStopped) };
        if messages.send(message).is_ok() {
            return Ok(());
        }
        // The thread stopped: its error says why.
        match self.join() {
            Err(e) => Err(e),
            Ok(_) => Err(FormatError::WriterStopped),
        }
    }

    /// A buffer the thread handed back, if any.
    pub(crate) fn recycled(&self) -> Option<B> {
        // Empty or disconnected (the thread ended): none.
        self.recycled.try_recv().ok()
    }

    /// True until the thread was joined.
    pub(crate) fn is_running(&self) -> bool {
        self.thread.is_some()
    }

    /// Closes the channel, so the thread ends after the messages sent, and
    /// waits for it; its result, once.
    pub(crate) fn join(&mut self) -> Result<R, FormatError> {
        self.messages = None;
        let thread = self.thread.take().ok_or(FormatError::WriterStopped)?;
        thread.join().unwrap_or(Err(FormatError::WriterStopped))
    }
}
