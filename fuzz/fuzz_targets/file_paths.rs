//! A session's files (issue 48): the path checks with hostile input of
//! every kind (`..`, `%2e%2e`, NUL, long, percent-escapes that are not
//! UTF-8, Windows-style `C:\`, `//`, another host). A URI either is refused
//! at the edge or names a clean-enough absolute path (no NUL, no
//! backslash, within the length bound, no `.` or empty component); and
//! containment is by whole components: a path inside a root, resolved
//! through the in-memory filesystem with a link out, never lands outside.
#![no_main]
use ahpd_core::files::memfs::MemFs;
use ahpd_core::files::path::{inside, is_clean, parse_file_uri, within, PATH_MAX_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Fuzz both the raw text and it as the path of a file: URI.
    for uri in [text.to_owned(), format!("file://{text}"), format!("file:///w/{text}")] {
        let Ok(path) = parse_file_uri(&uri) else { continue };
        assert!(path.starts_with('/'), "{uri:?} -> {path:?}");
        assert!(!path.contains('\0') && !path.contains('\\'), "{uri:?} -> {path:?}");
        assert!(path.len() <= PATH_MAX_BYTES, "{uri:?}");
        assert!(path == "/" || path[1..].split('/').all(|c| !c.is_empty() && c != "."), "{uri:?} -> {path:?}");
        // Lexically, a path holding `..` is never inside anything.
        if path.split('/').any(|c| c == "..") {
            assert!(!within(&path, "/w"));
        }
        // Resolved on a machine with a link out of `/w`, the real path is
        // clean, and inside `/w` only if it does not reach `/secret`.
        let mut fs = MemFs::new();
        fs.put("/w/a", b"a");
        fs.put("/secret/k", b"k");
        fs.link("/w/out", "/secret");
        fs.link("/w/up", "..");
        if let Ok((real, _)) = fs.resolve(&path, true) {
            assert!(is_clean(&real), "{path:?} -> {real:?}");
            if inside(&real, ["/w"]) {
                assert!(!real.starts_with("/secret"), "{path:?} -> {real:?}");
            }
        }
    }
    // Containment by whole components for any two strings.
    if let Some((a, b)) = text.split_once('|') {
        if within(a, b) {
            assert!(is_clean(a) && is_clean(b));
            assert!(b == "/" || a == b || a.starts_with(&format!("{b}/")), "{a:?} within {b:?}");
        }
    }
});
