//! Cache Storage and the origin private file system: what a checkpoint holds of them, and the
//! cap on both across a checkpoint's origins. Read and written by the page scripts
//! (`js/capture.js`, `js/restore.js`); each frame's own cap is applied there.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::value::RawValue;

use super::model::{FrameState, Part, StorageKey};

/// The cap of Cache Storage and files together across one tab's origins, as a multiple of
/// one origin's cap of each.
pub(super) const TOTAL_TIMES_ORIGIN: usize = 4;

/// The most Cache Storage entries one origin's frame reads in a capture (across its caches);
/// the rest are counted as left out. Bounds the reads a capture makes, as bytes do not.
pub(crate) const CACHE_ENTRIES_MAX: usize = 1000;

/// Keeps the Cache Storage and files of `storage` (one tab's) within [`TOTAL_TIMES_ORIGIN`]
/// times `origin_max`: `top`'s origin first (its iframes do not starve it), then the others
/// in key order. A part that would take the total over is replaced by an empty one that
/// counts its entries as left out (restored as nothing: the browser's is left as it is).
pub(super) fn keep_within_total(
    storage: &mut BTreeMap<StorageKey, FrameState>,
    top: &str,
    origin_max: usize,
) {
    let cap = origin_max.saturating_mul(TOTAL_TIMES_ORIGIN);
    let mut total = 0usize;
    let (mut first, rest): (Vec<_>, Vec<_>) =
        storage.iter_mut().partition(|(key, _)| key.origin == top);
    first.extend(rest);
    for (_, state) in first {
        for slot in [&mut state.caches, &mut state.files] {
            let Some(part) = slot.as_ref() else { continue };
            if total + part.json.len() <= cap {
                total += part.json.len();
                continue;
            }
            let kind = part.hash.get(..1).unwrap_or("x");
            *slot = Some(Arc::new(Part {
                hash: format!("{kind}0"),
                json: "[]".to_owned(),
                left_out: part.left_out + entries(&part.json),
            }));
        }
    }
}

/// How many entries a part holds: the entries of each cache (`[[name, [entry, …]], …]`), or
/// the files (`[[path, body or null], …]`, a directory's body null).
fn entries(json: &str) -> u64 {
    let items: Vec<(&RawValue, &RawValue)> = serde_json::from_str(json).unwrap_or_default();
    items
        .iter()
        .map(
            |(_, v)| match serde_json::from_str::<Vec<&RawValue>>(v.get()) {
                Ok(list) => list.len() as u64,
                Err(_) => u64::from(v.get() != "null"),
            },
        )
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_support::{key, part};

    fn state(caches: &str, files: &str) -> FrameState {
        FrameState {
            caches: part(caches),
            files: part(files),
            ..FrameState::default()
        }
    }

    #[test]
    fn parts_over_the_total_are_left_out_and_counted() {
        let caches =
            r#"[["v1",[["https://a/x",200,"OK",[],"eHg="],["https://a/y",200,"OK",[],""]]]]"#;
        let files = r#"[["d/",null],["d/f.txt","aGk="],["g.bin",""]]"#;
        let mut storage = BTreeMap::new();
        storage.insert(key("https://a", "https://a"), state(caches, files));
        storage.insert(key("https://a", "https://b"), state(caches, files));
        // Room for the first key's two parts and nothing more.
        let origin_max = (caches.len() + files.len()).div_ceil(TOTAL_TIMES_ORIGIN);
        keep_within_total(&mut storage, "https://a", origin_max);
        let [a, b] = [
            &storage[&key("https://a", "https://a")],
            &storage[&key("https://a", "https://b")],
        ];
        assert_eq!(a.caches.as_ref().unwrap().json, caches);
        assert_eq!(a.files.as_ref().unwrap().json, files);
        let (c, f) = (b.caches.as_ref().unwrap(), b.files.as_ref().unwrap());
        assert_eq!(
            (c.json.as_str(), c.left_out),
            ("[]", 2),
            "two cache entries"
        );
        assert_eq!(
            (f.json.as_str(), f.left_out),
            ("[]", 2),
            "two files, not the directory"
        );
    }

    #[test]
    fn the_top_origin_is_kept_before_its_iframes() {
        let files = r#"[["f.txt","aGk="]]"#;
        let mut storage = BTreeMap::new();
        // The iframe's key sorts first; the top's must still win the room.
        storage.insert(key("https://t", "https://a"), state("[]", files));
        storage.insert(key("https://t", "https://t"), state("[]", files));
        let origin_max = (files.len() + 4).div_ceil(TOTAL_TIMES_ORIGIN);
        keep_within_total(&mut storage, "https://t", origin_max);
        let json = |o: &str| {
            storage[&key("https://t", o)]
                .files
                .as_ref()
                .unwrap()
                .json
                .clone()
        };
        assert_eq!(json("https://t"), files);
        assert_eq!(json("https://a"), "[]");
    }
}
