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

use memchr::memmem;

/// `frame` with every escaped lone surrogate replaced by `\ufffd`, or `None` when it has none
/// (then nothing was copied). Escaped pairs, a literal backslash before `u` (`"\\ud800"`) and
/// everything outside escapes are left as they are; text that is not JSON is scanned the same
/// way and never panics.
pub fn mend_lone_surrogates(frame: &[u8]) -> Option<Vec<u8>> {
    // The common case, a frame with no surrogate escape at all, costs one substring scan.
    let candidate = |i: usize| matches!(frame.get(i + 2), Some(b'd' | b'D'));
    if !memmem::find_iter(frame, br"\u").any(candidate) {
        return None;
    }
    let mut lone = Vec::new();
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'\\', &frame[at..]) {
        let i = at + found;
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
    if lone.is_empty() {
        return None;
    }
    let mut mended = frame.to_vec();
    for i in lone {
        mended[i..i + 6].copy_from_slice(br"\ufffd");
    }
    Some(mended)
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

    use super::mend_lone_surrogates;

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
    }
}
