//! The storage key of a frame read in full: the key Chromium tracks its IndexedDB by.

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::storage::GetStorageKeyParams;

use super::answer::Frame;
use crate::checkpoint::model::is_storable_origin;

/// The storage key of `frame` (`None` where it has none worth tracking, or the browser does
/// not say). A first-party storage key is the origin with a slash (`Storage.getStorageKey`);
/// a cross-site frame's is partitioned by its top-level site, which takes the public suffix
/// list to work out: the browser is asked — about the frame's document *now*, so an answer for
/// another origin (the frame navigated since it was read) is refused, and so is a key made
/// with a nonce (another in each document: nothing to keep).
pub(super) async fn storage_key(page: &Page, frame: &Frame) -> Option<String> {
    let (frame_id, origin) = match frame {
        Frame::Top { origin } => return is_storable_origin(origin).then(|| format!("{origin}/")),
        Frame::Remote { frame_id, origin } => (frame_id, origin),
    };
    let ask = GetStorageKeyParams::builder()
        .frame_id(frame_id.clone())
        .build();
    let key: String = match page.execute(ask).await {
        Ok(answer) => answer.result.storage_key.into(),
        Err(e) => {
            tracing::debug!(error = %e, "a frame's storage key is unknown; its IndexedDB is read in full at each capture");
            return None;
        }
    };
    trackable_key(&key, origin).then_some(key)
}

/// Whether `key` (a serialised storage key) is `origin`'s, first-party, partitioned by another
/// top-level site (`^0`) or same-site with a cross-site ancestor (`^31`), and made with no
/// nonce (`^1`, `^2`; `^4`–`^6` for an opaque top-level site).
fn trackable_key(key: &str, origin: &str) -> bool {
    let Some(rest) = key
        .strip_prefix(origin)
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return false;
    };
    // Chromium's forms: `origin/`, `origin/^31` (same site as the top, a cross-site
    // ancestor), `origin/^0<top-level site>`; a site holds no `^`.
    rest.is_empty()
        || rest == "^31"
        || rest
            .strip_prefix("^0")
            .is_some_and(|site| !site.is_empty() && !site.contains('^'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_origins_own_keys_without_a_nonce_are_tracked() {
        let (o, w) = ("http://localhost:9", "https://w.example");
        let cases = [
            ("http://localhost:9/", o, true, "first-party"),
            (
                "http://localhost:9/^0http://127.0.0.1",
                o,
                true,
                "under another top site",
            ),
            (
                "https://w.example/^31",
                w,
                true,
                "with a cross-site ancestor",
            ),
            ("https://w.example/^30", w, false, "not a form it tracks"),
            (
                "https://w.example/^0https://shop.example^31",
                w,
                false,
                "a site with a ^",
            ),
            ("http://localhost:90/", o, false, "another origin (port)"),
            (
                "http://localhost:9/^0http://127.0.0.1",
                "http://127.0.0.1",
                false,
                "another origin.s",
            ),
            ("http://localhost:9/^112345^267890", o, false, "a nonce"),
            (
                "http://localhost:9/^0http://127.0.0.1^4123^5456",
                o,
                false,
                "an opaque top",
            ),
            ("http://localhost:9/x", o, false, "a path"),
            ("", o, false, "empty"),
        ];
        for (key, origin, tracked, what) in cases {
            assert_eq!(trackable_key(key, origin), tracked, "{what}: {key}");
        }
    }
}
