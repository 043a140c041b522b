//! Sealed bytes: what a durable run writes where others can read it (a database row). It is
//! XChaCha20-Poly1305 under a key the user supplies, with the run's id as associated data. So a
//! row copied to another run, altered, or read with the wrong key is refused, never restored.
//!
//! The sealed form is `OLS1` ‖ key id (8 bytes) ‖ nonce (24 bytes) ‖ ciphertext and tag. The
//! key id is the first 8 bytes of SHA-256 over a fixed label and the key. It names which key
//! sealed a row, so an old key can still open it after a rotation; it says nothing of the key.

use std::fmt;
use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::error::{Error, ErrorKind};

const MAGIC: &[u8; 4] = b"OLS1";
const KEY_ID_LEN: usize = 8;
const NONCE_LEN: usize = 24;
const HEADER_LEN: usize = MAGIC.len() + KEY_ID_LEN + NONCE_LEN;

/// A 256-bit sealing key. Zeroed on drop; its `Debug` shows only the key id.
#[derive(Clone)]
pub struct SealKey {
    key: Zeroizing<[u8; 32]>,
    id: [u8; KEY_ID_LEN],
}

impl SealKey {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> SealKey {
        let mut hasher = Sha256::new();
        hasher.update(b"outlive seal key id v1");
        hasher.update(bytes);
        let digest = hasher.finalize();
        let mut id = [0; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        SealKey {
            key: Zeroizing::new(bytes),
            id,
        }
    }

    /// A key from text: 64 hex digits (e.g. `openssl rand -hex 32`), surrounding whitespace
    /// ignored.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`] when the text is not 64 hex digits; the message never
    /// repeats the text.
    pub fn from_hex(text: &str) -> Result<SealKey, Error> {
        let text = text.trim();
        let mut bytes = Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(text, &mut bytes[..]).map_err(|_| {
            Error::new(
                ErrorKind::InvalidOption,
                format!(
                    "a sealing key must be 64 hex digits (32 bytes; make one with `openssl rand -hex 32`); this one is {} characters{}",
                    text.len(),
                    if text.len() == 64 { " with a character that is not a hex digit" } else { "" }
                ),
            )
        })?;
        Ok(SealKey::from_bytes(*bytes))
    }

    /// A key from the environment variable `name` (64 hex digits).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`] when the variable is unset or not a key.
    pub fn from_env(name: &str) -> Result<SealKey, Error> {
        let value = Zeroizing::new(std::env::var(name).map_err(|_| {
            Error::new(
                ErrorKind::InvalidOption,
                format!("no sealing key: set {name} to 64 hex digits (`openssl rand -hex 32`)"),
            )
        })?);
        SealKey::from_hex(&value)
            .map_err(|e| Error::new(ErrorKind::InvalidOption, format!("{name}: {e}")))
    }

    /// A key from a file holding 64 hex digits (a trailing newline is fine).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Io`] when the file cannot be read; [`ErrorKind::InvalidOption`] when it
    /// does not hold a key.
    pub fn from_file(path: &Path) -> Result<SealKey, Error> {
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("could not read the sealing key file {}", path.display()),
            )
            .with_source(e)
        })?);
        SealKey::from_hex(&text)
            .map_err(|e| Error::new(ErrorKind::InvalidOption, format!("{}: {e}", path.display())))
    }

    /// The key id, as 16 hex digits: what error messages and operators use to tell keys apart.
    pub fn id(&self) -> String {
        hex::encode(self.id)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new((&*self.key).into())
    }
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealKey").field("id", &self.id()).finish()
    }
}

/// Seals with one key and opens with it or any older key still accepted: a key rotation
/// writes under the new key at once and keeps reading rows sealed under the old one until
/// they are rewritten.
#[derive(Clone, Debug)]
pub struct Sealer {
    write: SealKey,
    read: Vec<SealKey>,
}

impl Sealer {
    /// Seals and opens with `key`.
    pub fn new(key: SealKey) -> Sealer {
        Sealer {
            write: key,
            read: Vec::new(),
        }
    }

    /// Also opens what `old` sealed (never seals with it).
    #[must_use]
    pub fn accepting(mut self, old: SealKey) -> Sealer {
        self.read.push(old);
        self
    }

    /// Seals `plaintext` for the run `run_id`.
    pub fn seal(&self, run_id: &str, plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let ciphertext = self
            .write
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: run_id.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any length a Vec holds");
        let mut out = Vec::with_capacity(HEADER_LEN + ciphertext.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.write.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ciphertext);
        out
    }

