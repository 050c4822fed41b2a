//! The front door (issue 46): any bytes as a request head, judged on a
//! loopback arrival by a gate that asks a token. Whatever is admitted as an
//! upgrade is addressed by a loopback name, comes from no web page or from
//! VS Code desktop or the daemon's own page, and presents the token.
#![no_main]
use ahpd_core::grants::token_hash;
use ahpd_core::protocol::front_door::{parse_head, Admitted, Arrival, Gate, VSCODE_DESKTOP_ORIGIN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((head, len)) = parse_head(data) else { return };
    assert!(len <= data.len());
    let gate = Gate { token_sha256: Some(token_hash("secret")), ..Gate::default() };
    let at = Arrival { ip: [127, 0, 0, 1].into(), port: 8765 };
    if let Ok(Admitted::Upgrade { credential }) = gate.admit(&head, at) {
        let host = head.host.as_deref().unwrap_or_default();
        assert!(gate.host_allowed(host, at), "{host:?}");
        let name = host.rsplit_once(':').filter(|(h, p)| !h.ends_with(']') || p.parse::<u16>().is_ok()).map_or(host, |(h, _)| h);
        let name = name.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        assert!(name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback()), "{host:?}");
        if let Some(origin) = &head.origin {
            assert!(origin.trim().eq_ignore_ascii_case(VSCODE_DESKTOP_ORIGIN) || origin.to_ascii_lowercase().starts_with("http"), "{origin:?}");
        }
        assert_eq!(credential.as_deref(), Some("secret"));
    }
});
