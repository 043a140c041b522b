//! What the run loop drives: a [`Backend`] that launches browsers, each a [`LiveBrowser`].
//! The real one is [`crate::browser::CdpBackend`]; the loop's tests script a fake.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::checkpoint::Checkpoint;
use crate::ctx::Capturer;
use crate::endpoint::CdpEndpoint;
use crate::error::Error;
use crate::options::Options;
use crate::relay::{Calls, Death, Stalls};

/// Where browsers come from, for the run loop.
pub(crate) trait Backend: Sync {
    type Page: Clone;
    type Browser: LiveBrowser<Page = Self::Page>;

    /// Launches and connects a browser whose page is ready for the task.
    fn launch(
        &self,
        options: &Options,
    ) -> impl Future<Output = Result<Self::Browser, Error>> + Send;

    /// The stalls its browsers' connections survived, if it keeps them.
    fn stalls(&self) -> Option<Arc<Stalls>> {
        None
    }

    /// What the front saw of the foreign client using its browsers, if one does.
    fn clients(&self) -> Option<Arc<crate::front::Usage>> {
        None
    }

    /// Whether a foreign client's use of a browser counts as progress (`serve`).
    fn client_use_is_progress(&self) -> bool {
        false
    }
}

/// One connected browser, for the run loop.
pub(crate) trait LiveBrowser: Send {
    type Page: Clone;

    fn page(&self) -> Self::Page;
    fn capturer(&self) -> Capturer;
    /// The browser's own CDP endpoint, for a second client (a command the task runs).
    fn endpoint(&self) -> Option<CdpEndpoint> {
        None
    }
    /// The relay's calls, for the front to tell it of a program's commands.
    fn calls(&self) -> Option<Calls> {
        None
    }
    /// The session's lifetime, when its provider states one ([`crate::Session::lifetime`]).
    fn stated_lifetime(&self) -> Option<Duration> {
        None
    }
    /// Resolves with the first failure detected: the browser's death or the current page's.
    /// Cancel-safe.
    fn died(&self) -> impl Future<Output = Death> + Send;
    /// Resolves once the newest checkpoint may lack a change the browser reported after it
    /// was taken (a database commit Chromium reported late): a new one is due at once.
    /// Cancel-safe.
    fn checkpoint_stale(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
    /// The failure, if one has been detected: the browser's death first, else the current
    /// page's.
    fn death(&self) -> Option<Death>;
    /// The browser's own death, if one has been detected (page failures aside).
    fn browser_death(&self) -> Option<Death>;
    /// Asks the browser and the page whether they are alive; records a failure if not.
    fn confirm_alive(&self, timeout: Duration) -> impl Future<Output = bool> + Send;
    /// Cuts the connection so every page call fails at once.
    fn cut(&mut self);
    /// Disposes of the failed page and opens a fresh one in the same browser; fails if the
    /// browser is dead too or no page opens.
    fn replace_page(&mut self) -> impl Future<Output = Result<(), Error>> + Send;
    /// Puts `checkpoint` into the page; answers how many writes failed in the page. With
    /// `prior` (restored into this browser before, nothing else done in it since), writes only
    /// what changed.
    fn restore(
        &self,
        checkpoint: &Checkpoint,
        prior: Option<&Checkpoint>,
    ) -> impl Future<Output = Result<u64, Error>> + Send;
    /// After a restore under `serve` with clients held through the death: leaves the page's
    /// load (and its page state) to them, as each loads its pages when carried. Whether it
    /// did; if not, the caller navigates.
    fn leave_load_to_clients(&self, _checkpoint: &Checkpoint) -> bool {
        false
    }
    fn navigate(&self, url: &str) -> impl Future<Output = Result<(), Error>> + Send;
    /// After the resume navigation: puts the page state `checkpoint` holds (typed fields,
    /// scroll positions) back into the page; answers what found no place in it.
    fn restore_page(&self, _checkpoint: &Checkpoint) -> impl Future<Output = u64> + Send {
        async { 0 }
    }
    fn release(self) -> impl Future<Output = Result<(), Error>> + Send;
}
