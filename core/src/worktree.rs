//! Naming rules for worktrees and checkpoints (Sessions page, "Isolation and
//! worktrees"): which branch names git would take, the folder a branch's tree
//! goes in, where trees go on disk, and the names of a session's checkpoint
//! refs, and the names a tree is tried under. Pure functions: the shell
//! asks git only with names checked and chosen here.

use hmac::digest::Digest;
use sha2::Sha256;

/// Why a branch name was refused, in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadName(pub String);

impl std::fmt::Display for BadName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks `name` the way `git check-ref-format --branch` does, before any
/// git call: not empty, not `-…`, not `@` or `HEAD`; no `..`, `@{`, `//`,
/// control characters, space, `~ ^ : ? * [ \`; no component that starts
/// with `.` or ends with `.lock`; not starting or ending with `/`, not
/// ending with `.`. Errors: [`BadName`] naming the first rule broken.
pub fn check_branch_name(name: &str) -> Result<(), BadName> {
    let bad = |why: &str| Err(BadName(format!("{} is not a valid branch name: {why}", crate::ids::printable(name))));
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 255 {
        return bad("it is longer than 255 bytes");
    }
    if name.starts_with('-') {
        return bad("it starts with '-'");
    }
    if name == "@" || name == "HEAD" {
        return bad("it is reserved");
    }
    if let Some(c) = name.chars().find(|c| c.is_ascii_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\')) {
        return bad(&format!("it contains {c:?}"));
    }
    if name.contains("..") {
        return bad("it contains '..'");
    }
    if name.contains("@{") {
        return bad("it contains '@{'");
    }
    if name.starts_with('/') || name.ends_with('/') {
        return bad("it starts or ends with '/'");
    }
    if name.contains("//") {
        return bad("it contains '//'");
    }
    if name.ends_with('.') {
        return bad("it ends with '.'");
    }
    for component in name.split('/') {
        if component.starts_with('.') {
            return bad("a component starts with '.'");
        }
        if component.ends_with(".lock") {
            return bad("a component ends with '.lock'");
        }
    }
    Ok(())
}

/// Lowercase hex of the first `bytes` bytes of SHA-256 over `text`.
fn short_hash(text: &str, bytes: usize) -> String {
    Sha256::digest(text.as_bytes()).iter().take(bytes).map(|b| format!("{b:02x}")).collect()
}

/// The folder name for a worktree whose branch is `branch` (already checked
/// by [`check_branch_name`]). A name with no `/` is its own folder; one with
/// `/` flattens them to `-` and adds 8 hex digits of the branch's hash, so
/// `feature/login` and `feature-login` get distinct folders.
pub fn folder_name(branch: &str) -> String {
    if branch.contains('/') {
        format!("{}-{}", branch.replace('/', "-"), short_hash(branch, 4))
    } else {
        branch.to_owned()
    }
}

/// Most names tried for one tree ([`tree_names`]): a plan offers the
/// first name and this many less one with a suffix.
pub const NAME_TRIES: u32 = 50;

/// The names a tree is tried under, in order (Sessions page, "Isolation
/// and worktrees": a tree never takes a branch or folder that is there
/// already). With a new branch: `new_branch` in [`folder_name`] of it, then
/// `new_branch-2`, `new_branch-3`, … each in its own folder. Checking out
/// `base` as it is: that branch in `folder_name(base)`, then
/// `folder_name(base)-2`, …. [`NAME_TRIES`] names in all; none when there
/// is no new branch and no `base` (nothing to check out). `new_branch` and
/// `base` were checked by [`check_branch_name`]; a `-<n>` suffix keeps a
/// name valid.
pub fn tree_names(create_new_branch: bool, new_branch: &str, base: Option<&str>) -> Vec<crate::git::TreeName> {
    use crate::git::TreeName;
    let suffixed = |name: &str, i: u32| if i == 1 { name.to_owned() } else { format!("{name}-{i}") };
    if create_new_branch {
        (1..=NAME_TRIES)
            .map(|i| {
                let branch = suffixed(new_branch, i);
                TreeName { folder: folder_name(&branch), branch }
            })
            .collect()
    } else {
        let Some(base) = base else { return Vec::new() };
        let folder = folder_name(base);
        (1..=NAME_TRIES).map(|i| TreeName { branch: base.to_owned(), folder: suffixed(&folder, i) }).collect()
    }
}

