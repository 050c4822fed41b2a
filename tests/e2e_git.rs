//! Worktrees end to end (issue 6; Sessions page, "Configuration keys" and
//! "Isolation and worktrees"): the real daemon, the official client, and a
//! real git repository made with git2 in a temporary folder.

mod common;

use std::fs;
use std::path::Path;

use ahp::ahp_types::actions::StateAction;
use ahp::ahp_types::commands::{CreateSessionParams, DisposeSessionParams};
use ahp::ahp_types::ROOT_RESOURCE_URI;
use ahp::SubscriptionEvent;
use common::*;
use git2::{Repository, Signature};
use serde_json::{json, Value};

/// A repository on `main` with one commit, an ignored `node_modules` and
/// an ignored `.env`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_session_works_in_its_own_tree_and_dispose_removes_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let repo_dir = tmp.path().join("app");
    let repo = make_repo(&repo_dir, "node_modules/\n.env\n");
    fs::create_dir_all(repo_dir.join("node_modules/pkg")).expect("mkdir");
    fs::write(repo_dir.join("node_modules/pkg/index.js"), "module.exports = 1;\n").expect("write");
    let mut daemon = Daemon::start(&data);
    let (c, _init, mut root) = connect_init(&daemon.url, "e2e-git").await;

    // resolveSessionConfig on the repository's folder: the table in the
    // page's order, with its defaults.
    let resolved: Value = within(
        "resolveSessionConfig",
        c.request("resolveSessionConfig", json!({"channel": ROOT_RESOURCE_URI, "provider": "echo", "workingDirectory": file_uri(&repo_dir)})),
    )
    .await
    .expect("resolveSessionConfig");
    let keys: Vec<&str> = resolved["schema"]["properties"].as_object().expect("properties").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["isolation", "branch", "worktreeBranchPrefix", "worktreeIncludeFiles", "worktreeSymlinkFolders", "worktreeCreateNewBranch", "worktreeBranchTrack"],
        "{resolved}"
    );
    assert_eq!(resolved["values"]["isolation"], "folder");
    assert_eq!(resolved["values"]["branch"], "main");

    // A worktree session: created in the folder the client picked.
    let sid = format!("ahp-session:/{}", fresh_id());
    let mut config = resolved["values"].as_object().cloned().expect("values");
    config.insert("isolation".into(), json!("worktree"));
    config.insert("worktreeSymlinkFolders".into(), json!(["node_modules"]));
    config.insert("worktreeIncludeFiles".into(), json!([".env"]));
    let params = CreateSessionParams {
        channel: sid.clone(),
        meta: None,
        provider: Some("echo".to_owned()),
        working_directories: Some(vec![file_uri(&repo_dir)]),
        config: Some(config),
        active_client: None,
        progress_token: None,
    };
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(created, Value::Null);
    let (state, mut ssub) = subscribe_session(&c, &sid).await;
    assert_eq!(state.working_directories.as_deref(), Some(&[file_uri(&repo_dir)][..]), "the picked folder until the first send");
    let chat = default_chat(&state);
    let (mut chat_state, mut csub) = subscribe_chat(&c, &chat).await;

    // The first send makes the tree, and the turn runs there: the agent
    // writes a file into its working directory.
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/write notes.txt from the agent"))).await.expect("dispatch");
    let replaced = wait_for(&mut ssub, "session/workingDirectoryReplaced", |e| match e {
        SubscriptionEvent::Action(env) => match env.action {
            StateAction::SessionWorkingDirectoryReplaced(a) => Some(a),
            _ => None,
        },
        _ => None,
    })
    .await;
    assert_eq!(replaced.directory, file_uri(&repo_dir));
    let tree_path = ahpd_core::git::path_of_uri(&replaced.replacement).expect("a file URI");
    let tree = Path::new(&tree_path);
    assert!(tree_path.starts_with(&format!("{}.worktrees/", repo_dir.display())), "{tree_path}");
    follow_chat(&mut csub, &mut chat_state, "the /write turn", |env, _| is_turn_complete(env)).await;
    let reply = markdown(chat_state.turns.last().expect("a turn"));
    assert!(reply.contains("Echo: wrote notes.txt"), "{reply}");
    assert_eq!(fs::read_to_string(tree.join("notes.txt")).expect("in the tree"), "from the agent\n");
    assert!(!repo_dir.join("notes.txt").exists(), "the picked folder is untouched");
    assert!(fs::symlink_metadata(tree.join("node_modules")).expect("linked").file_type().is_symlink());
    assert_eq!(fs::read_to_string(tree.join(".env")).expect("copied"), "SECRET=1\n");
    // The link the host placed is not in the tree's `git status` (the
    // ignore pattern `node_modules/` names directories, and a link is not
    // one), so `git add -A` there cannot commit a link into the checkout;
    // the main checkout's status is unchanged by it.
    let status = |dir: &Path| -> String {
        let out = std::process::Command::new("git").arg("-C").arg(dir).args(["status", "--porcelain", "--untracked-files=all"]).output().expect("run git");
        assert!(out.status.success(), "git status in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let in_tree = status(tree);
    assert!(!in_tree.contains("node_modules"), "the placed link shows in the tree's status:\n{in_tree}");
    assert!(in_tree.contains("notes.txt"), "the agent's own file does show:\n{in_tree}");
    assert!(!status(&repo_dir).contains("node_modules"), "the main checkout's status is unchanged");

    // The row's changes: the tree's Branch Changes, the copy and the link not
    // among them.
    let changes = wait_for(&mut root, "the row's changes", |e| match e {
        SubscriptionEvent::SessionSummaryChanged(p) if p.session == sid => p.changes.changes,
        _ => None,
    })
    .await;
    assert_eq!((changes.files, changes.additions, changes.deletions), (Some(1), Some(1), Some(0)), "{changes:?}");
    let row = list(&c).await.into_iter().find(|s| s.resource == sid).expect("listed");
    assert_eq!(row.changes.and_then(|c| c.files), Some(1));

    // The person commits the agent's work on the tree's branch (a tree
    // with work nobody committed would stay on disk after a dispose).
    let tree_repo = Repository::open(tree).expect("open the tree");
    let branch = tree_repo.head().expect("head").shorthand().expect("branch").to_owned();
    {
        let mut index = tree_repo.index().expect("index");
        index.add_path(Path::new("notes.txt")).expect("add");
        index.write().expect("write index");
        let t = tree_repo.find_tree(index.write_tree().expect("tree")).expect("tree");
        let sig = Signature::now("Test", "test@example.com").expect("sig");
        let parent = tree_repo.head().expect("head").peel_to_commit().expect("parent");
        tree_repo.commit(Some("HEAD"), &sig, &sig, "the agent's notes", &t, &[&parent]).expect("commit");
    }

    // After a restart the row still says its counts, with nothing running.
    drop((c, root, ssub, csub));
    daemon.terminate();
    let daemon = Daemon::start(&data);
    let (c, _init, _root) = connect_init(&daemon.url, "e2e-git-2").await;
    let row = list(&c).await.into_iter().find(|s| s.resource == sid).expect("listed after a restart");
    assert_eq!(row.changes.as_ref().and_then(|c| c.files), Some(1), "{row:?}");
    assert_eq!(row.working_directories.as_deref(), Some(&[replaced.replacement.clone()][..]), "it works in its tree");

    // disposeSession removes the tree and the checkpoints; the originals
    // and the branch stay.
    let disposed: Value = within(
        "disposeSession",
        c.request("disposeSession", DisposeSessionParams { channel: sid.clone(), meta: None }),
    )
    .await
    .expect("disposeSession");
    assert_eq!(disposed, Value::Null);
    assert!(!tree.exists(), "the tree is gone");
    assert!(repo_dir.join("node_modules/pkg/index.js").exists());
    assert_eq!(fs::read_to_string(repo_dir.join(".env")).expect("original"), "SECRET=1\n");
    let repo = Repository::open(repo.path()).expect("reopen");
    assert!(repo.worktrees().expect("worktrees").is_empty(), "gone from the worktree list");
    assert!(repo.references_glob("refs/agents/*").expect("glob").next().is_none(), "checkpoints removed");
    let kept = repo.find_branch(&branch, git2::BranchType::Local).expect("the branch stays");
    let tip = kept.get().peel_to_tree().expect("tree");
    assert!(tip.get_path(Path::new("notes.txt")).is_ok(), "with the committed work");
}

/// In `dir`: a data folder's path (`data`), a repository on `main` (`app`,
/// `.env` ignored) and a folder that is no repository (`plain`).
fn repo_and_plain(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let repo_dir = dir.join("app");
    make_repo(&repo_dir, ".env\n");
    let plain = dir.join("plain");
    fs::create_dir_all(&plain).expect("mkdir");
    (dir.join("data"), repo_dir, plain)
}

/// The `config` a session's snapshot carries, as raw JSON (the order of
/// its schema's properties is part of what is checked).
async fn config_of(c: &ahp::Client, sid: &str) -> Value {
    let reply: Value = within("subscribe", c.request("subscribe", json!({"channel": sid}))).await.expect("subscribe");
    reply["snapshot"]["state"]["config"].clone()
}

fn property_keys(config: &Value) -> Vec<String> {
    config["schema"]["properties"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

/// Sessions page, "Configuration keys": a session reports the config it
/// was settled with when it was made, the table in the page's order, each
/// value taken only in its property's shape; outside a repository a folder
/// is all there is; and a session read back after a restart reports the
/// same config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reports_its_settled_config_and_keeps_it_across_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, repo_dir, plain) = repo_and_plain(tmp.path());
    let mut daemon = Daemon::start(&data);
    let (c, _init, _root) = connect_init(&daemon.url, "e2e-config").await;

    // In a repository: a worktree, a branch it does not have, a boolean
    // sent as a string, and a list of patterns.
    let sid = format!("ahp-session:/{}", fresh_id());
    let asked = json!({
        "isolation": "worktree", "branch": "no-such-branch", "worktreeCreateNewBranch": "yes",
        "worktreeIncludeFiles": [".env"], "worktreeSymlinkFolders": [".env", 3]
    });
    let created: Value = within(
        "createSession",
        c.request("createSession", json!({"channel": sid, "provider": "echo", "workingDirectories": [file_uri(&repo_dir)], "config": asked})),
    )
    .await
    .expect("createSession");
    assert_eq!(created, Value::Null);
    let config = config_of(&c, &sid).await;
    assert_eq!(
        property_keys(&config),
        ["isolation", "branch", "worktreeBranchPrefix", "worktreeIncludeFiles", "worktreeSymlinkFolders", "worktreeCreateNewBranch", "worktreeBranchTrack"],
        "{config}"
    );
    let values = &config["values"];
    assert_eq!(values["isolation"], "worktree", "{config}");
    assert_eq!(values["branch"], "main", "a branch the repository does not have leaves the default: {config}");
    assert_eq!(values["worktreeCreateNewBranch"], true, "{config}");
    assert_eq!(values["worktreeIncludeFiles"], json!([".env"]), "{config}");
    assert_eq!(values["worktreeSymlinkFolders"], json!([]), "{config}");
    assert_eq!(config["schema"]["properties"]["isolation"]["enum"], json!(["folder", "worktree"]));
    for (key, p) in config["schema"]["properties"].as_object().expect("properties") {
        assert_eq!(p["sessionMutable"], false, "{key}: {p}");
    }
    // The official client reads it as the protocol's SessionConfigState.
    let (state, _sub) = subscribe_session(&c, &sid).await;
    let typed = state.config.expect("the session's state carries its config");
    assert_eq!(typed.values.get("isolation"), Some(&json!("worktree")));
    assert_eq!(typed.schema.properties.len(), 7);

    // Outside a repository: isolation is a read-only folder, whatever was
    // asked, and no other key of the table is offered.
    let plain_sid = format!("ahp-session:/{}", fresh_id());
    let created: Value = within(
        "createSession",
        c.request("createSession", json!({"channel": plain_sid, "provider": "echo", "workingDirectories": [file_uri(&plain)], "config": {"isolation": "worktree"}})),
    )
    .await
    .expect("createSession");
    assert_eq!(created, Value::Null);
    let plain_config = config_of(&c, &plain_sid).await;
    assert_eq!(property_keys(&plain_config), ["isolation"], "{plain_config}");
    assert_eq!(plain_config["values"]["isolation"], "folder");
    assert_eq!(plain_config["schema"]["properties"]["isolation"]["readOnly"], true);

    // A turn makes the session one the store keeps (and its tree); after a
    // restart it reports the config it was made with.
    let (mut chat_state, mut csub) = subscribe_chat(&c, &default_chat(&subscribe_session(&c, &sid).await.0)).await;
    within("dispatch", c.dispatch(chat_state.resource.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "first turn", |env, _| is_turn_complete(env)).await;
    let before = config_of(&c, &sid).await;
    assert_eq!(before, config, "the first send does not change the config");
    drop(c);
    daemon.terminate();
    let daemon = Daemon::start(&data);
    let (c, _init, _root) = connect_init(&daemon.url, "e2e-config-2").await;
    let after = config_of(&c, &sid).await;
    assert_eq!(after, config, "read back after a restart");
    assert_eq!(property_keys(&after), property_keys(&config));
}

/// Sends a turn on a session's default chat and waits for it to complete.
async fn one_turn(c: &ahp::Client, sid: &str, turn_id: &str) {
    let (state, _ssub) = subscribe_session(c, sid).await;
    let (mut chat_state, mut csub) = subscribe_chat(c, &default_chat(&state)).await;
    within("dispatch", c.dispatch(chat_state.resource.clone(), user_turn(turn_id, "hello"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, turn_id, |env, _| is_turn_complete(env)).await;
}

/// Sessions page, "Isolation and worktrees": "A worktree the host made is
/// trusted when the repository it came from is." With `--trusted-folder`,
/// a session is made only in a trusted folder; the tree a worktree session's
/// first send makes (beside the repository, outside the trusted folder) is
/// trusted through its repository: the session works there, is woken there
/// after a restart, and another session can be made in it, while a folder
/// beside it the host did not make is refused. Once the repository is no
/// longer trusted, the session is not woken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_the_host_made_is_trusted_when_its_repository_is() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, repo_dir, plain) = repo_and_plain(tmp.path());
    let trusted = repo_dir.to_str().expect("utf-8 path").to_owned();
    let mut daemon = Daemon::start_with(&data, &["--trusted-folder", &trusted]);
    let (c, _init, _root) = connect_init(&daemon.url, "e2e-trust").await;
    let create_in = |folder: &Path, config: Value| {
        let sid = format!("ahp-session:/{}", fresh_id());
        let params = json!({"channel": sid, "provider": "echo", "workingDirectories": [file_uri(folder)], "config": config});
        (sid, params)
    };

    // A folder that is not trusted: no session.
    let (_, params) = create_in(&plain, json!({}));
    let e = rpc_error(within("createSession", c.request::<_, Value>("createSession", params)).await);
    assert_eq!(e.code, -32009, "{e:?}");
    assert!(e.message.contains("not a trusted folder"), "{e:?}");

    // A worktree session in the trusted repository: its first send makes
    // the tree beside the repository and the turn runs there.
    let (sid, params) = create_in(&repo_dir, json!({"isolation": "worktree"}));
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(created, Value::Null);
    one_turn(&c, &sid, "t1").await;
    let tree_uri = subscribe_session(&c, &sid).await.0.working_directories.and_then(|d| d.first().cloned()).expect("a folder");
    let tree = tmp.path().join("app.worktrees");
    assert!(tree_uri.starts_with(&file_uri(&tree)), "the tree is beside the repository: {tree_uri}");

    // Another session may be made in the tree; not in a folder beside it
    // that the host did not make.
    let params = json!({"channel": format!("ahp-session:/{}", fresh_id()), "provider": "echo", "workingDirectories": [tree_uri]});
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("a session in the tree");
    assert_eq!(created, Value::Null);
    let by_hand = tree.join("by-hand");
    fs::create_dir_all(&by_hand).expect("mkdir");
    let (_, params) = create_in(&by_hand, json!({}));
    let e = rpc_error(within("createSession", c.request::<_, Value>("createSession", params)).await);
    assert_eq!(e.code, -32009, "{e:?}");

    // After a restart the tree is still the host's: the session is woken in
    // it and runs a turn there.
    drop(c);
    daemon.terminate();
    let mut daemon = Daemon::start_with(&data, &["--trusted-folder", &trusted]);
    let (c, _init, _root) = connect_init(&daemon.url, "e2e-trust-2").await;
    one_turn(&c, &sid, "t2").await;
    assert_eq!(subscribe_session(&c, &sid).await.0.working_directories.and_then(|d| d.first().cloned()), Some(tree_uri));

    // Trusting only another folder: the session is not woken.
    drop(c);
    daemon.terminate();
    let plain_str = plain.to_str().expect("utf-8 path").to_owned();
    let daemon = Daemon::start_with(&data, &["--trusted-folder", &plain_str]);
    let (c, _init, _root) = connect_init(&daemon.url, "e2e-trust-3").await;
    let e = rpc_error(within("subscribe", c.request::<_, Value>("subscribe", json!({"channel": sid}))).await);
    assert!(e.message.contains("not woken") && e.message.contains("not a trusted folder"), "{e:?}");
}

/// The paths `git worktree list` names for the repository at `dir`.
fn worktree_paths(dir: &Path) -> Vec<String> {
    let out = std::process::Command::new("git").arg("-C").arg(dir).args(["worktree", "list", "--porcelain"]).output().expect("run git");
    assert!(out.status.success(), "git worktree list: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.strip_prefix("worktree ").map(str::to_owned)).collect()
}

/// Issue 19: "A tree is taken off the disk only when no session, detached
/// handle or agent uses it, across restarts." S1 is a worktree session;
/// S2 is made in S1's tree and runs turns there. Disposing S1 keeps the
/// tree (on disk and in `git worktree list`), S2 goes on working in it
/// after a restart (still trusted as the host's tree), and disposing S2,
/// its last user, removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_two_sessions_work_in_stays_until_the_last_of_them_is_disposed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, repo_dir, _plain) = repo_and_plain(tmp.path());
    let trusted = repo_dir.to_str().expect("utf-8 path").to_owned();
    let mut daemon = Daemon::start_with(&data, &["--trusted-folder", &trusted]);
    let (c, _init, _root) = connect_init(&daemon.url, "e2e-shared-tree").await;

    let s1 = format!("ahp-session:/{}", fresh_id());
    let params = json!({"channel": s1, "provider": "echo", "workingDirectories": [file_uri(&repo_dir)], "config": {"isolation": "worktree"}});
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(created, Value::Null);
    one_turn(&c, &s1, "t1").await;
    let tree_uri = subscribe_session(&c, &s1).await.0.working_directories.and_then(|d| d.first().cloned()).expect("a folder");
    let tree_path = ahpd_core::git::path_of_uri(&tree_uri).expect("a file URI");
    let tree = Path::new(&tree_path).to_path_buf();
    assert!(worktree_paths(&repo_dir).contains(&tree_path), "the tree is a worktree");

    // S2 works in S1's tree.
    let s2 = format!("ahp-session:/{}", fresh_id());
    let params = json!({"channel": s2, "provider": "echo", "workingDirectories": [tree_uri]});
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("a session in the tree");
    assert_eq!(created, Value::Null);
    one_turn(&c, &s2, "t1").await;

    // Disposing S1 keeps the tree: S2 works in it.
    let disposed: Value = within("disposeSession", c.request("disposeSession", DisposeSessionParams { channel: s1.clone(), meta: None })).await.expect("disposeSession");
    assert_eq!(disposed, Value::Null);
    assert!(tree.join(".git").is_file(), "the tree is still a checkout (its .git file is there)");
    assert!(worktree_paths(&repo_dir).contains(&tree_path), "still in git's worktree list");
    one_turn(&c, &s2, "t2").await;

    // After a restart S2 is woken in the tree (it is still the host's, so
    // trusted) and runs a turn there.
    drop(c);
    daemon.terminate();
    let daemon = Daemon::start_with(&data, &["--trusted-folder", &trusted]);
    let (c, _init, _root) = connect_init(&daemon.url, "e2e-shared-tree-2").await;
    one_turn(&c, &s2, "t3").await;
    assert!(worktree_paths(&repo_dir).contains(&tree_path));

    // Its last user disposed, the tree goes.
    let disposed: Value = within("disposeSession", c.request("disposeSession", DisposeSessionParams { channel: s2.clone(), meta: None })).await.expect("disposeSession");
    assert_eq!(disposed, Value::Null);
    assert!(!tree.exists(), "the tree is gone with its last user");
    assert!(!worktree_paths(&repo_dir).contains(&tree_path), "gone from git's worktree list");
    drop(daemon);
}
