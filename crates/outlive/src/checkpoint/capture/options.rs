//! What a capture reads, as the run set it.

use std::time::Duration;

use crate::options::Options;

/// What a capture reads besides cookies and Web Storage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CaptureOptions {
    /// Read IndexedDB.
    pub(crate) indexed_db: bool,
    /// The most IndexedDB (serialised) one frame may hold and still be captured.
    pub(crate) indexed_db_max_bytes: usize,
    /// Read Cache Storage and the origin private file system.
    pub(crate) files: bool,
    /// The most of each (serialised) one frame may hold; the excess is left out, counted.
    pub(crate) files_max_bytes: usize,
    /// How long a read in an out-of-process frame may take. A frame that has not answered by
    /// then is counted unread (`frames_unread`) and the checkpoint goes on without it. So it
    /// must be well inside the capture's own cap, or one hung iframe costs every checkpoint.
    pub(crate) frame_timeout: Duration,
    /// Read every frame's IndexedDB in full, taking no last read as standing (see `Tracking`):
    /// for a checkpoint no later one could make up for, as at a rotation's safe point.
    pub(crate) in_full: bool,
    /// Read the page's typed fields and scroll positions (`page_state`).
    pub(crate) page_state: bool,
}

impl CaptureOptions {
    /// What the run's options ask a capture to read.
    pub(crate) fn of(options: &Options) -> CaptureOptions {
        CaptureOptions {
            indexed_db: options.indexed_db,
            indexed_db_max_bytes: options.indexed_db_max_bytes,
            files: options.cache_storage_and_opfs,
            files_max_bytes: options.cache_storage_and_opfs_max_bytes,
            // Half the capture's cap: a hung iframe is counted unread, the rest is captured.
            frame_timeout: options.capture_timeout / 2,
            in_full: false,
            page_state: options.page_state,
        }
    }
}
