//! Durable runs: the newest checkpoint kept outside this process, sealed. Another process can
//! then take the run over after this one is gone (a deploy, an OOM kill, a lost machine). It
//! opens the checkpoint, restores it into a new browser and re-enters the task with `attempt`
//! continuing and `resumed_from` set.
//!
//! Outlive seals and opens. Where the sealed bytes live is the [`CheckpointStore`]'s business:
//! a database row keyed by the run id, a file, an object store.

use std::fmt;
use std::sync::Arc;

use crate::error::Error;
use crate::provider::BoxFuture;
use crate::seal::Sealer;

/// Where a durable run keeps its newest checkpoint, sealed.
///
/// `save` is awaited before the checkpoint counts: [`Ctx::checkpoint`](crate::Ctx::checkpoint)
/// answers `true` only once the store has it. Saves of one run never overlap, and come in the
/// order the checkpoints were taken.
pub trait CheckpointStore: Send + Sync {
    /// Keeps `sealed` as run `run_id`'s newest checkpoint, taken during entry `attempt`,
    /// replacing the one before. `sealed` is ciphertext: it may be written anywhere.
    ///
    /// # Errors
    ///
    /// Any: the checkpoint is then not durable (it still serves a relaunch in this process),
    /// and the task's `checkpoint()` answers `false`. The message must not carry a secret.
    fn save<'a>(
        &'a self,
        run_id: &'a str,
        attempt: u32,
        sealed: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), Error>>;
}

/// Makes a run durable: `Options::durable(Durable::new(run_id, sealer, store))`. Every
/// checkpoint is sealed for `run_id` and saved in `store`; a run started with
/// [`Durable::resume`] begins where the sealed checkpoint left off.
#[derive(Clone)]
pub struct Durable {
    pub(crate) run_id: String,
    pub(crate) sealer: Sealer,
    pub(crate) store: Arc<dyn CheckpointStore>,
    pub(crate) resume: Option<Resume>,
}

/// Where a taken-over run starts.
#[derive(Clone)]
pub(crate) struct Resume {
    pub(crate) sealed: Arc<Vec<u8>>,
    pub(crate) attempts: u32,
}

impl Durable {
    /// A durable run with the id `run_id` (also the wide event's `runId`, and the associated
    /// data every checkpoint is sealed with: a row copied to another run does not open).
    pub fn new(
        run_id: impl Into<String>,
        sealer: Sealer,
        store: Arc<dyn CheckpointStore>,
    ) -> Durable {
        Durable {
            run_id: run_id.into(),
            sealer,
            store,
            resume: None,
        }
    }

    /// Takes the run over from another process: `sealed` is the newest checkpoint its store
    /// kept, `attempts` the entries made before (the first entry here is `attempts + 1`, with
    /// `resumed_from` set and the saved progress readable). A checkpoint that does not open
    /// (wrong key, altered, another run's) ends the run with [`ErrorKind::Sealed`]
    /// before any browser is launched.
    ///
    /// [`ErrorKind::Sealed`]: crate::ErrorKind::Sealed
    #[must_use]
    pub fn resume(mut self, sealed: Vec<u8>, attempts: u32) -> Durable {
        self.resume = Some(Resume {
            sealed: Arc::new(sealed),
            attempts,
        });
        self
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
}

impl fmt::Debug for Durable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durable")
            .field("run_id", &self.run_id)
            .field("sealer", &self.sealer)
            .field(
                "resume",
                &self.resume.as_ref().map(|r| (r.sealed.len(), r.attempts)),
            )
            .finish_non_exhaustive()
    }
}
