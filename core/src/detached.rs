//! Detached worktrees as data (Sessions page, "Isolation and worktrees":
//! "The window has five requests of its own for trees it makes for
//! itself"): the handle's shape, the branch a tree is cut on, which
//! handles a `reconcile` scope covers, and the registry of the handles the
//! host holds. The five requests are decoded with every other method
//! ([`crate::protocol::codec::DetachedMethod`], their wire names and
//! shapes) and answered in `host/detached.rs`.
//!
//! Handles live for the daemon's run (in memory only): after a restart the
//! trees stay on disk with their branches, and the host no longer knows
//! their handles.

use std::collections::{BTreeMap, VecDeque};

use ahp_types::Uri;

use crate::effect::ConnId;
use crate::git::WorktreeRecord;
use crate::time::MonoTime;
use crate::worktree::{check_branch_name, BadName};

/// The `initialize` result's `_meta` key that advertises these methods.
pub const CAPABILITY: &str = "vscode.detachedWorktrees";

/// The words every refusal of a handle this principal does not hold
/// carries (-32602).
pub const UNKNOWN_HANDLE: &str = "Unknown detached worktree handle";

/// How long a handle in a reconciled scope may go unnamed before it is let
/// go (taken off the disk when clean, and forgotten): 24 hours, in ms.
pub const RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// At most this many words of the prompt go into a tree's branch name.
pub const SLUG_WORDS: usize = 5;

/// At most this many bytes of slug go into a tree's branch name.
pub const SLUG_MAX_BYTES: usize = 40;

/// An opaque handle in the UUID shape (8-4-4-4-12 lowercase hex, version
/// 4 and variant bits set) made from two 64-bit draws of the host's seeded
/// stream.
pub fn handle_from(hi: u64, lo: u64) -> String {
    let hi = (hi & !0xF000) | 0x4000;
    let lo = (lo & !(0xC << 60)) | (0x8 << 60);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xFFFF,
        hi & 0xFFFF,
        lo >> 48,
        lo & 0xFFFF_FFFF_FFFF
    )
}

/// The slug of a prompt's first words: up to [`SLUG_WORDS`] runs of ASCII
/// letters and digits, lowercased, joined by `-`, cut to
/// [`SLUG_MAX_BYTES`]; `worktree` when the prompt has none.
pub fn slug(prompt: &str) -> String {
    let words: Vec<String> = prompt
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(SLUG_WORDS)
        .map(str::to_ascii_lowercase)
        .collect();
    let mut out = String::new();
    for w in words {
        let extra = usize::from(!out.is_empty()) + w.len();
        if out.len() + extra > SLUG_MAX_BYTES {
            if out.is_empty() {
                out.push_str(&w[..SLUG_MAX_BYTES]);
            }
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&w);
    }
    if out.is_empty() {
        "worktree".to_owned()
    } else {
        out
    }
}

/// The branch a window's tree is cut on: `prefix` (the session's
/// `worktreeBranchPrefix`), `agents/`, then the [`slug`] of the prompt.
/// Errors: [`BadName`] when the prefix makes a name git would refuse.
pub fn branch_for(prefix: &str, prompt: &str) -> Result<String, BadName> {
    let name = format!("{prefix}agents/{}", slug(prompt));
    check_branch_name(&name)?;
    Ok(name)
}

/// Whether `uri` is `scope` or lies under it, compared without regard to
/// ASCII case (a trailing `/` on the scope is ignored).
pub fn in_scope(scope: &str, uri: &str) -> bool {
    let scope = scope.trim_end_matches('/');
    if scope.is_empty() || uri.len() < scope.len() || !uri.is_char_boundary(scope.len()) {
        return false;
    }
    let (head, rest) = uri.split_at(scope.len());
    head.eq_ignore_ascii_case(scope) && (rest.is_empty() || rest.starts_with('/'))
}

/// A request on a handle waiting for the one before it to finish (each
/// handle's git work runs one command at a time, in the order asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `setAgentHostDetachedWorktreeArchived`, answered on `conn` as `id`.
    SetArchived {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// Archive (true) or put back (false).
        archived: bool,
    },
    /// Take the tree off the disk and forget the handle: a
    /// `deleteAgentHostDetachedWorktree` answered on `reply`, or, with no
    /// one to answer, a handle let go by `reconcile`.
    Delete {
        /// The connection and request id to answer, if any.
        reply: Option<(ConnId, u64)>,
    },
}