    /// Opens what [`Sealer::seal`] sealed for `run_id`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Sealed`], with a message that says which. Not a sealed checkpoint at all.
    /// Sealed under a key this sealer does not hold (the key id is named). Or refused by the
    /// authentication tag: altered, or sealed for another run.
    pub fn open(&self, run_id: &str, sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        if sealed.len() < HEADER_LEN + 16 || &sealed[..MAGIC.len()] != MAGIC {
            return Err(Error::new(
                ErrorKind::Sealed,
                format!(
                    "run {run_id}: the stored checkpoint is not a sealed outlive checkpoint ({} bytes); it is not restored",
                    sealed.len()
                ),
            ));
        }
        let id = &sealed[MAGIC.len()..MAGIC.len() + KEY_ID_LEN];
        let nonce = &sealed[MAGIC.len() + KEY_ID_LEN..HEADER_LEN];
        let Some(key) = std::iter::once(&self.write)
            .chain(&self.read)
            .find(|k| k.id == id)
        else {
            let held: Vec<String> = std::iter::once(&self.write)
                .chain(&self.read)
                .map(SealKey::id)
                .collect();
            return Err(Error::new(
                ErrorKind::Sealed,
                format!(
                    "run {run_id}: the stored checkpoint was sealed under key {} and this worker holds {}; give it that key (as the key, or as an old key still accepted)",
                    hex::encode(id),
                    held.join(", ")
                ),
            ));
        };
        let plaintext = key
            .cipher()
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: &sealed[HEADER_LEN..],
                    aad: run_id.as_bytes(),
                },
            )
            .map_err(|_| {
                Error::new(
                    ErrorKind::Sealed,
                    format!(
                        "run {run_id}: the stored checkpoint failed authentication under key {}: it was altered, or it belongs to another run; it is not restored",
                        key.id()
                    ),
                )
            })?;
        Ok(Zeroizing::new(plaintext))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> SealKey {
        SealKey::from_bytes([b; 32])
    }

    #[test]
    fn what_is_sealed_opens_for_its_run_only() {
        let sealer = Sealer::new(key(1));
        let sealed = sealer.seal("run-a", b"aurora_session=s3cr3t");
        assert!(
            !sealed.windows(6).any(|w| w == b"s3cr3t"),
            "no plaintext in the sealed form"
        );
        assert_eq!(
            &sealer.open("run-a", &sealed).unwrap()[..],
            b"aurora_session=s3cr3t"
        );
        let other = sealer.open("run-b", &sealed).unwrap_err();
        assert_eq!(other.kind(), ErrorKind::Sealed);
        assert!(other.to_string().contains("another run"), "{other}");
    }

    #[test]
    fn a_tampered_byte_anywhere_is_refused() {
        let sealer = Sealer::new(key(1));
        let sealed = sealer.seal("run", b"state");
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            let err = sealer.open("run", &bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Sealed, "byte {i}");
        }
        let short = sealer.open("run", &sealed[..10]).unwrap_err();
        assert!(short.to_string().contains("not a sealed"), "{short}");
    }

    #[test]
    fn a_wrong_key_is_named_and_refused() {
        let sealed = Sealer::new(key(1)).seal("run", b"state");
        let err = Sealer::new(key(2)).open("run", &sealed).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&key(1).id()), "{message}");
        assert!(message.contains(&key(2).id()), "{message}");
    }

    #[test]
    fn a_rotation_reads_old_rows_and_writes_new_ones() {
        let old = Sealer::new(key(1)).seal("run", b"old row");
        let rotated = Sealer::new(key(2)).accepting(key(1));
        assert_eq!(&rotated.open("run", &old).unwrap()[..], b"old row");
        let new = rotated.seal("run", b"new row");
        assert_eq!(&new[4..12], &key(2).id[..], "written under the new key");
        // Once the old key is dropped, the new rows still open; the old ones are refused.
        let after = Sealer::new(key(2));
        assert_eq!(&after.open("run", &new).unwrap()[..], b"new row");
        assert!(after.open("run", &old).is_err());
    }

    #[test]
    fn keys_are_read_from_hex_and_never_echoed() {
        let hex_key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let k = SealKey::from_hex(&format!("{hex_key}\n")).unwrap();
        assert_eq!(*k.key, hex::decode(hex_key).unwrap()[..]);
        assert!(!format!("{k:?}").contains("0011"), "{k:?}");
        let bad =
            SealKey::from_hex("zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
                .unwrap_err();
        assert!(bad.to_string().contains("64 hex digits"), "{bad}");
        assert!(!bad.to_string().contains("zz11"), "{bad}");
        let short = SealKey::from_hex("abcd").unwrap_err();
        assert!(short.to_string().contains("4 characters"), "{short}");
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("{hex_key}\n")).unwrap();
        assert_eq!(SealKey::from_file(file.path()).unwrap().id(), k.id());
    }
}
