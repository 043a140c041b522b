//! One capture's use of the tracking, from its start to its settling.

use chromiumoxide::Page;

use super::answer::{IdbAnswer, IdbAnswers, Moved};
use super::watch::{Begun, Tracking};
use crate::checkpoint::cache::PartCache;
use crate::relay::Calls;

/// A capture's view of its page session's tracking: asked for at its start
/// ([`Tracking::begin`]), it says what the capture script may take as unchanged and which
/// frames to read again, and is consumed to settle what the capture read.
pub(in crate::checkpoint) struct IdbCapture<'w> {
    tracking: &'w Tracking,
    begun: Begun,
}

impl Tracking {
    /// A capture begins: it may take as unchanged what the tracking offers (see
    /// [`Tracking::offer`]). `in_full`: nothing may be taken as unchanged.
    pub(in crate::checkpoint) fn begin(&self, cache: &PartCache, in_full: bool) -> IdbCapture<'_> {
        let mut begun = self.offer(cache);
        if in_full {
            begun.same.clear();
        }
        IdbCapture {
            tracking: self,
            begun,
        }
    }
}

impl IdbCapture<'_> {
    /// What the capture script may take as unchanged: `[{scope, hash, list}]`.
    pub(in crate::checkpoint) fn offered(&self) -> &[serde_json::Value] {
        &self.begun.same
    }

    /// After the capture's first reads (`answers`): if a frame took its last full read as
    /// standing and a change came since the capture began (a commit the page may have acted on
    /// in what was read), the scopes whose storage key may have changed.
    pub(in crate::checkpoint) fn moved<'a>(
        &self,
        answers: impl IntoIterator<Item = IdbAnswer<'a>>,
    ) -> Option<Moved> {
        let offered = !self.begun.same.is_empty();
        if !(offered && answers.into_iter().any(|a| a.taken_as_unchanged())) {
            return None;
        }
        self.tracking.moved_since(&self.begun.changes).map(Moved)
    }

    /// At the end of the capture, whose frames said `answers`: notes each full read (see
    /// [`Tracking::read_in_full`]), then watches the reads taken as standing (see
    /// [`Tracking::watch_standing`]).
    pub(in crate::checkpoint) async fn settle(
        self,
        page: &Page,
        calls: &Calls,
        answers: IdbAnswers,
    ) {
        let IdbAnswers { full, standing } = answers;
        let (tracking, begun) = (self.tracking, &self.begun);
        let reads = full
            .into_iter()
            .map(|read| tracking.read_in_full(page, calls, read, begun));
        futures::future::join_all(reads).await;
        tracking.watch_standing(&standing, begun);
    }
}
