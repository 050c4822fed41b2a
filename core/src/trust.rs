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

/// One tree this host made, and the repository it is a checkout of: what
/// a tree inherits its trust from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadeTree<'a> {
    /// The tree's folder.
    pub path: &'a str,
    /// The top folder of the repository's checkout it was cut from; a path
    /// inside the tree is trusted when the same path inside this folder is.
    /// `None` when not known (a record written before it was kept): such a
    /// tree passes on no trust.
    pub repo: Option<&'a str>,
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
    /// or inside one; or when it is inside a tree this host made and the
    /// same folder of the repository the tree was cut from is trusted (a
    /// tree cut from a trusted repository is trusted whole; one cut while
    /// only `<repo>/pkg` is trusted is trusted at `<tree>/pkg` alone). A
    /// folder with no local path (`vscode-remote://…`) is refused once a
    /// list is kept: nothing on the list can name it.
    pub fn check(&self, uri: &str, trees: &[MadeTree<'_>]) -> Result<(), String> {
        if !self.gated() {
            return Ok(());
        }
        let shown = crate::ids::printable_up_to(uri, crate::ids::PATH_SHOWN_MAX);
        let Some(path) = path_of_uri(uri).and_then(|p| normalize(&p)) else {
            return Err(format!("{shown} is not a local folder this host's trusted folders can name"));
        };
        if self.trusts(&path, trees, trees.len()) {
            return Ok(());
        }
        Err(format!(
            "{shown} is not a trusted folder on this host: agents run only in the folders of trusted_folders (and the worktrees made from their repositories)"
        ))
    }

    /// Whether normalized `path` is listed, or maps through a made tree to
    /// a trusted path; `hops` bounds the chain of trees (a tree cut from a
    /// folder inside another tree).
    fn trusts(&self, path: &str, trees: &[MadeTree<'_>], hops: usize) -> bool {
        if self.listed(path) {
            return true;
        }
        if hops == 0 {
            return false;
        }
        trees.iter().any(|t| {
            let mapped = t.repo.and_then(|repo| crate::git::rebase_path(path, t.path, repo));
            mapped.is_some_and(|m| self.trusts(&m, trees, hops - 1))
        })
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
    fn a_tree_inherits_the_trust_of_the_same_folder_of_its_repository_and_nothing_else_does() {
        let trust = Trust::of(&["/src/app".to_owned(), "/mono/pkg".to_owned(), "relative".to_owned()]);
        assert_eq!(trust.folders.as_deref(), Some(&["/src/app".to_owned(), "/mono/pkg".to_owned()][..]));
        let tree = MadeTree { path: "/src/app.worktrees/fix", repo: Some("/src/app") };
        assert!(trust.check("file:///src/app/pkg", &[]).is_ok());
        assert!(trust.check("file:///src/app/../etc", &[]).is_err());
        assert!(trust.check("file:///src/app.worktrees/fix", &[]).is_err(), "not without the tree");
        assert!(trust.check("file:///src/app.worktrees/fix/sub", &[tree]).is_ok());
        assert!(trust.check("file:///src/app.worktrees/other", &[tree]).is_err(), "a tree the host did not make");
        let foreign = MadeTree { path: "/src/lib.worktrees/fix", repo: Some("/src/lib") };
        assert!(trust.check("file:///src/lib.worktrees/fix", &[foreign]).is_err(), "its repository is not trusted");
        let unknown = MadeTree { path: "/src/app.worktrees/old", repo: None };
        assert!(trust.check("file:///src/app.worktrees/old", &[unknown]).is_err(), "a tree of unknown origin passes nothing on");
        // Only the trusted part of a monorepo: the same part of its tree.
        let mono = MadeTree { path: "/t/mono/x", repo: Some("/mono") };
        assert!(trust.check("file:///t/mono/x/pkg/src", &[mono]).is_ok());
        assert!(trust.check("file:///t/mono/x", &[mono]).is_err(), "the tree's top is the whole repository");
        assert!(trust.check("file:///t/mono/x/other", &[mono]).is_err());
        // A tree cut from inside another tree: the chain leads back.
        let second = MadeTree { path: "/src/app.worktrees/second", repo: Some("/src/app.worktrees/fix") };
        assert!(trust.check("file:///src/app.worktrees/second/a", &[second, tree]).is_ok());
        let looped = [MadeTree { path: "/a", repo: Some("/b") }, MadeTree { path: "/b", repo: Some("/a") }];
        assert!(trust.check("file:///a/x", &looped).is_err(), "a loop ends");
        let e = trust.check("vscode-remote://box/src/app", &[]).expect_err("remote");
        assert!(e.contains("not a local folder"), "{e}");
        assert!(Trust::default().check("vscode-remote://box/x", &[]).is_ok(), "no list: every folder");
    }
}

/// The trees this host made, each with the repository it is a checkout
/// of: every session's own tree (`records`), the ones sessions kept from
/// folders they moved away from, and the window's detached trees
/// (`window`). What [`Trust::check`] lets a tree inherit trust from.
pub fn made_trees<'a>(
    records: impl Iterator<Item = &'a crate::record::SessionRecord>,
    window: impl Iterator<Item = &'a crate::git::WorktreeRecord>,
) -> Vec<MadeTree<'a>> {
    fn known(w: &crate::git::WorktreeRecord) -> Option<&str> {
        (!w.repo_root.is_empty()).then_some(w.repo_root.as_str())
    }
    let mut trees = Vec::new();
    for record in records {
        if let Some(t) = &record.in_tree {
            trees.push(MadeTree { path: &t.path, repo: Some(&t.repo_root) });
        }
        for t in &record.shared_trees {
            trees.push(MadeTree { path: &t.tree.path, repo: known(&t.tree).or(Some(t.repo.as_str())) });
        }
        let Some(git) = record.git.as_ref() else { continue };
        if let Some(w) = &git.worktree {
            trees.push(MadeTree { path: &w.path, repo: known(w).or(git.repo_root.as_deref()) });
        }
        for w in git.former.iter().filter_map(|f| f.worktree.as_ref()) {
            trees.push(MadeTree { path: &w.path, repo: known(w) });
        }
    }
    for tree in window {
        trees.push(MadeTree { path: &tree.path, repo: known(tree) });
    }
    trees
}
