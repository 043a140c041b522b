//! [`Dialogs`]: what happens to a JavaScript dialog the task's page opens.

/// What happens to a JavaScript dialog (`alert`, `confirm`, `prompt`, `beforeunload`) that
/// the task's page opens. An open dialog blocks the page's scripts; outlive never takes a page
/// with an open dialog for a hung one, whatever the choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dialogs {
    /// Dismiss it at once, as Playwright does with a dialog no handler takes: `alert` closes,
    /// `confirm` answers false, `prompt` null, `beforeunload` stays on the page.
    Dismiss,
    /// Accept it at once: `confirm` answers true, `prompt` its default, `beforeunload` leaves.
    Accept,
    /// Leave it to the task (or, under [`run_command`](crate::run_command), its client) to
    /// answer; the page waits until then.
    Leave,
}
