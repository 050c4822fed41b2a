//! The JSON-RPC frame decoder: total on any bytes; whatever decodes
//! re-encodes and decodes to the same message.
#![no_main]
use ahpd_core::protocol::codec::decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(message) = decode(text) {
        let again = decode(&message.to_json()).expect("a decoded message re-encodes to a decodable frame");
        assert_eq!(again, message);
    }
});
