//! Session/chat URI validation: whatever passes is safe to join into a
//! path and a git ref.
#![no_main]
use ahpd_core::ids::ResourceId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(id) = ResourceId::parse(text) {
        let key = id.store_key();
        assert!(!key.contains('/') && !key.contains('\\') && !key.contains('\0'));
        assert!(!id.id.starts_with('.') && !id.id.is_empty() && id.id.len() <= 256);
        assert!(!id.id.contains(".."), "no parent segment survives: {:?}", id.id);
        assert_eq!(ResourceId::parse(&id.uri()), Ok(id));
    }
});
