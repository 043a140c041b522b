//! Page loads left to carried clients (issue 51). A restore under `serve` while clients are
//! held through a death leaves their pages on the restore document: each client's swap then
//! loads them once, under the state it replays, instead of twice. What no client loads
//! (its swap failed, or no client kept that page) outlive loads once every swap is over.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::watch;

/// The swaps under way and the loads deferred to them, shared by the front and the restore.
#[derive(Debug)]
pub(crate) struct Loads {
    state: watch::Sender<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    /// Client connections between a death and their swap's end.
    swaps: usize,
    /// Page targets whose load no one has taken yet.
    unclaimed: HashSet<String>,
    /// Page targets loading now, by a client's swap or by outlive.
    loading: HashSet<String>,
}

impl Default for Loads {
    fn default() -> Loads {
        Loads {
            state: watch::Sender::new(Waiting::default()),
        }
    }
}

impl Loads {
    /// A client connection is held through a death: its swap lasts while the guard lives.
    pub(crate) fn swap(self: &Arc<Self>) -> SwapGuard {
        self.state.send_modify(|w| w.swaps += 1);
        SwapGuard {
            loads: self.clone(),
            claimed: Vec::new(),
        }
    }

    /// Whether a client is held through a death now: a restore may leave it the loads.
    pub(crate) fn swapping(&self) -> bool {
        self.state.borrow().swaps > 0
    }

    /// These page targets wait for a load, until the deferral is dropped.
    pub(crate) fn defer(self: &Arc<Self>, targets: Vec<String>) -> Deferral {
        self.state
            .send_modify(|w| w.unclaimed.extend(targets.iter().cloned()));
        Deferral {
            loads: self.clone(),
            targets,
        }
    }

    /// Takes `target`'s load if it is still waiting for one: it is loading now.
    pub(crate) fn claim(&self, target: &str) -> bool {
        self.state.send_if_modified(|w| {
            let claimed = w.unclaimed.remove(target);
            if claimed {
                w.loading.insert(target.to_owned());
            }
            claimed
        })
    }

    /// `target`'s load is over.
    pub(crate) fn done(&self, target: &str) {
        self.state.send_if_modified(|w| w.loading.remove(target));
    }

    /// Resolves once no client is held through a death.
    pub(crate) async fn swaps_over(&self) {
        let mut rx = self.state.subscribe();
        let _ = rx.wait_for(|w| w.swaps == 0).await;
    }

    /// Resolves once no deferred load waits or runs: the pages stand where they will.
    pub(crate) async fn settled(&self) {
        let mut rx = self.state.subscribe();
        let _ = rx
            .wait_for(|w| w.unclaimed.is_empty() && w.loading.is_empty())
            .await;
    }
}

/// Loads left to the swaps (see [`Loads::defer`]): dropped, none of them waits any more (its
/// owner loaded them, or its browser is gone).
#[derive(Debug)]
pub(crate) struct Deferral {
    loads: Arc<Loads>,
    targets: Vec<String>,
}

impl Deferral {
    /// What the loads are kept in.
    pub(crate) fn loads(&self) -> &Loads {
        &self.loads
    }
}

impl Drop for Deferral {
    fn drop(&mut self) {
        self.loads.state.send_modify(|w| {
            for t in &self.targets {
                w.unclaimed.remove(t);
                w.loading.remove(t);
            }
        });
    }
}

/// One client's swap (see [`Loads::swap`]): the loads it took are over when it ends.
#[derive(Debug)]
pub(crate) struct SwapGuard {
    loads: Arc<Loads>,
    claimed: Vec<String>,
}

impl SwapGuard {
    /// The client's swap loads `target`: taken from outlive if it was waiting.
    pub(crate) fn loading(&mut self, target: &str) {
        if self.loads.claim(target) {
            self.claimed.push(target.to_owned());
        }
    }

    /// The client's swap loaded `target`.
    pub(crate) fn loaded(&mut self, target: &str) {
        if let Some(i) = self.claimed.iter().position(|t| t == target) {
            self.claimed.swap_remove(i);
            self.loads.done(target);
        }
    }
}

impl Drop for SwapGuard {
    fn drop(&mut self) {
        let claimed = std::mem::take(&mut self.claimed);
        self.loads.state.send_modify(|w| {
            w.swaps -= 1;
            for t in &claimed {
                w.loading.remove(t);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loads_a_swap_takes_are_its_own_and_the_rest_wait_for_the_swaps_to_end() {
        let loads = Arc::new(Loads::default());
        assert!(!loads.swapping());
        let mut swap = loads.swap();
        assert!(loads.swapping());
        let deferral = loads.defer(vec!["a".to_owned(), "b".to_owned()]);
        swap.loading("a");
        assert!(!loads.claim("a"), "a is the swap's");
        swap.loaded("a");
        let over = loads.swaps_over();
        tokio::pin!(over);
        assert!(futures::poll!(&mut over).is_pending());
        drop(swap);
        over.await;
        // What no swap loaded is outlive's to load.
        assert!(loads.claim("b"));
        let settled = loads.settled();
        tokio::pin!(settled);
        assert!(futures::poll!(&mut settled).is_pending());
        loads.done("b");
        settled.await;
        drop(deferral);
    }

    #[tokio::test]
    async fn loads_of_a_browser_gone_wait_no_more() {
        let loads = Arc::new(Loads::default());
        let deferral = loads.defer(vec!["a".to_owned()]);
        let settled = loads.settled();
        tokio::pin!(settled);
        assert!(futures::poll!(&mut settled).is_pending());
        drop(deferral);
        settled.await;
    }

    #[tokio::test]
    async fn a_swap_that_ends_before_its_loads_do_leaves_nothing_waiting() {
        let loads = Arc::new(Loads::default());
        let mut swap = loads.swap();
        let _deferral = loads.defer(vec!["a".to_owned()]);
        swap.loading("a");
        swap.loading("not deferred");
        drop(swap);
        loads.settled().await;
        assert!(!loads.swapping());
    }
}
