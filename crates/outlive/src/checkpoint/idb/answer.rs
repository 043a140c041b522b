//! What a capture's frames say of their IndexedDB: each frame's answer, what the capture keeps
//! of them to settle, and which frames a change during the capture has read again.

use std::collections::HashSet;

/// What a capture's read of one frame says of its IndexedDB.
#[derive(Clone, Copy)]
pub(in crate::checkpoint) struct IdbAnswer<'a> {
    /// The frame's scope, as its script stated it (`None` where unknown).
    pub(in crate::checkpoint) scope: Option<&'a str>,
    /// The IndexedDB part the script sent, if any.
    pub(in crate::checkpoint) part: Option<IdbPart<'a>>,
    /// The frame's origin.
    pub(in crate::checkpoint) origin: &'a str,
    /// An out-of-process frame's id (empty where unknown); `None` for the top frame.
    pub(in crate::checkpoint) frame_id: Option<&'a str>,
}

/// An IndexedDB part as the capture script sent it.
#[derive(Clone, Copy)]
pub(in crate::checkpoint) struct IdbPart<'a> {
    pub(in crate::checkpoint) hash: &'a str,
    /// The databases found (names and versions): sent with a full read only.
    pub(in crate::checkpoint) list: Option<&'a str>,
    /// Whether the content was sent.
    pub(in crate::checkpoint) sent: bool,
}

impl<'a> IdbAnswer<'a> {
    /// The same answer, of the out-of-process frame `frame_id`.
    pub(in crate::checkpoint) fn in_frame(self, frame_id: &'a str) -> Self {
        IdbAnswer {
            frame_id: Some(frame_id),
            ..self
        }
    }

    /// Whether the script took IndexedDB as unchanged since the last full read (it sent
    /// neither the database list nor the data).
    pub(super) fn taken_as_unchanged(&self) -> bool {
        self.part.is_some_and(|p| p.list.is_none() && !p.sent)
    }

    /// The full read this answer is (it sent the database list), where its storage key can
    /// be known.
    fn full_read(&self) -> Option<FullRead> {
        let origin = self.origin.to_owned();
        let frame = match self.frame_id {
            None => Frame::Top { origin },
            Some(frame_id) => {
                // A frame with no ancestors would share its scope with a top frame of its
                // origin.
                let framed = self.scope.is_some_and(|s| s.contains(' '));
                if frame_id.is_empty() || !framed {
                    return None;
                }
                let frame_id = frame_id.to_owned();
                Frame::Remote { frame_id, origin }
            }
        };
        let part = self.part?;
        Some(FullRead {
            scope: self.scope?.to_owned(),
            frame,
            hash: part.hash.to_owned(),
            list: part.list?.to_owned(),
        })
    }
}

/// The scopes whose storage key may have changed since a capture began (see
/// `IdbCapture::moved`).
pub(in crate::checkpoint) struct Moved(pub(super) HashSet<String>);

impl Moved {
    /// Whether the frame that gave `answer` is to be read again: it took its last full read as
    /// standing, and its scope moved (or is unknown).
    pub(in crate::checkpoint) fn to_read_again(&self, answer: &IdbAnswer) -> bool {
        answer.taken_as_unchanged() && answer.scope.is_none_or(|s| self.0.contains(s))
    }
}

/// What a capture's frames said of their IndexedDB, kept for `IdbCapture::settle`.
pub(in crate::checkpoint) struct IdbAnswers {
    /// The frames read in full.
    pub(super) full: Vec<FullRead>,
    /// The scopes of the frames that took their last full read as standing.
    pub(super) standing: Vec<String>,
}

impl IdbAnswers {
    /// Keeps what `answers` (the top frame's first) say.
    pub(in crate::checkpoint) fn of<'a>(answers: impl IntoIterator<Item = IdbAnswer<'a>>) -> Self {
        let mut kept = IdbAnswers {
            full: Vec::new(),
            standing: Vec::new(),
        };
        for answer in answers {
            if answer.taken_as_unchanged()
                && let Some(scope) = answer.scope
            {
                kept.standing.push(scope.to_owned());
            }
            kept.full.extend(answer.full_read());
        }
        kept
    }
}

/// A frame whose IndexedDB a capture read in full.
pub(super) struct FullRead {
    /// What the script said the frame's scope is.
    pub(super) scope: String,
    pub(super) frame: Frame,
    pub(super) hash: String,
    pub(super) list: String,
}

/// Where a frame read in full is, for its storage key.
pub(super) enum Frame {
    /// The top frame: its origin's (first-party) storage key.
    Top { origin: String },
    /// An out-of-process frame of `origin`: its storage key asked of the browser by its frame
    /// id.
    Remote { frame_id: String, origin: String },
}
