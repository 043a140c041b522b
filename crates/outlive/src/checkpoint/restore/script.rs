//! The restore script, and how its data is handed to it.

/// The restore script (see its header for what it takes and answers).
pub(super) const RESTORE_JS: &str = include_str!("../../js/restore.js");

/// The largest piece of restore data one CDP message carries. Chromium's cost per message
/// grows faster than its size. 1.2 MB in one `Runtime.evaluate` took 57 ms over the DevTools
/// pipe (73 ms over the websocket); the same in 8 pieces sent at once, 22 ms (18 ms). A
/// 1.2 MB restore document costs the same again in `Fetch.fulfillRequest`.
pub(super) const PIECE_BYTES: usize = 256 * 1024;

/// What a top-level restore document defines when its data is handed over after it loads:
/// the restore function, waiting for the data (its child documents' reports already heard).
pub(super) const RUN: &str = "globalThis[Symbol.for('outlive.restore.run')]";
