//! Session ids and relay tokens: how they are spelled, made and compared.

use rand::Rng;
use uuid::Uuid;

/// A session id as this gateway issues it: a hyphenated UUID. Other spellings of the same
/// UUID (braced, `urn:uuid:`, bare hex) name no session, as on Solari.
pub(crate) fn parse_session_id(id: &str) -> Option<Uuid> {
    (id.len() == 36).then(|| Uuid::try_parse(id).ok()).flatten()
}

/// A random per-session relay capability: 256 bits, hex.
pub(super) fn new_token() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares secrets without an early exit on the first differing byte.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_distinct() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }

    #[test]
    fn only_hyphenated_ids_parse() {
        let id = Uuid::new_v4();
        assert_eq!(parse_session_id(&id.to_string()), Some(id));
        for other in [
            id.simple().to_string(),
            id.braced().to_string(),
            id.urn().to_string(),
            format!("{id}\0"),
            String::new(),
        ] {
            assert_eq!(parse_session_id(&other), None, "{other}");
        }
    }

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
