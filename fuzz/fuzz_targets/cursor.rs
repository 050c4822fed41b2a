//! Paging cursors: decoding arbitrary text never panics and never accepts a
//! cursor the host did not issue; an issued one round-trips.
#![no_main]
use ahpd_core::cursor::{decode, encode, RowKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = b"fuzz-secret";
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(row) = decode(text, secret) {
            // Only a cursor this host could have issued decodes.
            assert_eq!(encode(&row, secret), text.to_ascii_lowercase());
        }
    }
    // Every URI the host lists passed `ids` validation, so it is at most
    // URI_MAX_BYTES long; only those need to round-trip.
    if data.len() >= 8 && data.len() - 8 <= ahpd_core::cursor::URI_MAX_BYTES {
        let ms = i64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
        let uri = String::from_utf8_lossy(&data[8..]).into_owned();
        if uri.len() > ahpd_core::cursor::URI_MAX_BYTES {
            return;
        }
        let row = RowKey { modified_ms: ms, uri };
        assert_eq!(decode(&encode(&row, secret), secret), Some(row));
    }
});
