//! Checkpoints: cookies (CHIPS partition keys included), the URL, and per storage key (a
//! frame's origin under its top-level origin) localStorage, sessionStorage, IndexedDB, Cache
//! Storage and private files. Captured from a live page and all its frames by page script
//! (`js/`), restored into a fresh one through intercepted documents: `docs/survives.md`. A
//! checkpoint is a credential: its `Debug` shows sizes, its strings are zeroed on drop.
//!
//! The parts:
//! * `model`: the data model; `persist`: a checkpoint as bytes;
//! * `capture` (`frames`, `expressions`, `warm`); `cache`: parts held by hash;
//! * `idb`: IndexedDB change tracking; `files`: Cache Storage and OPFS caps;
//! * `page_state`: typed fields, scroll; `back_forward`: each tab's back/forward list;
//! * `restore` (`plan`, `serve`, `write`);
//! * `script`: running the page scripts, and their value codec.

mod back_forward;
mod cache;
mod capture;
mod contexts;
mod files;
mod idb;
mod model;
mod page_state;
#[cfg(feature = "durable")]
mod persist;
mod reopen;
mod restore;
mod script;
mod tabs;
#[cfg(test)]
mod test_support;

pub(crate) use back_forward::{rebuild as rebuild_back_forward, stands_on};
pub(crate) use cache::PartCache;
pub(crate) use capture::{CaptureOptions, WarmUp, capture, install_on_new_document};
pub(crate) use contexts::remake as remake_contexts;
pub(crate) use idb::Tracking;
pub(crate) use model::{Checkpoint, Part, Progress, is_storable_origin};
pub(crate) use page_state::{
    apply as apply_page_state, apply_expression as page_state_expression,
    on_new_document as page_state_script,
};
pub(crate) use reopen::{load as load_restored, reopen as reopen_tabs};
pub(crate) use restore::restore;
pub(crate) use tabs::{Browsing, Tabs, capture_tabs};
