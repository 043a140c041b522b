//! Chromium's IndexedDB change tracking, which lets a capture take a frame's IndexedDB as
//! unchanged instead of reading it again. A page session keeps one [`Tracking`]; a capture
//! asks it for an [`IdbCapture`] at its start, which says what its script may take as
//! unchanged and which frames to read again, and is consumed to settle what it read. Each
//! frame's read is described by an [`IdbAnswer`]. The parts: `watch` (the tracking of a page
//! session), `seen` (what the change events said), `events` (the relay's tap and the tasks that
//! start and stop tracking), `key` (storage keys), `answer` and `capture`.

mod answer;
mod capture;
mod events;
mod key;
mod seen;
mod watch;

pub(super) use answer::{IdbAnswer, IdbAnswers, IdbPart, Moved};
pub(super) use capture::IdbCapture;
pub(crate) use watch::Tracking;

#[cfg(test)]
mod tests;
