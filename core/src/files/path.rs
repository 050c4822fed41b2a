//! The path rules of a session's files (issue 48), as pure functions: a
//! request's `file:` URI read into a path at the edge ([`parse_file_uri`],
//! before any effect), and whether a real path lies inside a real root
//! ([`inside`], whole components: `/a/bc` is not inside `/a/b`). Shared by
//! the host, the sim and the `file_paths` fuzz target.

/// Longest path a request may name, in bytes of its decoded UTF-8
/// (Linux's `PATH_MAX`): a longer one is refused before anything is asked
/// of the filesystem.
pub const PATH_MAX_BYTES: usize = 4096;

/// Why a request's URI names no path the host will look at; each is
/// answered `InvalidParams` (-32602) with [`PathRefusal::words`], which
/// say nothing about the filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRefusal {
    /// Not a `file:` URI (the host serves no other scheme).
    NotFile,
    /// A `file:` URI naming another host, or a path that is not absolute
    /// (`file:relative`, `file://server/share`, `file:C:\x`).
    NotAbsolute,
    /// A NUL byte, a backslash, a raw `?` or `#`, or percent-escapes that
    /// do not decode to UTF-8.
    Malformed,
    /// Over [`PATH_MAX_BYTES`].
    TooLong,
}

impl PathRefusal {
    /// The words a client reads.
    pub fn words(self) -> String {
        match self {
            PathRefusal::NotFile => "only file: URIs name files on this host".to_owned(),
            PathRefusal::NotAbsolute => "a file: URI must name an absolute path on this host (file:///...)".to_owned(),
            PathRefusal::Malformed => "the file: URI is malformed (NUL, backslash, raw ? or #, or escapes that are not UTF-8)".to_owned(),
            PathRefusal::TooLong => format!("the path is longer than {PATH_MAX_BYTES} bytes"),
        }
    }
}

/// The absolute path a request's `file:` URI names, with repeated `/` and
/// `.` components dropped. `..` is kept: what it means depends on the
/// links before it, so the shell's resolve ([`super::fs::FsCmd::Resolve`])
/// settles it, never a lexical rule here.
///
/// Errors ([`PathRefusal`]): another scheme, another host, a relative
/// path, NUL, a backslash (a Windows-style path is not one of this
/// host's), a raw `?` or `#` (a query or fragment names no file),
/// escapes that are not UTF-8, longer than [`PATH_MAX_BYTES`].
pub fn parse_file_uri(uri: &str) -> Result<String, PathRefusal> {
    let Some(after) = uri.strip_prefix("file:") else {
        return Err(PathRefusal::NotFile);
    };
    if uri.len() > PATH_MAX_BYTES * 3 + 16 {
        // Even fully escaped, this is over the bound: refused before it
        // is decoded.
        return Err(PathRefusal::TooLong);
    }
    if after.contains(['?', '#', '\\', '\0']) {
        return Err(PathRefusal::Malformed);
    }
    if !after.starts_with("//") {
        return Err(PathRefusal::NotAbsolute);
    }
    let path = match crate::git::path_of_uri(uri) {
        Some(p) => p,
        // `path_of_uri` refuses another host and a relative path, NUL
        // and escapes that are not UTF-8; say which as well as it can.
        None => {
            let rest = after.trim_start_matches("//");
            let rest = rest.strip_prefix("localhost").unwrap_or(rest);
            return Err(if rest.starts_with('/') { PathRefusal::Malformed } else { PathRefusal::NotAbsolute });
        }
    };
    if path.contains(['\0', '\\']) {
        return Err(PathRefusal::Malformed);
    }
    let clean = collapse(&path);
    if clean.len() > PATH_MAX_BYTES {
        return Err(PathRefusal::TooLong);
    }
    Ok(clean)
}

/// `path` with repeated `/` and `.` components dropped (no trailing `/`
/// but for the root itself); `..` kept.
fn collapse(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Whether `path` is a real path as the shell answers one: absolute, no
/// empty, `.` or `..` component, no NUL or backslash. A real path that is
/// not clean is never inside anything ([`inside`]), so a resolve that
/// left a `..` in cannot widen a root.
pub fn is_clean(path: &str) -> bool {
    if path == "/" {
        return true;
    }
    let Some(rest) = path.strip_prefix('/') else { return false };
    !path.contains(['\0', '\\']) && rest.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Whether real path `path` is real root `root` or inside it, by whole
/// components (`/a/bc` is not inside `/a/b`; everything is inside `/`).
/// Both must be clean ([`is_clean`]); otherwise the answer is no.
pub fn within(path: &str, root: &str) -> bool {
    if !is_clean(path) || !is_clean(root) {
        return false;
    }
    root == "/" || path == root || path.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'))
}

/// Whether real path `path` is inside one of `roots` ([`within`]).
pub fn inside<'a>(path: &str, roots: impl IntoIterator<Item = &'a str>) -> bool {
    roots.into_iter().any(|r| within(path, r))
}

/// The last name of `path` (`/a/b` → `b`; the root's is `/`).
pub fn base_name(path: &str) -> &str {
    path.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_read_at_the_edge() {
        assert_eq!(parse_file_uri("file:///a//b/./c/"), Ok("/a/b/c".to_owned()));
        assert_eq!(parse_file_uri("file:///a/../b"), Ok("/a/../b".to_owned()));
        assert_eq!(parse_file_uri("file://localhost/x%20y"), Ok("/x y".to_owned()));
        assert_eq!(parse_file_uri("file:///"), Ok("/".to_owned()));
        assert_eq!(parse_file_uri("http:///etc"), Err(PathRefusal::NotFile));
        assert_eq!(parse_file_uri("file:relative"), Err(PathRefusal::NotAbsolute));
        assert_eq!(parse_file_uri("file://server/share"), Err(PathRefusal::NotAbsolute));
        assert_eq!(parse_file_uri("file:///a%00b"), Err(PathRefusal::Malformed));
        assert_eq!(parse_file_uri("file:///a%ff"), Err(PathRefusal::Malformed));
        assert_eq!(parse_file_uri("file:///C:\\x"), Err(PathRefusal::Malformed));
        assert_eq!(parse_file_uri("file:///a?b"), Err(PathRefusal::Malformed));
        assert_eq!(parse_file_uri(&format!("file:///{}", "a".repeat(PATH_MAX_BYTES))), Err(PathRefusal::TooLong));
        // An escaped dot is a dot: kept for the resolve to settle.
        assert_eq!(parse_file_uri("file:///w/%2e%2e/x"), Ok("/w/../x".to_owned()));
    }

    #[test]
    fn containment_is_by_whole_components() {
        assert!(within("/a/b", "/a/b"));
        assert!(within("/a/b/c", "/a/b"));
        assert!(!within("/a/bc", "/a/b"));
        assert!(!within("/a", "/a/b"));
        assert!(within("/anything", "/"));
        assert!(!within("/a/b/../c", "/a/b"));
        assert!(!within("/a/b/c", "/a/b/"));
        assert!(!within("relative", "/"));
        assert!(inside("/w/x", ["/v", "/w"]));
    }
}
