//! The window's own trees end to end (issue 6; Sessions page, "Isolation
//! and worktrees": "The window has five requests of its own"): the real
//! daemon, the official client's raw request API, and a real git
//! repository made with git2 in a temporary folder.

mod common;

use std::fs;
use std::path::Path;

use ahp::ahp_types::commands::CreateSessionParams;
use ahp::ahp_types::state::SessionLifecycle;
use common::*;
use git2::{BranchType, Repository};
use serde_json::{json, Value};

const CREATE: &str = "vscode/createAgentHostDetachedWorktree";
const CLAIM: &str = "vscode/claimAgentHostDetachedWorktree";
const ARCHIVE: &str = "vscode/setAgentHostDetachedWorktreeArchived";
const DELETE: &str = "vscode/deleteAgentHostDetachedWorktree";
const RECONCILE: &str = "vscode/reconcileAgentHostDetachedWorktrees";

/// A repository on `main` with one commit, and an ignored `.env`.
/// The branch checked out in git's worktree entry whose folder is `path`,
/// or `None` when git lists no worktree there.
fn listed_branch(repo: &Repository, path: &Path) -> Option<String> {
    let names = repo.worktrees().expect("worktrees");
    (0..names.len()).filter_map(|i| names.get(i).ok().flatten()).find_map(|name| {
        let wt = repo.find_worktree(name).ok()?;
        (wt.path() == path && wt.validate().is_ok()).then(|| {
            let tree = Repository::open(path).expect("open the tree");
            let head = tree.head().expect("head");
            head.shorthand().expect("branch").to_owned()
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_makes_archives_restores_deletes_and_reconciles_its_own_trees() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let repo_dir = tmp.path().join("app");
    let repo = make_repo(&repo_dir, ".env\n");
    let daemon = Daemon::start(&data);
    let (c, init, _root) = connect_init(&daemon.url, "e2e-detached").await;
    let meta = init.meta.clone().unwrap_or_default();
    assert_eq!(meta.get("vscode.detachedWorktrees"), Some(&json!(true)), "{meta:?}");

    // A creating worktree session in the repository.
    let sid = format!("ahp-session:/{}", fresh_id());
    let config = json!({"isolation": "worktree", "branch": "main", "worktreeIncludeFiles": [".env"]});
    let params = CreateSessionParams {
        channel: sid.clone(),
        meta: None,
        provider: Some("echo".to_owned()),
        working_directories: Some(vec![file_uri(&repo_dir)]),
        config: config.as_object().cloned(),
        active_client: None,
        progress_token: None,
    };
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(created, Value::Null);

    // Create: a real tree, registered with git, with the repository's
    // content, on an agents/ branch; the session is still creating.
    let made: Value = within(CREATE, c.request(CREATE, json!({"session": sid, "prompt": "Fix the login page"}))).await.expect("create");
    let handle = made["handle"].as_str().expect("handle").to_owned();
    let tree_path = ahpd_core::git::path_of_uri(made["resource"].as_str().expect("resource")).expect("a file URI");
    let tree = Path::new(&tree_path);
    assert!(tree_path.starts_with(&format!("{}.worktrees/", repo_dir.display())), "{tree_path}");
    assert_eq!(fs::read_to_string(tree.join("README.md")).expect("checked out"), "hello\n");
    assert_eq!(fs::read_to_string(tree.join(".env")).expect("copied"), "SECRET=1\n");
    let branch = listed_branch(&repo, tree).expect("in git worktree list");
    assert_eq!(branch, "agents/fix-the-login-page");
    let (state, _ssub) = subscribe_session(&c, &sid).await;
    assert_eq!(state.lifecycle, SessionLifecycle::Creating, "the session is still creating");
    assert_eq!(state.working_directories.as_deref(), Some(&[file_uri(&repo_dir)][..]), "the session is untouched");

    // A second tree for the same session, on a branch of its own.
    let second: Value = within(CREATE, c.request(CREATE, json!({"session": sid, "prompt": "Fix the login page"}))).await.expect("create 2");
    let second_handle = second["handle"].as_str().expect("handle").to_owned();
    assert_ne!(second_handle, handle);
    let second_path = ahpd_core::git::path_of_uri(second["resource"].as_str().expect("resource")).expect("a file URI");
    assert_ne!(second_path, tree_path);
    assert!(listed_branch(&repo, Path::new(&second_path)).is_some_and(|b| b.starts_with("agents/fix-the-login-page") && b != branch));

    let claimed: Value = within(CLAIM, c.request(CLAIM, json!({"handle": handle}))).await.expect("claim");
    assert_eq!(claimed, json!({}));

    // Archive: gone from the disk and git's list, the branch kept.
    let archived: Value = within(ARCHIVE, c.request(ARCHIVE, json!({"handle": handle, "archived": true}))).await.expect("archive");
    assert_eq!(archived, json!({}));
    assert!(!tree.exists(), "the tree is off the disk");
    assert!(listed_branch(&repo, tree).is_none(), "and out of git worktree list");
    assert!(repo.find_branch(&branch, BranchType::Local).is_ok(), "the branch stays");

    // Unarchive: back at the same path on the same branch.
    let restored: Value = within(ARCHIVE, c.request(ARCHIVE, json!({"handle": handle, "archived": false}))).await.expect("unarchive");
    assert_eq!(restored, json!({}));
    assert_eq!(fs::read_to_string(tree.join("README.md")).expect("back"), "hello\n");
    assert_eq!(listed_branch(&repo, tree).as_deref(), Some(branch.as_str()));

    // Reconcile: the named handle and a fresh omitted one both stay.
    let reconciled: Value = within(
        RECONCILE,
        c.request(RECONCILE, json!({"scope": file_uri(&repo_dir).to_uppercase(), "activeHandles": [handle]})),
    )
    .await
    .expect("reconcile");
    assert_eq!(reconciled, json!({}));
    assert!(tree.exists() && Path::new(&second_path).exists());
    let again: Value = within(CLAIM, c.request(CLAIM, json!({"handle": second_handle}))).await.expect("omitted stays claimable");
    assert_eq!(again, json!({}));

    // Delete: gone, the handle forgotten; a second delete is still fine.
    let deleted: Value = within(DELETE, c.request(DELETE, json!({"handle": handle}))).await.expect("delete");
    assert_eq!(deleted, json!({}));
    assert!(!tree.exists());
    assert!(listed_branch(&repo, tree).is_none());
    assert!(repo.find_branch(&branch, BranchType::Local).is_ok(), "the branch stays");
    let unknown = within(CLAIM, c.request::<_, Value>(CLAIM, json!({"handle": handle}))).await;
    let e = rpc_error(unknown);
    assert_eq!(e.code, -32602);
    assert!(e.message.contains("Unknown detached worktree handle"), "{}", e.message);
    let twice: Value = within(DELETE, c.request(DELETE, json!({"handle": handle}))).await.expect("delete again");
    assert_eq!(twice, json!({}));

    // Uncommitted work keeps a tree on disk, and the reply says so.
    fs::write(Path::new(&second_path).join("draft.txt"), "mine\n").expect("write");
    let kept: Value = within(DELETE, c.request(DELETE, json!({"handle": second_handle}))).await.expect("delete dirty");
    assert_eq!(kept["_meta"]["ahpd.treeKept"], true, "{kept}");
    assert!(Path::new(&second_path).join("draft.txt").exists());

    // A session that has not asked for a worktree gets none.
    let bad = within(CREATE, c.request::<_, Value>(CREATE, json!({"session": "ahp-session:/nope", "prompt": "x"}))).await;
    assert_eq!(rpc_error(bad).code, -32602);
}
