//! Lone surrogates in the browser's JSON, mended before chromiumoxide reads it.
//!
//! A JavaScript string may hold a UTF-16 surrogate without its partner (`'\ud800'`, or a
//! well-formed string cut in the middle of a pair). Chromium writes one into CDP JSON as an
//! escape (`"\ud800"`), which JSON parsers in JavaScript and Python accept. serde_json refuses
//! it, so chromiumoxide drops the whole message. A command whose reply it dropped is then
//! awaited forever (`page.evaluate("'\\ud800'")` never returns). The relay rewrites each such
//! escape to `\ufffd`, U+FFFD, what a browser's own UTF-16 → UTF-8 conversion makes of it
//! (and what `String::from_utf16_lossy` does). The escape and its replacement are both six
//! bytes, so the rewrite is in place and nothing else in the frame moves.

use bytes::Bytes;
use memchr::memmem;

/// `frame` with every escaped lone surrogate replaced by `\ufffd`, or `None` when it has none
/// (then nothing was copied). Escaped pairs, a literal backslash before `u` (`"\\ud800"`) and
/// everything outside escapes are left as they are; text that is not JSON is scanned the same
/// way and never panics.
pub fn mend_lone_surrogates(frame: &[u8]) -> Option<Vec<u8>> {
    let (lone, _) = scan(frame, false);
    (!lone.is_empty()).then(|| mend_at(frame, &lone))
}

/// A frame mended as it streams by, chunk after chunk (see [`mend_lone_surrogates`]). An
/// escape a chunk ends in is held until the next chunk judges it: at most 11 bytes.
#[derive(Default)]
pub(crate) struct Mender {
    held: Vec<u8>,
}

impl Mender {
    /// The next bytes of the frame, mended as far as they can be judged.
    pub(crate) fn push(&mut self, chunk: Bytes) -> Bytes {
        let data = if self.held.is_empty() {
            chunk
        } else {
            let mut joined = std::mem::take(&mut self.held);
            joined.extend_from_slice(&chunk);
            Bytes::from(joined)
        };
        let (lone, judged) = scan(&data, true);
        self.held = data[judged..].to_vec();
        let out = data.slice(..judged);
        if lone.is_empty() {
            out
        } else {
            Bytes::from(mend_at(&out, &lone))
        }
    }

    /// The end of the frame: what was held, mended.
    pub(crate) fn finish(&mut self) -> Bytes {
        let held = std::mem::take(&mut self.held);
        let (lone, _) = scan(&held, false);
        Bytes::from(mend_at(&held, &lone))
    }
}

/// A copy of `frame` with `\ufffd` at each of `lone`.
fn mend_at(frame: &[u8], lone: &[usize]) -> Vec<u8> {
    let mut mended = frame.to_vec();
    for &i in lone {
        mended[i..i + 6].copy_from_slice(br"\ufffd");
    }
    mended
}

/// Where `frame`'s lone surrogate escapes start, and how far it could be judged. With `more`
/// (more bytes follow), it stops at an escape it ends too early to judge; else at its end.
fn scan(frame: &[u8], more: bool) -> (Vec<usize>, usize) {
    // The common case, a frame with no surrogate escape at all, costs one substring scan. An
    // escape it cannot judge starts in its last 11 bytes.
    let candidate = |i: usize| matches!(frame.get(i + 2), Some(b'd' | b'D'));
    let tail = frame.len().saturating_sub(11);
    let open_end = more && memchr::memchr(b'\\', &frame[tail..]).is_some();
    if !open_end && !memmem::find_iter(frame, br"\u").any(candidate) {
        return (Vec::new(), frame.len());
    }
    let mut lone = Vec::new();
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'\\', &frame[at..]) {
        let i = at + found;
        let needs = match (frame.get(i + 1), unit(frame, i)) {
            (None, _) => 2,
            (Some(b'u'), None) => 6,
            (Some(b'u'), Some(0xD800..=0xDBFF)) => 12,
            _ => 0,
        };
        if more && i + needs > frame.len() {
            return (lone, i);
        }
        match frame.get(i + 1) {
            Some(b'u') => {}
            // `\\`, `\"`, `\n`…: two bytes, whatever the second is.
            Some(_) => {
                at = i + 2;
                continue;
            }
            None => break,
        }
        at = i + 6;
        match unit(frame, i) {
            Some(0xD800..=0xDBFF) if matches!(unit(frame, i + 6), Some(0xDC00..=0xDFFF)) => {
                at = i + 12; // a pair
            }
            Some(0xD800..=0xDFFF) => lone.push(i),
            Some(_) => {}
            None => at = i + 2, // not four hex digits: not a unicode escape
        }
    }
    (lone, frame.len())
}