/// Where a tree named `name` for the repository whose top folder is
/// `repo_root` goes: `<repo>.worktrees/<name>` beside the repository, or
/// `<root>/<repo>/<name>` under `--worktrees-root <root>`. Paths are plain
/// strings with `/` separators; `repo_root` has no trailing `/`.
pub fn tree_path(repo_root: &str, worktrees_root: Option<&str>, name: &str) -> String {
    let repo_root = repo_root.trim_end_matches('/');
    match worktrees_root {
        Some(root) => {
            let repo = repo_root.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or("repo");
            format!("{}/{repo}/{name}", root.trim_end_matches('/'))
        }
        None => format!("{repo_root}.worktrees/{name}"),
    }
}

/// A session id made safe for one ref component: characters outside
/// `[A-Za-z0-9_-]` become `_`, and when anything changed 8 hex digits of the
/// original's hash are added so two ids never share a name. The result
/// passes `check-ref-format` as one component.
pub fn sanitise_session_id(id: &str) -> String {
    let cleaned: String = id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let cleaned: String = cleaned.chars().take(64).collect();
    if cleaned == id && !cleaned.is_empty() && !cleaned.starts_with('-') {
        cleaned
    } else {
        format!("s{}_{}", cleaned, short_hash(id, 4))
    }
}

/// The ref prefix every checkpoint of session `id` lives under:
/// `refs/agents/<sanitised id>/checkpoints/`.
pub fn checkpoint_prefix(id: &str) -> String {
    format!("refs/agents/{}/checkpoints/", sanitise_session_id(id))
}

/// The ref of session `id`'s checkpoint after turn `n` (`turn/0` is the
/// tree the session started from).
pub fn checkpoint_ref(id: &str, n: u32) -> String {
    format!("{}turn/{n}", checkpoint_prefix(id))
}

/// The branch a worktree session creates: `prefix` then `agents/<sanitised
/// id>`. Errors when the prefix makes it a name git would refuse.
pub fn session_branch(prefix: &str, id: &str) -> Result<String, BadName> {
    let name = format!("{prefix}agents/{}", sanitise_session_id(id));
    check_branch_name(&name)?;
    Ok(name)
}

/// Whether `rel` (a path relative to the repository's top, `/`-separated)
/// matches `pattern` in `.gitignore` syntax, as `worktreeIncludeFiles` and
/// `worktreeSymlinkFolders` are written: a pattern with a `/` before its
/// end is anchored at the top, one without matches a name at any depth; a
/// trailing `/` matches folders only (`is_dir`); `*` and `?` stop at `/`,
/// `**` crosses it. Negated (`!`) and comment (`#`) patterns match nothing.
pub fn pattern_matches(pattern: &str, rel: &str, is_dir: bool) -> bool {
    let pattern = pattern.trim();
    if pattern.is_empty() || pattern.starts_with('!') || pattern.starts_with('#') {
        return false;
    }
    let (pattern, dir_only) = match pattern.strip_suffix('/') {
        Some(p) => (p, true),
        None => (pattern, false),
    };
    if dir_only && !is_dir {
        return false;
    }
    let anchored = pattern.contains('/');
    let pattern = pattern.trim_start_matches('/');
    if anchored {
        glob(pattern.as_bytes(), rel.as_bytes())
    } else {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        glob(pattern.as_bytes(), name.as_bytes())
    }
}

