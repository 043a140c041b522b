//! The page loads a restore leaves to the clients carried through a death (`front::loads`),
//! and those outlive does itself once every swap is over and no client took them.

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use tokio_util::task::AbortOnDropHandle;

use crate::checkpoint::{self, Part};
use crate::front::loads::{Deferral, Loads};

/// A restored page waiting for its load: where to, and the page state to put back after.
pub(super) struct LaterLoad {
    pub(super) page: Page,
    pub(super) url: String,
    pub(super) state: Option<Arc<Part>>,
}

/// Leaves `pages`' loads to the swaps under way; the task, owned, loads what none took.
pub(super) fn leave(
    loads: &Arc<Loads>,
    pages: Vec<LaterLoad>,
    navigation: Duration,
) -> AbortOnDropHandle<()> {
    let targets = pages
        .iter()
        .map(|p| p.page.target_id().as_ref().to_owned())
        .collect();
    let deferral = loads.defer(targets);
    AbortOnDropHandle::new(crate::quiet::spawn(load_unclaimed(
        deferral, pages, navigation,
    )))
}

async fn load_unclaimed(deferral: Deferral, pages: Vec<LaterLoad>, navigation: Duration) {
    let loads = deferral.loads();
    loads.swaps_over().await;
    let unclaimed = pages
        .iter()
        .filter(|p| loads.claim(p.page.target_id().as_ref()));
    let loaded = unclaimed.map(|p| async move {
        let state = p.state.as_deref();
        let failed = checkpoint::load_restored(&p.page, &p.url, state, navigation).await;
        tracing::debug!(
            failed,
            "no carried client loaded a restored page: outlive did"
        );
    });
    futures::future::join_all(loaded).await;
    // Dropping the deferral ends each load.
}