/// The UTF-16 code unit escaped as `\uXXXX` at `at`, if one is there.
fn unit(frame: &[u8], at: usize) -> Option<u16> {
    let escape = frame.get(at..at + 6)?;
    if escape[..2] != *br"\u" {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Mender, mend_lone_surrogates};

    fn mended(json: &str) -> Option<String> {
        mend_lone_surrogates(json.as_bytes()).map(|m| String::from_utf8(m).unwrap())
    }

    #[test]
    fn each_lone_surrogate_escape_becomes_the_replacement_character() {
        assert_eq!(mended(r#""a\ud800b""#).as_deref(), Some(r#""a\ufffdb""#));
        assert_eq!(mended(r#""\uDC00""#).as_deref(), Some(r#""\ufffd""#));
        // A high one at the end, a low one first, two highs in a row, a high before `\\u…`.
        assert_eq!(mended(r#""x\udbff""#).as_deref(), Some(r#""x\ufffd""#));
        assert_eq!(
            mended(r#""\udc00\ud800""#).as_deref(),
            Some(r#""\ufffd\ufffd""#)
        );
        assert_eq!(
            mended(r#""\ud800\ud83d\ude00""#).as_deref(),
            Some(r#""\ufffd\ud83d\ude00""#)
        );
        assert_eq!(
            mended(r#""\ud800\\udc00""#).as_deref(),
            Some(r#""\ufffd\\udc00""#)
        );
    }

    #[test]
    fn pairs_literal_backslashes_and_other_escapes_are_left_alone() {
        for json in [
            r#""\ud83d\ude00""#,
            r#""\uD83D\uDE00 and \u00e9""#,
            r#""\\ud800""#,
            r#""\\\\ud800\n\"""#,
            r#"{"id":1,"result":{"value":"plain"}}"#,
            r#""\ud8""#,
            r#""\udzzz""#,
            "\\",
            "\\u",
        ] {
            assert_eq!(mended(json), None, "{json}");
        }
    }

    /// A string of UTF-16 code units as Chromium writes it into JSON: quotes and backslashes
    /// escaped, the other units printable ASCII or `\uXXXX` (hex case from `upper`).
    fn json_string(units: &[u16], upper: &[bool]) -> String {
        let mut out = String::from('"');
        for (i, &u) in units.iter().enumerate() {
            match u {
                0x22 => out.push_str(r#"\""#),
                0x5C => out.push_str(r"\\"),
                0x20..=0x7E => out.push(char::from(u as u8)),
                _ if upper.get(i).copied().unwrap_or(false) => out.push_str(&format!(r"\u{u:04X}")),
                _ => out.push_str(&format!(r"\u{u:04x}")),
            }
        }
        out.push('"');
        out
    }

    /// Code units weighted towards what matters: surrogates, backslashes, `u`, quotes.
    fn unit() -> impl Strategy<Value = u16> {
        prop_oneof![
            0xD800u16..=0xDBFF,
            0xDC00u16..=0xDFFF,
            Just(0x5C),
            Just(u16::from(b'u')),
            Just(u16::from(b'd')),
            Just(0x22),
            0x20u16..=0x7E,
            any::<u16>(),
        ]
    }

    proptest! {
        /// Whatever the units, the mended text is what serde reads as the lossy decoding of
        /// the units (each lone surrogate one U+FFFD), and a text serde already reads is not
        /// touched.
        #[test]
        fn the_mended_text_reads_as_the_lossy_decoding(
            units in proptest::collection::vec(unit(), 0..40),
            upper in proptest::collection::vec(any::<bool>(), 0..40),
        ) {
            let json = json_string(&units, &upper);
            let expected = String::from_utf16_lossy(&units);
            match mend_lone_surrogates(json.as_bytes()) {
                None => {
                    let read: String = serde_json::from_str(&json).unwrap();
                    prop_assert_eq!(read, expected);
                }
                Some(m) => {
                    prop_assert_eq!(m.len(), json.len());
                    prop_assert!(serde_json::from_str::<String>(&json).is_err());
                    let read: String = serde_json::from_slice(&m).unwrap();
                    prop_assert_eq!(read, expected);
                }
            }
        }

        /// Mended in chunks, cut anywhere, a frame comes out as mended whole.
        #[test]
        fn a_frame_mended_in_chunks_is_the_frame_mended_whole(
            units in proptest::collection::vec(unit(), 0..40),
            cuts in proptest::collection::vec(0usize..300, 0..6),
        ) {
            let json = json_string(&units, &[]);
            let whole = mend_lone_surrogates(json.as_bytes()).unwrap_or_else(|| json.clone().into_bytes());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(json.len())).collect();
            cuts.sort_unstable();
            let mut mender = Mender::default();
            let mut out = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([json.len()]) {
                let chunk = bytes::Bytes::copy_from_slice(&json.as_bytes()[from..cut]);
                out.extend_from_slice(&mender.push(chunk));
                from = cut;
            }
            out.extend_from_slice(&mender.finish());
            prop_assert_eq!(out, whole);
        }
    }
}