/// Glob match with `*`, `?` (not crossing `/`) and `**` (crossing it).
fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some(b'*') if p.get(1) == Some(&b'*') => {
            let rest = p[2..].strip_prefix(b"/").unwrap_or(&p[2..]);
            (0..=s.len()).any(|i| (i == 0 || s[i - 1] == b'/' || rest.is_empty()) && glob(rest, &s[i..]))
        }
        Some(b'*') => (0..=s.len()).take_while(|&i| i == 0 || s[i - 1] != b'/').any(|i| glob(&p[1..], &s[i..])),
        Some(b'?') => s.first().is_some_and(|&c| c != b'/') && glob(&p[1..], &s[1..]),
        Some(&c) => s.first() == Some(&c) && glob(&p[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_git_refuses() {
        for bad in ["a..b", "-x", "feat/", "feat//x", "", "/x", "x.", "a/.b", "x.lock", "a b", "a~b", "a^b", "a:b", "a?b", "a*b", "a[b", "a\\b", "a@{b", "@", "HEAD", "a\u{7}b"] {
            assert!(check_branch_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["main", "feature/login", "feature-login", "a/b/c", "v1.2", "x@y", "a-"] {
            assert!(check_branch_name(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn patterns_match_like_gitignore() {
        assert!(pattern_matches("node_modules", "node_modules", true));
        assert!(pattern_matches("node_modules/", "web/node_modules", true));
        assert!(!pattern_matches("node_modules/", "node_modules", false));
        assert!(pattern_matches(".env", ".env", false));
        assert!(pattern_matches(".env*", ".env.local", false));
        assert!(pattern_matches("/config/*.key", "config/a.key", false));
        assert!(!pattern_matches("/config/*.key", "x/config/a.key", false));
        assert!(pattern_matches("**/secrets.json", "a/b/secrets.json", false));
        assert!(!pattern_matches("!x", "x", false));
    }

    #[test]
    fn folders_flatten_without_colliding() {
        let a = folder_name("feature/login");
        let b = folder_name("feature-login");
        assert_ne!(a, b);
        assert!(!a.contains('/'));
        assert_ne!(folder_name("a/-b"), folder_name("a-/b"));
        assert_eq!(folder_name("main"), "main");
    }

    #[test]
    fn tree_names_are_tried_with_suffixes_in_order() {
        let names = tree_names(true, "agents/s1", Some("main"));
        assert_eq!(names.len(), NAME_TRIES as usize);
        assert_eq!((names[0].branch.as_str(), names[0].folder.clone()), ("agents/s1", folder_name("agents/s1")));
        assert_eq!((names[1].branch.as_str(), names[1].folder.clone()), ("agents/s1-2", folder_name("agents/s1-2")));
        assert_eq!(names[49].branch, "agents/s1-50");
        assert!(names.iter().all(|n| check_branch_name(&n.branch).is_ok()));
        let same = tree_names(false, "agents/s1", Some("feature/x"));
        assert!(same.iter().all(|n| n.branch == "feature/x"), "the base is checked out as it is");
        assert_eq!(same[0].folder, folder_name("feature/x"));
        assert_eq!(same[2].folder, format!("{}-3", folder_name("feature/x")));
        assert!(tree_names(false, "agents/s1", None).is_empty(), "no branch to check out");
    }

    #[test]
    fn trees_go_beside_the_repo_or_under_the_root() {
        assert_eq!(tree_path("/src/app", None, "x"), "/src/app.worktrees/x");
        assert_eq!(tree_path("/src/app/", Some("/wt/"), "x"), "/wt/app/x");
    }

    #[test]
    fn checkpoint_refs_pass_check_ref_format() {
        for id in ["ahp-session@abc", "x/y", "..", "-a", "a.lock", "ünï"] {
            let r = checkpoint_ref(id, 3);
            let branchish = r.trim_start_matches("refs/");
            assert!(check_branch_name(branchish).is_ok(), "{r}");
            assert!(r.ends_with("/checkpoints/turn/3"));
        }
        assert_ne!(sanitise_session_id("a@b"), sanitise_session_id("a_b"));
        assert_eq!(sanitise_session_id("plain-id_1"), "plain-id_1");
    }
}
