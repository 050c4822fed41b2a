//! Which folders a principal may reach (issue 48, "Confinement"): the
//! roots of a request, before the shell resolves them.
//!
//! The rule: a file's content is readable only inside the folders of a
//! session (its working directories, its own worktree, the trees it
//! shares) whose state the principal may read, and writable only inside
//! those of a session whose artifacts it may write. On a host with no
//! users directory every session counts, for reading and writing. With
//! one, a session counts for reading when the principal holds
//! `session:state` (as it may then subscribe to that session's state and
//! read its turns: a guest sees the sessions and what is in them), and for
//! writing when it holds `session:artifacts` (a guest holds no write
//! grant) and the session is its own, or the principal is the host itself
//! or an administrator: a file written is not undone, so another member's
//! session's folder is changed only through its agent, never directly. A
//! session being disposed counts for nobody.

use crate::grants::{Operation, Principal};
use crate::record::SessionRecord;

/// What a request does with the files it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads (list, read, resolve, watch, completions).
    Read,
    /// Changes (write, mkdir, copy, move, delete).
    Write,
}

impl Access {
    /// The grant it needs on a session.
    pub fn operation(self) -> Operation {
        match self {
            Access::Read => Operation::SessionState,
            Access::Write => Operation::SessionArtifacts,
        }
    }
}

/// Whether `principal` (none: not signed in) may reach the folders of the
/// session `record` for `access`, on a host with (`users`) or without a
/// users directory (module docs).
pub fn may_reach(users: bool, principal: Option<&Principal>, record: &SessionRecord, access: Access) -> bool {
    if !users {
        return true;
    }
    let Some(p) = principal else { return false };
    if !p.holds(access.operation()) {
        return false;
    }
    if matches!(p, Principal::Root { .. }) || p.is_administrator() {
        return true;
    }
    access == Access::Read || record.owner.as_deref() == Some(p.owner().as_str())
}

/// The folders of session `record`, as absolute paths in a fixed order,
/// each once: its working directories, then its own worktree, then the
/// trees it shares, where not already listed. A working directory that is
/// not a well-formed `file:` URI is left out.
pub fn session_roots(record: &SessionRecord) -> Vec<String> {
    let mut roots: Vec<String> = Vec::new();
    let mut add = |p: String| {
        if !roots.contains(&p) {
            roots.push(p);
        }
    };
    for uri in record.working_directories.iter() {
        if let Ok(p) = super::path::parse_file_uri(uri) {
            add(p);
        }
    }
    if let Some(tree) = record.git.as_ref().and_then(|g| g.worktree.as_ref()) {
        if let Ok(p) = super::path::parse_file_uri(&crate::git::uri_of_path(&tree.path)) {
            add(p);
        }
    }
    for shared in record.shared_trees.iter() {
        if let Ok(p) = super::path::parse_file_uri(&crate::git::uri_of_path(&shared.tree.path)) {
            add(p);
        }
    }
    roots
}