/// One tree the window made, as the host holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// The owner string of the principal that made it (`None` on a host
    /// with no users directory, where every connection is one principal).
    pub owner: Option<String>,
    /// The session it was cut for.
    pub session: Uri,
    /// The folder URI that session was in when the tree was cut.
    pub folder_uri: Uri,
    /// The local path git is asked about (that folder).
    pub repo: String,
    /// The tree.
    pub tree: WorktreeRecord,
    /// Whether the window claimed it.
    pub claimed: bool,
    /// Whether it was last asked to be archived.
    pub archived: bool,
    /// When it was made, claimed or last named by `reconcile`.
    pub last_seen: MonoTime,
    /// Being deleted or let go: every request treats it as unknown.
    pub leaving: bool,
    /// A git command for it is in flight.
    pub busy: bool,
    /// Requests waiting behind that command.
    pub queue: VecDeque<Step>,
}

impl Detached {
    /// The tree's `file:` URI (the `resource` of the create reply).
    pub fn resource(&self) -> Uri {
        crate::git::uri_of_path(&self.tree.path)
    }

    /// Whether a `reconcile` of `scope` covers it: its tree's URI or its
    /// session's folder URI is in the scope.
    pub fn in_scope(&self, scope: &str) -> bool {
        in_scope(scope, &self.resource()) || in_scope(scope, &self.folder_uri)
    }

    /// Whether it went unnamed for [`RETENTION_MS`] by `now`.
    pub fn expired(&self, now: MonoTime) -> bool {
        now.0.saturating_sub(self.last_seen.0) >= RETENTION_MS
    }
}

/// The handles the host holds, by handle (in memory, for the daemon's run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    entries: BTreeMap<String, Detached>,
}

impl Registry {
    /// The window's tree (a detached worktree) `folder` is inside, if any,
    /// as a new session's record keeps it.
    pub fn tree_of(&self, folder: Option<&Uri>) -> Option<crate::git::TreeOrigin> {
        let path = crate::git::path_of_uri(folder?).and_then(|p| crate::git::normalize_path(&p))?;
        self.iter().map(|(_, d)| &d.tree).find(|t| !t.repo_root.is_empty() && crate::trust::within(&path, &t.path)).map(|t| {
            crate::git::TreeOrigin { path: t.path.clone(), repo_root: t.repo_root.clone() }
        })
    }

    /// Every handle held, in handle order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Detached)> + '_ {
        self.entries.iter()
    }

    /// Adds a handle.
    pub fn insert(&mut self, handle: String, entry: Detached) {
        self.entries.insert(handle, entry);
    }

    /// The handle as `owner` may see it: held, made by that owner, and not
    /// leaving.
    pub fn visible(&self, owner: Option<&str>, handle: &str) -> Option<&Detached> {
        self.entries.get(handle).filter(|e| e.owner.as_deref() == owner && !e.leaving)
    }

    /// Mutable [`Registry::visible`].
    pub fn visible_mut(&mut self, owner: Option<&str>, handle: &str) -> Option<&mut Detached> {
        self.entries.get_mut(handle).filter(|e| e.owner.as_deref() == owner && !e.leaving)
    }

    /// The handle whatever its owner or state (for the host's own steps).
    pub fn get_mut(&mut self, handle: &str) -> Option<&mut Detached> {
        self.entries.get_mut(handle)
    }

    /// Forgets a handle.
    pub fn remove(&mut self, handle: &str) -> Option<Detached> {
        self.entries.remove(handle)
    }

    /// The handles `owner` holds (not leaving), in handle order.
    pub fn handles_of(&self, owner: Option<&str>) -> Vec<String> {
        self.entries.iter().filter(|(_, e)| e.owner.as_deref() == owner && !e.leaving).map(|(h, _)| h.clone()).collect()
    }

    /// How many handles are held (leaving ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_uuid_shaped() {
        for (a, b) in [(0, 0), (u64::MAX, u64::MAX), (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210)] {
            let h = handle_from(a, b);
            let parts: Vec<&str> = h.split('-').collect();
            assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{h}");
            assert!(h.chars().all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{h}");
            assert!(parts[2].starts_with('4'), "{h}");
            assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'), "{h}");
        }
        assert_ne!(handle_from(1, 2), handle_from(2, 1));
    }

    #[test]
    fn slugs_take_the_first_words() {
        assert_eq!(slug("Fix the login page, then the tests please"), "fix-the-login-page-then");
        assert_eq!(slug("  ¿¡!  "), "worktree");
        assert_eq!(slug(&"x".repeat(60)).len(), SLUG_MAX_BYTES);
        assert_eq!(branch_for("me/", "Add caching").as_deref(), Ok("me/agents/add-caching"));
        assert!(branch_for("a..b/", "x").is_err());
    }

    #[test]
    fn scopes_match_whole_components_ignoring_case() {
        assert!(in_scope("file:///Src/App", "file:///src/app"));
        assert!(in_scope("file:///src/app/", "file:///src/app/x"));
        assert!(!in_scope("file:///src/app", "file:///src/apple"));
        assert!(!in_scope("", "file:///src/app"));
        assert!(!in_scope("file:///src/app/x", "file:///src/app"));
    }
}
