//! [`Lease`]: a probed session, released on every path.

use outlive::Diagnostics;
use outlive::redact::redact;
use outlive::solari_browser::{Client, SolariError};

/// A created session, released on every path: by [`Lease::release`], or — if the probe is
/// dropped or panics first — by a task its `Drop` spawns.
pub(super) struct Lease {
    client: Client,
    id: String,
    released: bool,
}

impl Lease {
    pub(super) fn new(client: Client, id: String) -> Self {
        Lease {
            client,
            id,
            released: false,
        }
    }

    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Releases the session and waits for the answer. One attempt: a failed release is not
    /// retried by `Drop`.
    pub(super) async fn release(mut self) -> Result<(), SolariError> {
        let result = self.client.sessions().release(&self.id).await;
        self.released = true;
        result
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (client, id) = (self.client.clone(), std::mem::take(&mut self.id));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = client.sessions().release(&id).await {
                        tracing::warn!(error = %redact(&e.to_string(), Diagnostics::Safe), "release on drop failed");
                    }
                });
            }
            Err(_) => tracing::warn!(
                "a probed session was dropped outside a Tokio runtime and not released"
            ),
        }
    }
}
