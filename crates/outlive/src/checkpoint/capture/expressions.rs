//! The capture script as page code: the expressions that install it in a document, and that
//! call it with its arguments (the hashes outlive holds, what IndexedDB may be taken as).

use super::options::CaptureOptions;
use crate::checkpoint::script::CODEC_JS;

/// The capture script (see its header for what it answers).
const CAPTURE_JS: &str = include_str!("../../js/capture.js");

/// The content hash's WebAssembly module (`js/hash.wat`, assembled), base64.
const HASH_WASM_B64: &str = include_str!("../../js/hash.wasm.b64");

/// Where a document keeps its installed capture script.
pub(super) const INSTALLED: &str = "globalThis[Symbol.for('outlive.capture')]";

/// The expression that installs the capture script in a document (if it is not there yet)
/// and answers it.
pub(super) fn installer() -> String {
    // Installed once per document and reused: a function V8 has seen before runs its loops
    // optimised, and its WebAssembly hash is compiled once.
    format!(
        "({INSTALLED} ??= (() => {{\n{CODEC_JS}\nconst OUTLIVE_HASH_WASM = '{}';\nreturn ({CAPTURE_JS});\n}})())",
        HASH_WASM_B64.trim()
    )
}

/// The arguments of a capture call: the `known` hashes and, as `idb_same`, what the script
/// may take as unchanged.
pub(super) fn capture_arguments(
    known: &[String],
    options: CaptureOptions,
    idb_same: &[serde_json::Value],
) -> String {
    let known = serde_json::to_string(known).expect("strings serialise");
    let opts = serde_json::json!({
        "idb": options.indexed_db,
        "idbMax": options.indexed_db_max_bytes,
        "idbSame": idb_same,
        "files": options.files,
        "filesMax": options.files_max_bytes,
        // Half a frame's time: a slow Cache Storage or OPFS read gives up (that part is not
        // captured) before the frame's Web Storage and IndexedDB would be lost with it.
        "filesMs": (options.frame_timeout / 2).as_millis() as u64,
        "entriesMax": crate::checkpoint::files::CACHE_ENTRIES_MAX,
    });
    format!("({known}, {opts})")
}

/// The expression that runs the capture script, installing it in the document first if need
/// be.
pub(super) fn capture_expression(arguments: &str) -> String {
    format!("{}{arguments}", installer())
}

/// What the call answers where the script is not installed (a number: a read is an object).
pub(super) const NOT_INSTALLED: i64 = 0;

/// The expression that runs the capture script where it is installed already, and answers
/// [`NOT_INSTALLED`] where it is not.
pub(super) fn installed_capture_expression(arguments: &str) -> String {
    format!("({INSTALLED}?.{arguments} ?? {NOT_INSTALLED})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::PartCache;
    use crate::checkpoint::capture::capture;
    use crate::checkpoint::idb::Tracking;
    use crate::checkpoint::test_support::{chromium_page, first, read_value, site};
    use crate::relay::Calls;
    use std::time::Duration;

    #[test]
    fn the_hash_module_is_its_text_assembled() {
        use base64::Engine as _;
        let assembled = wat::parse_str(include_str!("../../js/hash.wat")).expect("hash.wat parses");
        let embedded = base64::engine::general_purpose::STANDARD
            .decode(HASH_WASM_B64.trim())
            .expect("hash.wasm.b64 is base64");
        assert!(
            embedded == assembled,
            "js/hash.wasm.b64 is out of date with js/hash.wat; write this into it:\n{}",
            base64::engine::general_purpose::STANDARD.encode(&assembled)
        );
    }
    /// `hash.wat` over `strings` as the capture script streams them: each string's length in
    /// UTF-16 units (u32, little-endian) and its UTF-8 bytes, zero-padded to whole words.
    fn wasm_hash(strings: &[String]) -> String {
        let mut bytes = Vec::new();
        for s in strings {
            let units = u32::try_from(s.encode_utf16().count()).unwrap();
            bytes.extend_from_slice(&units.to_le_bytes());
            bytes.extend_from_slice(s.as_bytes());
        }
        let total = bytes.len();
        bytes.resize(total.next_multiple_of(8), 0);
        let (mut a, mut b) = (0x9E37_79B9_7F4A_7C15_u64, 0xC2B2_AE3D_27D4_EB4F_u64);
        for word in bytes.chunks_exact(8) {
            let w = u64::from_le_bytes(word.try_into().unwrap());
            a = (a ^ w.wrapping_mul(0x87C3_7B91_1142_53D5))
                .rotate_left(31)
                .wrapping_mul(0x4CF5_AD43_2745_937F);
            b = b
                .wrapping_add(w.wrapping_mul(0x1656_67B1_9E37_79F9))
                .rotate_left(29)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        format!("w{a:x}.{b:x}.{total:x}")
    }

    /// The page's WebAssembly hash of localStorage is the stream `wasm_hash` describes, for
    /// items that cross the module's 256 KiB window many times, at odd offsets, with
    /// characters of every UTF-8 length split across its edges — no byte is lost or counted
    /// twice at a window's edge.
    #[tokio::test]
    async fn the_webassembly_hash_streams_every_byte_through_its_window() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let (url, _server) = site().await;
        page.goto(format!("{url}/page")).await.unwrap();
        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), Tracking::default());
        let options = CaptureOptions {
            indexed_db: false,
            indexed_db_max_bytes: 0,
            files: false,
            files_max_bytes: 0,
            frame_timeout: Duration::from_secs(5),
            in_full: false,
            page_state: false,
        };
        for (i, (unit, count)) in [("a", 300_001), ("é", 150_001), ("€😀", 70_003), ("x", 7)]
            .into_iter()
            .enumerate()
        {
            let set = format!("(localStorage.setItem('k{i}', '{unit}'.repeat({count})), 1)");
            let _: i64 = read_value(&page, set).await;
            let items: Vec<(String, String)> = read_value(
                &page,
                "Array.from({ length: localStorage.length }, (_, i) =>
                   [localStorage.key(i), localStorage.getItem(localStorage.key(i))])"
                    .into(),
            )
            .await;
            let strings: Vec<String> = items.into_iter().flat_map(|(k, v)| [k, v]).collect();
            let cp = capture(&page, &calls, &cache, &watch, options)
                .await
                .unwrap();
            let hash = &first(&cp).local.as_ref().unwrap().hash;
            assert_eq!(hash, &format!("l{}", wasm_hash(&strings)), "after k{i}");
        }
    }
}
