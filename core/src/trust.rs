//! Folder trust (Sessions page, "Isolation and worktrees": "A worktree the
//! host made is trusted when the repository it came from is").
//!
//! VS Code keeps workspace trust in its client: its agent host starts an
//! agent wherever it is asked to (microsoft/vscode#322308). ahpd serves
//! clients that may keep no trust of their own, so an operator can name the
//! folders agents may run in (`trusted_folders`). With no list, every folder
//! is trusted, as with the reference host. With one, an agent is started
//! only in a folder on it or inside one, or in a tree this host made whose
//! repository is trusted: a tree lives beside its repository
//! (`<repo>.worktrees/<name>`) or under `--worktrees-root`, outside every
//! folder the operator listed, and is the same repository's checkout.
//!
//! Paths are compared lexically, component by component, after `.` and
//! `..` are resolved (`/src/app/../etc` is `/src/etc`, and `/src/app2` is
//! not inside `/src/app`). Symbolic links are not followed: a link inside a
//! trusted folder is trusted as the folder is, as workspace trust treats a
//! folder's contents.

use serde::{Deserialize, Serialize};

use crate::git::{normalize_path as normalize, path_of_uri};

/// Which folders agents may run in; part of [`crate::Config`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Trust {
    /// The trusted folders, as absolute local paths. `None`: no list, every
    /// folder is trusted (the default). `Some(list)`: only those folders
    /// and the trees made from them; an empty list trusts no folder (a
    /// session with no folder at all is still made).
    #[serde(default)]
    pub folders: Option<Vec<String>>,
}

/// One tree this host made, and where it came from: what a tree inherits
/// its trust from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadeTree<'a> {
    /// The tree's folder.
    pub path: &'a str,
    /// The repository's top folder.
    pub repo: Option<&'a str>,
    /// The folder the tree was cut from (a session's folder, inside the
    /// repository).
    pub origin: &'a str,
}

/// Whether normalized `path` is `folder` or inside it (whole components:
/// `/src/app2` is not inside `/src/app`).
pub fn within(path: &str, folder: &str) -> bool {
    let folder = folder.trim_end_matches('/');
    path == folder || folder.is_empty() || path.strip_prefix(folder).is_some_and(|rest| rest.starts_with('/'))
}

impl Trust {
    /// Trust with a list of folders (each normalized; a relative entry is
    /// dropped, since it names no place).
    pub fn of(folders: &[String]) -> Trust {
        Trust { folders: Some(folders.iter().filter_map(|f| normalize(f)).collect()) }
    }

    /// Whether a list is kept at all.
    pub fn gated(&self) -> bool {
        self.folders.is_some()
    }

    fn listed(&self, path: &str) -> bool {
        match &self.folders {
            None => true,
            Some(list) => list.iter().any(|f| within(path, f)),
        }
    }

    /// Whether an agent may run in the folder `uri`, given the trees this
    /// host made. `Err` says why not, in words a client reads.
    ///
    /// A folder is trusted when no list is kept; when it is a listed folder
    /// or inside one; or when it is inside a tree this host made whose
    /// repository, or the folder it was cut from, is listed. A folder with
    /// no local path (`vscode-remote://…`) is refused once a list is kept:
    /// nothing on the list can name it.
    pub fn check<'a>(&self, uri: &str, trees: impl IntoIterator<Item = MadeTree<'a>>) -> Result<(), String> {
        if !self.gated() {
            return Ok(());
        }
        let shown = crate::ids::printable(uri);
        let Some(path) = path_of_uri(uri).and_then(|p| normalize(&p)) else {
            return Err(format!("{shown} is not a local folder this host's trusted folders can name"));
        };
        if self.listed(&path) {
            return Ok(());
        }
        let inherited = trees.into_iter().any(|t| {
            let in_tree = normalize(t.path).is_some_and(|tree| within(&path, &tree));
            let source = |f: Option<&str>| f.and_then(normalize).is_some_and(|f| self.listed(&f));
            in_tree && (source(t.repo) || source(Some(t.origin)))
        });
        if inherited {
            return Ok(());
        }
        Err(format!(
            "{shown} is not a trusted folder on this host: agents run only in the folders of trusted_folders (and the worktrees made from their repositories)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_compared_by_whole_components_after_dots_are_resolved() {
        assert_eq!(normalize("/src/app/../etc/./x//").as_deref(), Some("/src/etc/x"));
        assert_eq!(normalize("/../..").as_deref(), Some("/"));
        assert_eq!(normalize("src/app"), None);
        assert!(within("/src/app", "/src/app"));
        assert!(within("/src/app/pkg", "/src/app/"));
        assert!(!within("/src/app2", "/src/app"));
        assert!(!within("/src", "/src/app"));
        assert!(within("/anything", "/"));
    }

    #[test]
    fn a_tree_inherits_its_repositorys_trust_and_nothing_else_does() {
        let trust = Trust::of(&["/src/app".to_owned(), "relative".to_owned()]);
        assert_eq!(trust.folders.as_deref(), Some(&["/src/app".to_owned()][..]));
        let tree = MadeTree { path: "/src/app.worktrees/fix", repo: Some("/src/app"), origin: "/src/app" };
        let none: [MadeTree; 0] = [];
        assert!(trust.check("file:///src/app/pkg", none).is_ok());
        assert!(trust.check("file:///src/app/../etc", none).is_err());
        assert!(trust.check("file:///src/app.worktrees/fix", none).is_err(), "not without the tree");
        assert!(trust.check("file:///src/app.worktrees/fix/sub", [tree]).is_ok());
        assert!(trust.check("file:///src/app.worktrees/other", [tree]).is_err(), "a tree the host did not make");
        let foreign = MadeTree { path: "/src/lib.worktrees/fix", repo: Some("/src/lib"), origin: "/src/lib" };
        assert!(trust.check("file:///src/lib.worktrees/fix", [foreign]).is_err(), "its repository is not trusted");
        let from_pkg = MadeTree { path: "/t/app/x", repo: Some("/src"), origin: "/src/app/pkg" };
        assert!(trust.check("file:///t/app/x", [from_pkg]).is_ok(), "cut from a trusted folder");
        let e = trust.check("vscode-remote://box/src/app", none).expect_err("remote");
        assert!(e.contains("not a local folder"), "{e}");
        assert!(Trust::default().check("vscode-remote://box/x", none).is_ok(), "no list: every folder");
    }
}
