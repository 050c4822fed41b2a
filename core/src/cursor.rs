//! `listSessions` cursors: the last row served, encoded and authenticated
//! (Sessions page, "Finding one": "A cursor is the last row served,
//! encoded, and is opaque by contract; one this host did not issue is
//! refused with -32602"; docs/DECISIONS.md, 4).
//!
//! Layout before hex encoding: 8 bytes of `modifiedAt` (ms, big-endian,
//! offset so negatives sort), the session URI's bytes, then the first 16
//! bytes of HMAC-SHA256 over the rest under the host secret. Keyset: the
//! walk resumes strictly after `(modifiedAt desc, uri asc)` of that row, so
//! a disposed row resumes where it would have been.
//!
//! Also the `fetchTurns` cursors ([`turns_before`]), which name a turn.

use hmac::{Hmac, Mac};

/// The `fetchTurns` cursor of a page that ends before turn `turn_id`
/// (AHP 1.0 `chat/turnsLoaded`'s `turnsNextCursor`): the next older page is
/// the turns before it. Names a turn of the chat, nothing the host keeps.
pub fn turns_before(turn_id: &str) -> String {
    format!("before:{turn_id}")
}

/// The turn id a `fetchTurns` cursor made by [`turns_before`] names;
/// `None` for any other text (the request is refused with -32602).
pub fn turn_named(cursor: &str) -> Option<&str> {
    cursor.strip_prefix("before:")
}
use sha2::Sha256;

const MAC_BYTES: usize = 16;
/// Longest session URI a cursor names, in bytes: a 64-byte scheme, `:/`
/// and a 256-byte id (`ids`).
pub const URI_MAX_BYTES: usize = 64 + 2 + crate::ids::ID_MAX_BYTES;
/// Longest cursor text accepted, in characters.
pub const CURSOR_MAX_CHARS: usize = 2 * (8 + URI_MAX_BYTES + MAC_BYTES);

/// The sort key of one catalogue row: most recently modified first, then
/// URI ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowKey {
    /// `modifiedAt` in ms since the epoch.
    pub modified_ms: i64,
    /// The session URI.
    pub uri: String,
}

fn mac(secret: &[u8], body: &[u8]) -> [u8; MAC_BYTES] {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut out = [0u8; MAC_BYTES];
    if let Ok(mut m) = Hmac::<Sha256>::new_from_slice(secret) {
        m.update(body);
        out.copy_from_slice(&m.finalize().into_bytes()[..MAC_BYTES]);
    }
    out
}

/// Encodes `row` as an opaque cursor under `secret`.
pub fn encode(row: &RowKey, secret: &[u8]) -> String {
    let mut body = Vec::with_capacity(8 + row.uri.len() + MAC_BYTES);
    body.extend_from_slice(&((row.modified_ms as u64) ^ (1 << 63)).to_be_bytes());
    body.extend_from_slice(row.uri.as_bytes());
    let tag = mac(secret, &body);
    body.extend_from_slice(&tag);
    body.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes a cursor this host issued; `None` for anything else (wrong
/// length, not hex, a flipped byte, another host's secret).
pub fn decode(text: &str, secret: &[u8]) -> Option<RowKey> {
    if text.len() > CURSOR_MAX_CHARS || text.len() % 2 != 0 || text.len() < 2 * (8 + MAC_BYTES) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    let bytes = bytes?;
    let (body, tag) = bytes.split_at(bytes.len() - MAC_BYTES);
    let expected = mac(secret, body);
    // Constant-time comparison.
    let diff = expected.iter().zip(tag).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if diff != 0 {
        return None;
    }
    let mut ms = [0u8; 8];
    ms.copy_from_slice(&body[..8]);
    let modified_ms = (u64::from_be_bytes(ms) ^ (1 << 63)) as i64;
    let uri = String::from_utf8(body[8..].to_vec()).ok()?;
    Some(RowKey { modified_ms, uri })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(ms in any::<i64>(), uri in "[a-z]{1,8}:/[A-Za-z0-9._-]{1,40}") {
            let row = RowKey { modified_ms: ms, uri };
            prop_assert_eq!(decode(&encode(&row, b"k"), b"k"), Some(row));
        }

        #[test]
        fn refuses_any_flipped_character(ms in any::<i64>(), at in 0usize..1000) {
            let text = encode(&RowKey { modified_ms: ms, uri: "ahp-session:/x".into() }, b"k");
            let i = at % text.len();
            let mut chars: Vec<char> = text.chars().collect();
            chars[i] = if chars[i] == '0' { '1' } else { '0' };
            let flipped: String = chars.into_iter().collect();
            prop_assert_eq!(decode(&flipped, b"k"), None);
        }
    }

    #[test]
    fn refuses_foreign_cursors() {
        for bad in ["", "abc", "Infinity", "null", &"0".repeat(64)] {
            assert_eq!(decode(bad, b"k"), None, "{bad}");
        }
        let row = RowKey { modified_ms: 5, uri: "a:/b".into() };
        assert_eq!(decode(&encode(&row, b"k"), b"other"), None);
    }
}
