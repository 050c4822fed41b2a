//! Session and chat identifiers, validated at the edge (docs/DECISIONS.md, 5).
//!
//! A session URI is `<scheme>:/<id>` (Sessions page, "The life of a
//! session": `ahp-session:/<id>`, `<provider>:/<id>`, or a scheme of the
//! client's own). The id reaches file names, git refs and registry records,
//! so it is checked before anything else happens: a refused id is -32602 and
//! touches nothing.

use std::fmt;

/// Longest id accepted, in bytes.
pub const ID_MAX_BYTES: usize = 256;

/// A session URI as the host's indexes hold it: one allocation shared by
/// the table's URI order, the catalogue's order and the chat → session map
/// (issue 21: three copies of every session URI were ~150 bytes of a
/// catalogue row). Compares, orders and borrows as the `str` it holds.
pub type SharedUri = std::sync::Arc<str>;

/// Why an id or URI was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdError(pub String);

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A validated `<scheme>:/<id>` URI, split into its parts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId {
    /// Lowercase scheme, e.g. `ahp-session`.
    pub scheme: String,
    /// The id after `:/`.
    pub id: String,
}

impl ResourceId {
    /// Parses and validates `uri`.
    ///
    /// The scheme is a letter then letters, digits, `+`, `.` or `-` (RFC 3986),
    /// at most 64 bytes. The id is 1..=256 bytes of `A-Z a-z 0-9 . _ ~ + = -`,
    /// does not start with `.` or `-`, and is not a name Windows reserves
    /// (`CON`, `NUL`, `COM1`...). This refuses `..`, `.`, `a/b`, `a\b`,
    /// `/etc/passwd`, percent-encodings like `%2e%2e%2f`, NUL and control
    /// characters, and the empty string.
    pub fn parse(uri: &str) -> Result<ResourceId, IdError> {
        let Some((scheme, rest)) = uri.split_once(":/") else {
            return Err(IdError(format!(
                "not a session or chat URI (expected <scheme>:/<id>): {}",
                printable(uri)
            )));
        };
        validate_scheme(scheme)?;
        validate_id(rest)?;
        Ok(ResourceId { scheme: scheme.to_owned(), id: rest.to_owned() })
    }

    /// A file-name-safe key naming this resource in the store: `scheme@id`.
    /// Distinct URIs give distinct keys, since neither part may hold `@`.
    pub fn store_key(&self) -> String {
        format!("{}@{}", self.scheme, self.id)
    }

    /// The URI text.
    pub fn uri(&self) -> String {
        format!("{}:/{}", self.scheme, self.id)
    }

    /// The URI of the default chat of the session this id names:
    /// `ahp-chat:/<store key>` (the host's, never the client's; Sessions
    /// page, "createSession order": "the default chat is the host's").
    pub fn default_chat_uri(&self) -> String {
        format!("ahp-chat:/{}", self.store_key())
    }
}

fn validate_scheme(scheme: &str) -> Result<(), IdError> {
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-".contains(c));
    if !first_ok || !rest_ok || scheme.len() > 64 {
        return Err(IdError(format!("invalid URI scheme: {}", printable(scheme))));
    }
    Ok(())
}

/// Validates a bare id (see [`ResourceId::parse`] for the rule).
pub fn validate_id(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError("empty id".to_owned()));
    }
    if id.len() > ID_MAX_BYTES {
        return Err(IdError(format!("id longer than {ID_MAX_BYTES} bytes")));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._~+=-".contains(*c)))
    {
        return Err(IdError(format!(
            "id {} holds a character not allowed in ids: {:?}",
            printable(id),
            bad
        )));
    }
    if id.starts_with('.') || id.starts_with('-') {
        return Err(IdError(format!("id {} may not start with '.' or '-'", printable(id))));
    }
    // Ids also name git refs (refs/agents/<id>/...): refuse what
    // `git check-ref-format` refuses within one component.
    if id.contains("..") || id.ends_with('.') || id.ends_with(".lock") {
        return Err(IdError(format!("id {} may not hold '..' or end with '.' or '.lock'", printable(id))));
    }
    let stem = id.split('.').next().unwrap_or(id).to_ascii_uppercase();
    let reserved = matches!(stem.as_str(), "CON" | "PRN" | "AUX" | "NUL")
        || ((stem.starts_with("COM") || stem.starts_with("LPT"))
            && stem.len() == 4
            && stem.as_bytes()[3].is_ascii_digit());
    if reserved {
        return Err(IdError(format!("id {} is a reserved device name", printable(id))));
    }
    Ok(())
}

/// Validates a backend conversation id or a store key: the id rule, with
/// `@` also allowed (the host's own keys are `scheme@id`). Such ids name
/// files in backends' transcript folders, so the same refusals apply.
pub fn validate_conversation_id(id: &str) -> Result<(), IdError> {
    match id.split_once('@') {
        Some((scheme, rest)) => {
            validate_scheme(scheme)?;
            validate_id(rest)
        }
        None => validate_id(id),
    }
}

/// `text` with control characters escaped and cut to 80 characters, for
/// error messages and logs.
pub fn printable(text: &str) -> String {
    printable_up_to(text, 80)
}

/// [`printable`] cut at `max` characters instead of 80: for a folder a
/// refusal must name whole (a trusted-folder refusal names a path up to
/// [`PATH_SHOWN_MAX`]).
pub fn printable_up_to(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).flat_map(char::escape_debug).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// Most characters of a folder named in a refusal.
pub const PATH_SHOWN_MAX: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_uris() {
        let r = ResourceId::parse("ahp-session:/3f2a-11ee_b.c~d").expect("valid");
        assert_eq!(r.scheme, "ahp-session");
        assert_eq!(r.store_key(), "ahp-session@3f2a-11ee_b.c~d");
        assert!(ResourceId::parse("copilotcli:/0b4c6a52-aaaa-bbbb-cccc-0123456789ab").is_ok());
    }

    #[test]
    fn refuses_hostile_ids() {
        let long = format!("ahp-session:/{}", "a".repeat(300));
        for bad in [
            "ahp-session:/../x",
            "ahp-session:/..",
            "ahp-session:/.",
            "ahp-session:/a/b",
            "ahp-session:/a\\b",
            "ahp-session://etc/passwd",
            "ahp-session:/%2e%2e%2f",
            "ahp-session:/a\0b",
            "ahp-session:/",
            long.as_str(),
            "ahp-session:/CON",
            "ahp-session:/com1.txt",
            "ahp-session:/-rf",
            "ahp-session:/a..b",
            "ahp-session:/x.lock",
            "ahp-session:/trailing.",
            "no-colon-slash",
            "Bad Scheme:/x",
            "",
        ] {
            assert!(ResourceId::parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}
