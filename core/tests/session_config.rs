//! The session config table and a session's git work, as a client sees it
//! (Sessions page, "Configuration keys", "Isolation and worktrees", and
//! `changes` in "The state a session reports"). Git itself is answered by
//! hand here; `shell/src/exec/git.rs` tests it on real repositories.

use ahpd_core::git::{Changes, GitCmd, GitResult, RepoFacts, WorktreeRecord};
use ahpd_core::grants::{token_hash, Membership, Role, User, UsersDirectory};
use ahpd_core::{BackendCmd, Config, Outcome, StoreCmd};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

fn repo_facts() -> RepoFacts {
    RepoFacts {
        root: Some("/src/app".into()),
        current_branch: Some("dev".into()),
        default_branch: Some("develop".into()),
        branches: vec!["dev".into(), "develop".into(), "feature/login".into(), "main".into()],
        not_directories: Vec::new(),
        git_error: None,
    }
}

fn keys(reply: &Value) -> Vec<String> {
    reply["result"]["schema"]["properties"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

/// Sends `resolveSessionConfig` for `folder`, answers git's question with
/// `facts`, and returns the reply.
fn resolve(h: &mut Harness, conn: u64, folder: &str, config: Value, facts: RepoFacts) -> Value {
    let id = h.send_request(conn, "resolveSessionConfig", json!({"channel": "ahp-root://", "provider": "echo", "workingDirectory": folder, "config": config}));
    assert!(h.take_reply(conn, id).is_none(), "answered before git was asked");
    let cmds = h.git_cmds();
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    assert!(matches!(&cmds[0].1, GitCmd::Inspect { folder, .. } if folder == "/src/app"), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Git(GitResult::Repo(facts)));
    h.take_reply(conn, id).expect("reply")
}

fn people() -> Config {
    let user = User {
        id: "ana".into(),
        token_sha256: token_hash("tok"),
        role: Role::Member,
        administrator: false,
        memberships: vec![
            Membership { team: "core".into(), project: "ahpd".into(), primary: false },
            Membership { team: "web".into(), project: "site".into(), primary: true },
        ],
    };
    Config { users: Some(UsersDirectory { users: vec![user], plugins: Vec::new() }), ..Config::default() }
}

#[test]
fn properties_come_in_the_pages_order_with_its_defaults() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let r = resolve(&mut h, 1, "file:///src/app", json!({}), repo_facts());
    assert_eq!(
        keys(&r),
        ["isolation", "branch", "worktreeBranchPrefix", "worktreeIncludeFiles", "worktreeSymlinkFolders", "worktreeCreateNewBranch", "worktreeBranchTrack"],
        "{r}"
    );
    let props = &r["result"]["schema"]["properties"];
    for (k, p) in props.as_object().expect("props") {
        assert_eq!(p["sessionMutable"], false, "{k}");
    }
    assert_eq!(props["isolation"]["enum"], json!(["folder", "worktree"]));
    assert_eq!(props["branch"]["enumDynamic"], true);
    let v = &r["result"]["values"];
    assert_eq!(
        *v,
        json!({"isolation": "folder", "branch": "dev", "worktreeBranchPrefix": "", "worktreeIncludeFiles": [],
               "worktreeSymlinkFolders": [], "worktreeCreateNewBranch": true, "worktreeBranchTrack": false})
    );
    // A worktree's branch defaults to the one the remote's HEAD names.
    let r = resolve(&mut h, 1, "file:///src/app", json!({"isolation": "worktree"}), repo_facts());
    assert_eq!(r["result"]["values"]["branch"], "develop");
    // No remote HEAD: the branch checked out, never a hard-coded main.
    let facts = RepoFacts { default_branch: None, ..repo_facts() };
    let r = resolve(&mut h, 1, "file:///src/app", json!({"isolation": "worktree"}), facts);
    assert_eq!(r["result"]["values"]["branch"], "dev");
}

#[test]
fn values_are_taken_only_in_their_shape() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let asked = json!({"isolation": "sandbox", "branch": ["main"], "worktreeBranchPrefix": 7,
        "worktreeIncludeFiles": ".env", "worktreeSymlinkFolders": ["node_modules", 3], "worktreeCreateNewBranch": "false",
        "worktreeBranchTrack": true});
    let r = resolve(&mut h, 1, "file:///src/app", asked, repo_facts());
    let v = &r["result"]["values"];
    assert_eq!(v["isolation"], "folder");
    assert_eq!(v["branch"], "dev");
    assert_eq!(v["worktreeBranchPrefix"], "");
    assert_eq!(v["worktreeIncludeFiles"], json!([]));
    assert_eq!(v["worktreeSymlinkFolders"], json!([]));
    assert_eq!(v["worktreeCreateNewBranch"], true);
    assert_eq!(v["worktreeBranchTrack"], true);
    // A branch that is not one of the repository's leaves the default.
    let r = resolve(&mut h, 1, "file:///src/app", json!({"branch": "nope"}), repo_facts());
    assert_eq!(r["result"]["values"]["branch"], "dev");
    let r = resolve(&mut h, 1, "file:///src/app", json!({"branch": "feature/login"}), repo_facts());
    assert_eq!(r["result"]["values"]["branch"], "feature/login");
}

#[test]
fn outside_a_repository_a_folder_is_all_there_is() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let r = resolve(&mut h, 1, "file:///src/app", json!({"isolation": "worktree"}), RepoFacts::not_a_repo());
    assert_eq!(keys(&r), ["isolation"]);
    assert_eq!(r["result"]["schema"]["properties"]["isolation"]["readOnly"], true);
    assert_eq!(r["result"]["schema"]["properties"]["isolation"]["enum"], json!(["folder"]));
    assert_eq!(r["result"]["values"]["isolation"], "folder");
    // No folder at all: answered at once, without asking git.
    let r = h.request(1, "resolveSessionConfig", json!({"channel": "ahp-root://", "provider": "echo"}));
    assert_eq!(keys(&r), ["isolation"]);
    assert!(h.git_cmds().is_empty());
}

#[test]
fn scope_is_offered_only_to_a_person_and_completes_their_memberships() {
    let mut h = Harness::new(people());
    h.connect(1, "c");
    let a = h.request(1, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": "tok"}));
    assert_eq!(a["result"], json!({}), "{a}");
    let r = resolve(&mut h, 1, "file:///src/app", json!({}), repo_facts());
    assert_eq!(keys(&r).last().map(String::as_str), Some("scope"));
    assert_eq!(r["result"]["values"]["scope"], "web/site", "the primary membership");
    let r = resolve(&mut h, 1, "file:///src/app", json!({"scope": "core/ahpd"}), repo_facts());
    assert_eq!(r["result"]["values"]["scope"], "core/ahpd");
    let id = h.send_request(1, "sessionConfigCompletions", json!({"channel": "ahp-root://", "workingDirectory": "file:///src/app", "property": "scope", "query": ""}));
    let cmds = h.git_cmds();
    h.done(cmds[0].0, Outcome::Git(GitResult::Repo(repo_facts())));
    let c = h.take_reply(1, id).expect("reply");
    let values: Vec<&str> = c["result"]["items"].as_array().expect("items").iter().filter_map(|i| i["value"].as_str()).collect();
    assert_eq!(values, ["core/ahpd", "web/site"]);
    // Nobody to ask: no scope.
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let r = resolve(&mut h, 1, "file:///src/app", json!({}), repo_facts());
    assert!(!keys(&r).contains(&"scope".to_owned()));
}

#[test]
fn branch_completions_seed_then_match_what_is_typed() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let ask = |h: &mut Harness, query: &str| -> Vec<String> {
        let id = h.send_request(1, "sessionConfigCompletions", json!({"channel": "ahp-root://", "workingDirectory": "file:///src/app",
            "property": "branch", "query": query, "config": {"isolation": "worktree"}}));
        let cmds = h.git_cmds();
        h.done(cmds[0].0, Outcome::Git(GitResult::Repo(repo_facts())));
        let c = h.take_reply(1, id).expect("reply");
        c["result"]["items"].as_array().expect("items").iter().filter_map(|i| i["value"].as_str().map(str::to_owned)).collect()
    };
    assert_eq!(ask(&mut h, ""), ["develop", "dev", "feature/login", "main"]);
    assert_eq!(ask(&mut h, "log"), ["feature/login"]);
    let id = h.send_request(1, "sessionConfigCompletions", json!({"channel": "ahp-root://", "property": "model"}));
    let e = h.take_reply(1, id).expect("reply");
    assert_eq!(e["error"]["code"], -32602, "{e}");
}

/// Creates a session in `/src/app` with `config`, answering its start.
fn create_in_repo(h: &mut Harness, id: &str, config: Value) -> (String, String) {
    create_in(h, id, config, repo_facts())
}

/// Creates a session in `/src/app` with `config`: answers the question
/// about its folder's repository with `facts` (asked before anything is
/// made), then its start.
fn create_in(h: &mut Harness, id: &str, config: Value, facts: RepoFacts) -> (String, String) {
    h.create_in(id, "/src/app", config, facts)
}

fn last_record(ops: &[(ahpd_core::OpId, StoreCmd)]) -> Option<ahpd_core::SessionRecord> {
    ops.iter().rev().find_map(|(_, c)| match c {
        StoreCmd::Put { record, .. } => Some((**record).clone()),
        _ => None,
    })
}

#[test]
fn a_config_change_on_a_started_session_is_refused() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, _) = create_in_repo(&mut h, "s", json!({"isolation": "folder"}));
    h.frames(1);
    h.dispatch(1, &uri, 1, json!({"type": "session/configChanged", "config": {"isolation": "worktree"}}));
    let frames = h.frames(1);
    let echo = frames.iter().find(|f| f["params"]["action"]["type"] == "session/configChanged").expect("echo");
    let reason = echo["params"]["rejectionReason"].as_str().expect("rejected");
    assert!(reason.contains("isolation") && reason.contains("sessionMutable: false"), "{reason}");
}

#[test]
fn a_worktree_session_moves_into_its_tree_on_its_first_send_and_counts_its_branch() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, chat) = create_in_repo(&mut h, "w", json!({"isolation": "worktree", "branch": "develop", "worktreeSymlinkFolders": ["node_modules"], "bogus": 1}));
    h.frames(1);
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "hi", "origin": {"kind": "user"}}}));
    h.settle_store();
    // Nothing reaches the agent before the tree is made.
    assert!(h.backend_cmds().is_empty());
    let cmds = h.git_cmds();
    let (op, plan) = match &cmds[..] {
        [(op, GitCmd::Begin { folder, checkpoint_ref, worktree: Some(plan) })] => {
            assert_eq!(folder, "/src/app");
            assert_eq!(checkpoint_ref, &ahpd_core::worktree::checkpoint_ref("ahp-session@w", 0));
            (*op, plan.clone())
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(plan.base.as_deref(), Some("develop"));
    let branch = ahpd_core::worktree::session_branch("", "ahp-session@w").expect("a valid branch");
    assert_eq!(plan.names.first().map(|n| &n.branch), Some(&branch), "the session's own branch first: {plan:?}");
    assert_eq!(plan.symlink_folders, ["node_modules"]);
    assert!(plan.create_new_branch);
    let tree = WorktreeRecord {
        path: "/src/app.worktrees/agents-w".into(),
        branch: "agents/w".into(),
        base_commit: "abc123".into(),
        base_branch: "develop".into(),
        name: "agents-w".into(),
        placed: vec!["node_modules".into()],
        ..Default::default()
    };
    h.done(op, Outcome::Git(GitResult::Begun { repo_root: Some("/src/app".into()), worktree: Some(tree.clone()) }));
    let seen = h.settle();
    let starts: Vec<&BackendCmd> = seen.iter().map(|(_, c)| c).filter(|c| matches!(c, BackendCmd::Start { .. })).collect();
    assert!(matches!(starts.as_slice(), [BackendCmd::Start { working_directory: Some(wd), resume: false, .. }] if wd == "file:///src/app.worktrees/agents-w"), "{seen:?}");
    let close_at = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Close)).expect("closed first");
    let start_at = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Start { .. })).expect("started");
    let send_at = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Send { .. })).expect("sent");
    assert!(close_at < start_at && start_at < send_at, "{seen:?}");
    let frames = h.frames(1);
    assert!(frames.iter().any(|f| f["params"]["action"]["type"] == "session/workingDirectoryReplaced"
        && f["params"]["action"]["replacement"] == "file:///src/app.worktrees/agents-w"));
    // The turn ends: a checkpoint, counted from the base the tree was cut from.
    h.agent_reply(&chat, "t1", "hello");
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::Checkpoint { workdir, checkpoint_ref, base, exclude })] => {
            assert_eq!(workdir, &tree.path);
            assert!(checkpoint_ref.ends_with("/checkpoints/turn/1"));
            assert_eq!(base, "abc123");
            assert_eq!(exclude, &tree.placed);
            *op
        }
        other => panic!("{other:?}"),
    };
    h.done(op, Outcome::Git(GitResult::Checkpointed { changes: Changes { files: 2, additions: 5, deletions: 1 } }));
    let row = h.list(1).into_iter().find(|r| r["resource"] == uri.as_str()).expect("row");
    assert_eq!(row["changes"], json!({"files": 2, "additions": 5, "deletions": 1}));
    let record = last_record(&h.store_ops()).expect("record written");
    assert_eq!(record.changes.as_ref().and_then(|c| c.files), Some(2));
    assert_eq!(record.git.as_ref().and_then(|g| g.worktree.clone()), Some(tree.clone()));
    assert!(record.config.contains_key("bogus"), "a backend takes keys it does not declare");
    assert_eq!(record.config.get("isolation"), Some(&json!("worktree")));
    assert_eq!(record.config.get("branch"), Some(&json!("develop")), "on the branch the tree was cut from");
    // After a restart the row still says the counts; a stored value the
    // backend does not offer is left out, said once in the log.
    let mut again = Harness::with_records(Config::default(), vec![record.clone()]);
    again.connect(1, "c");
    let dropped: Vec<String> = again
        .pending
        .iter()
        .filter_map(|e| match e {
            ahpd_core::Effect::Log(l) if l.event == "config.value_dropped" => Some(l.detail.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert!(dropped[0].contains("bogus"));
    let row = again.list(1).into_iter().find(|r| r["resource"] == uri.as_str()).expect("row after restart");
    assert_eq!(row["changes"], json!({"files": 2, "additions": 5, "deletions": 1}));
    // Read back, it reports the config it was made with: a worktree
    // session on the branch its tree was cut from. A record stored before
    // offers were kept reads one from its git record.
    for (label, stored) in [("kept", record.clone()), ("older", ahpd_core::SessionRecord { offer: None, ..record.clone() })] {
        let mut back = Harness::with_records(Config::default(), vec![stored]);
        back.connect(1, "c");
        let r = back.send_request(1, "subscribe", json!({"channel": uri}));
        back.settle();
        let reply = back.take_reply(1, r).expect("subscribe reply");
        let config = &reply["result"]["snapshot"]["state"]["config"];
        assert_eq!(config["values"]["isolation"], "worktree", "{label}: {reply}");
        assert_eq!(config["values"]["branch"], "develop", "{label}: {reply}");
        assert!(config["values"].get("bogus").is_none(), "{label}: only offered keys: {reply}");
        assert_eq!(config["schema"]["properties"]["isolation"]["enum"], json!(["folder", "worktree"]), "{label}");
    }
    // disposeSession removes the checkpoints and the tree before it answers,
    // and only once its tombstone is durable.
    let id = h.send_request(1, "disposeSession", json!({"channel": uri}));
    assert!(h.git_cmds().is_empty(), "nothing removed before the tombstone is durable");
    h.settle_store();
    h.settle_backend();
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::Dispose { repo, refs_prefix, worktree: Some(w), removal })] => {
            assert_eq!(*removal, ahpd_core::git::Removal::UnlessUncommitted, "a tree with uncommitted work stays");
            assert_eq!(repo, "/src/app");
            assert!(refs_prefix.starts_with("refs/agents/") && refs_prefix.ends_with("/checkpoints/"));
            assert_eq!(w, &tree);
            *op
        }
        other => panic!("{other:?}"),
    };
    h.settle_store();
    assert!(h.take_reply(1, id).is_none(), "answered before the tree went");
    h.done(op, Outcome::Git(GitResult::Disposed { kept_tree: false }));
    h.settle_store();
    assert_eq!(h.take_reply(1, id).expect("reply")["result"], Value::Null);
}

#[test]
fn a_tree_git_cannot_make_fails_that_send_clearly() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, chat) = create_in_repo(&mut h, "f", json!({"isolation": "worktree"}));
    h.frames(1);
    h.start_turn(1, &chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    h.done(cmds[0].0, Outcome::Failed { message: "the repository has no commits yet".to_owned() });
    assert!(h.backend_cmds().iter().all(|(_, _, c)| !matches!(c, BackendCmd::Send { .. })), "no silent fallback to the folder");
    let frames = h.frames(1);
    let err = frames.iter().find(|f| f["params"]["action"]["type"] == "chat/error").expect("chat/error");
    let message = err["params"]["action"]["part"]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("worktree could not be made") && message.contains("no commits yet"), "{err}");
    assert!(frames.iter().any(|f| f["params"]["action"]["type"] == "session/creationFailed"), "{frames:?}");
    let _ = uri;
}

/// A worktree session made where the folder offered no branch (a detached
/// HEAD, no remote default) names none: its tree's base is settled by the
/// host from the facts of the folder it is cut in, read just before (the
/// root may have moved to another repository meanwhile), and the names to
/// try come with it. A read git cannot do fails the send as the cut would.
#[test]
fn a_tree_whose_config_names_no_base_is_cut_from_the_default_the_host_reads_first() {
    let detached = RepoFacts { root: Some("/src/app".into()), current_branch: None, default_branch: None, branches: vec!["main".into()], not_directories: Vec::new(), git_error: None };
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, chat) = create_in(&mut h, "d", json!({"isolation": "worktree", "worktreeCreateNewBranch": false}), detached);
    let record = h.host.view().sessions.get(&uri).expect("held").record().clone();
    assert!(!record.config.contains_key("branch"), "nothing to settle: {:?}", record.config);
    h.start_turn(1, &chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::Inspect { folder, .. })] if folder == "/src/app" => *op,
        other => panic!("the folder's facts are read before the tree is cut: {other:?}"),
    };
    assert!(h.backend_cmds().iter().all(|(_, _, c)| !matches!(c, BackendCmd::Send { .. })), "the turn waits for its tree");
    // Checked out on `main` since: a worktree's default is the branch
    // checked out when the remote names none.
    let now = RepoFacts { current_branch: Some("main".into()), default_branch: None, ..repo_facts() };
    h.done(op, Outcome::Git(GitResult::Repo(now)));
    let cmds = h.git_cmds();
    let plan = match &cmds[..] {
        [(_, GitCmd::Begin { folder, worktree: Some(plan), .. })] if folder == "/src/app" => plan.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(plan.base.as_deref(), Some("main"));
    assert!(!plan.create_new_branch);
    assert_eq!(plan.names.first().map(|n| (n.branch.as_str(), n.folder.as_str())), Some(("main", "main")), "{plan:?}");
    assert_eq!(plan.names.get(1).map(|n| n.folder.as_str()), Some("main-2"));

    // The same read failing fails the send, in git's words.
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let detached = RepoFacts { root: Some("/src/app".into()), current_branch: None, default_branch: None, branches: vec!["main".into()], not_directories: Vec::new(), git_error: None };
    let (_, chat) = create_in(&mut h, "e", json!({"isolation": "worktree"}), detached);
    h.frames(1);
    h.start_turn(1, &chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Inspect { .. })]), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Failed { message: "could not open the repository".to_owned() });
    assert!(h.git_cmds().is_empty(), "no tree is cut");
    let frames = h.frames(1);
    let err = frames.iter().find(|f| f["params"]["action"]["type"] == "chat/error").expect("chat/error");
    let message = err["params"]["action"]["part"]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("worktree could not be made") && message.contains("could not open the repository"), "{err}");
}

#[test]
fn a_worktree_asked_for_outside_a_repository_is_a_folder_session() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, chat) = create_in(&mut h, "n", json!({"isolation": "worktree"}), RepoFacts::not_a_repo());
    h.start_turn(1, &chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Begin { worktree: None, .. })]), "no tree is asked for: {cmds:?}");
    h.done(cmds[0].0, Outcome::Git(GitResult::Begun { repo_root: None, worktree: None }));
    let seen = h.settle();
    assert!(seen.iter().any(|(_, c)| matches!(c, BackendCmd::Send { .. })), "{seen:?}");
    assert!(!seen.iter().any(|(_, c)| matches!(c, BackendCmd::Start { .. })), "not started again: {seen:?}");
    let record = h.host.view().sessions.get(&uri).expect("the session is held").record().clone();
    assert_ne!(record.config.get("isolation"), Some(&json!("worktree")));
    assert_eq!(record.git.as_ref().map(|g| g.repo_root.clone()), Some(None));
    // In no repository there is nothing to checkpoint.
    h.agent_reply(&chat, "t1", "ok");
    assert!(h.git_cmds().is_empty());
}

#[test]
fn a_branch_name_git_would_refuse_fails_the_send_before_git_is_asked() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (_, chat) = create_in_repo(&mut h, "p", json!({"isolation": "worktree", "worktreeBranchPrefix": "a..b/"}));
    h.frames(1);
    h.start_turn(1, &chat, 1, "t1", "hi");
    assert!(h.git_cmds().is_empty(), "git was asked about a name it would refuse");
    let frames = h.frames(1);
    let err = frames.iter().find(|f| f["params"]["action"]["type"] == "chat/error").expect("chat/error");
    let message = err["params"]["action"]["part"]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not a valid branch name") && message.contains(".."), "{message}");
}

#[test]
fn a_cancelled_turn_gets_no_checkpoint_and_the_next_one_counts_from_turn_0() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (_, chat) = create_in_repo(&mut h, "k", json!({}));
    h.start_turn(1, &chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Begin { worktree: None, .. })]), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Git(GitResult::Begun { repo_root: Some("/src/app".into()), worktree: None }));
    h.settle();
    h.dispatch(1, &chat, 2, json!({"type": "chat/turnCancelled", "turnId": "t1", "duration": 0}));
    h.settle();
    assert!(h.git_cmds().is_empty(), "a cancelled turn has no checkpoint of its own");
    h.start_turn(1, &chat, 3, "t2", "again");
    h.settle();
    h.agent_reply(&chat, "t2", "ok");
    let cmds = h.git_cmds();
    match &cmds[..] {
        [(_, GitCmd::Checkpoint { workdir, checkpoint_ref, base, .. })] => {
            assert_eq!(workdir, "/src/app");
            assert_eq!(checkpoint_ref, &ahpd_core::worktree::checkpoint_ref("ahp-session@k", 1));
            assert_eq!(base, &ahpd_core::worktree::checkpoint_ref("ahp-session@k", 0));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_folder_session_runs_its_turn_even_when_git_fails() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (_, chat) = create_in_repo(&mut h, "g", json!({}));
    h.start_turn(1, &chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    h.done(cmds[0].0, Outcome::Failed { message: "could not open the repository".to_owned() });
    let seen = h.settle();
    assert!(seen.iter().any(|(_, c)| matches!(c, BackendCmd::Send { .. })), "{seen:?}");
}

#[test]
fn a_first_send_to_a_sleeping_session_wakes_it_then_makes_its_tree() {
    let mut h = Harness::new(Config { sleep_after_ms: 1000, ..Config::default() });
    h.connect(1, "c");
    let (uri, chat) = create_in_repo(&mut h, "z", json!({"isolation": "worktree"}));
    h.request(1, "unsubscribe", json!({"channel": uri}));
    h.request(1, "unsubscribe", json!({"channel": chat}));
    h.advance(2000);
    h.settle();
    assert_eq!(h.host.view().sessions.get(&uri).expect("the session is held").phase().name(), "asleep");
    h.start_turn(1, &chat, 1, "t1", "hi");
    // The wake runs first; git is asked once the session is live, before
    // the turn reaches the agent.
    let seen = h.settle();
    assert!(!seen.iter().any(|(_, c)| matches!(c, BackendCmd::Send { .. })), "{seen:?}");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Begin { worktree: Some(_), .. })]), "{cmds:?}");
    let tree = WorktreeRecord {
        path: "/src/app.worktrees/z".into(),
        branch: "agents/z".into(),
        base_commit: "abc".into(),
        base_branch: "dev".into(),
        name: "z".into(),
        placed: Vec::new(),
        ..Default::default()
    };
    h.done(cmds[0].0, Outcome::Git(GitResult::Begun { repo_root: Some("/src/app".into()), worktree: Some(tree) }));
    let seen = h.settle();
    let start_at = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Start { working_directory: Some(wd), .. } if wd == "file:///src/app.worktrees/z"));
    let send_at = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Send { .. }));
    assert!(start_at.is_some() && start_at < send_at, "{seen:?}");
}

/// The `changes` of one chat's entry in a catalogue row.
fn chat_entry_changes(row: &Value, chat: &str) -> Value {
    row["chats"].as_array().and_then(|cs| cs.iter().find(|c| c["resource"] == chat)).map(|c| c["changes"].clone()).unwrap_or(Value::Null)
}

#[test]
fn each_chat_carries_its_own_change_count_and_keeps_it_across_a_restart() {
    // Sessions page, "The state a session reports": the default chat carries
    // the Session Changes, another chat the files its own tools wrote.
    let mut h = Harness::new(Config { residency_limit: 0, sleep_after_ms: 0, ..Config::default() });
    h.connect(1, "c");
    let (uri, chat) = create_in_repo(&mut h, "counts", json!({}));
    h.start_turn(1, &chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    h.done(cmds[0].0, Outcome::Git(GitResult::Begun { repo_root: Some("/src/app".into()), worktree: None }));
    h.settle();
    h.agent_reply(&chat, "t1", "ok");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Checkpoint { .. })]), "{cmds:?}");
    h.frames(1);
    h.done(cmds[0].0, Outcome::Git(GitResult::Checkpointed { changes: Changes { files: 3, additions: 5, deletions: 1 } }));
    let updates: Vec<Value> = h
        .frames(1)
        .into_iter()
        .filter(|f| f["params"]["action"]["type"] == "session/chatUpdated" && f["params"]["action"]["chat"] == chat.as_str())
        .collect();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0]["params"]["action"]["changes"]["changes"], json!({"files": 3, "additions": 5, "deletions": 1}));

    // A side chat whose tool writes two files (one twice) counts two.
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/side"}));
    h.settle();
    assert_eq!(h.take_reply(1, r).expect("createChat reply")["result"], Value::Null);
    let side = "ahp-chat:/side".to_owned();
    assert_eq!(chat_entry_changes(&h.list(1)[0], &side), Value::Null, "a chat that wrote nothing carries no count");
    let wrote = |paths: &[&str]| ahpd_core::Input::Backend {
        chat: side.clone(),
        event: ahpd_core::BackendEvent::Wrote { paths: paths.iter().map(|p| (*p).to_owned()).collect() },
    };
    h.input(wrote(&["src/a.ts", "src/b.ts"]));
    h.input(wrote(&["src/a.ts", "/src/app/src/b.ts"]));
    let ops = h.store_ops();
    let record = last_record(&ops).expect("the counts are written to the store");
    for (op, _) in ops {
        h.done(op, Outcome::Ok);
    }
    h.settle();
    let row = h.list(1).into_iter().find(|r| r["resource"] == uri.as_str()).expect("row");
    assert_eq!(chat_entry_changes(&row, &side), json!({"files": 2}));
    assert_eq!(chat_entry_changes(&row, &chat), json!({"files": 3, "additions": 5, "deletions": 1}));
    assert_eq!(row["changes"], json!({"files": 3, "additions": 5, "deletions": 1}), "the session's own count is the default chat's");
    let state = h.request(1, "subscribe", json!({"channel": uri}));
    let listed = state["result"]["snapshot"]["state"]["chats"].as_array().cloned().unwrap_or_default();
    let side_entry = listed.iter().find(|c| c["resource"] == side.as_str()).expect("side chat listed");
    assert_eq!(side_entry["changes"], json!({"files": 2}), "the session's chat list says it too");

    // Both counts come back after a restart from what the store holds.
    let mut again = Harness::with_records(Config::default(), vec![record]);
    again.connect(1, "c");
    let row = again.list(1).into_iter().find(|r| r["resource"] == uri.as_str()).expect("row after restart");
    assert_eq!(chat_entry_changes(&row, &side), json!({"files": 2}));
    assert_eq!(chat_entry_changes(&row, &chat), json!({"files": 3, "additions": 5, "deletions": 1}));
}

/// A worktree session whose first send made its tree (answered by hand) and
/// whose first turn ended; returns the session, its chat and the tree.
fn worktree_session_with_a_turn(h: &mut Harness, id: &str) -> (String, String, WorktreeRecord) {
    let (uri, chat) = create_in_repo(h, id, json!({"isolation": "worktree", "branch": "develop"}));
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "hi", "origin": {"kind": "user"}}}));
    h.settle_store();
    let cmds = h.git_cmds();
    let tree = WorktreeRecord {
        path: format!("/src/app.worktrees/agents-{id}"),
        branch: format!("agents/{id}"),
        base_commit: "abc".into(),
        base_branch: "develop".into(),
        name: format!("agents-{id}"),
        ..Default::default()
    };
    h.done(cmds[0].0, Outcome::Git(GitResult::Begun { repo_root: Some("/src/app".into()), worktree: Some(tree.clone()) }));
    h.settle();
    h.agent_reply(&chat, "t1", "hello");
    let cmds = h.git_cmds();
    h.done(cmds[0].0, Outcome::Git(GitResult::Checkpointed { changes: Changes::default() }));
    h.settle_store();
    h.frames(1);
    (uri, chat, tree)
}

/// Whether the session's record (as the host holds it and stores it) says
/// its own tree is off the disk.
fn off_disk(h: &Harness, uri: &str) -> Option<bool> {
    git_record(h, uri).and_then(|g| g.worktree).map(|w| w.off_disk)
}

fn git_record(h: &Harness, uri: &str) -> Option<ahpd_core::git::GitRecord> {
    h.host.view().sessions.get(uri).and_then(|s| s.record().git.as_deref().cloned())
}

fn phase(h: &Harness, uri: &str) -> &'static str {
    h.host.view().sessions.get(uri).map(|s| s.phase().name()).unwrap_or("gone")
}

fn archive(h: &mut Harness, uri: &str, seq: i64, archived: bool) {
    h.dispatch(1, uri, seq, json!({"type": "session/isArchivedChanged", "isArchived": archived}));
    h.settle();
}

/// Nobody watches the session any more (an archived one then goes at once).
fn unwatch(h: &mut Harness, uri: &str, chat: &str) {
    for channel in [chat, uri] {
        let r = h.request(1, "unsubscribe", json!({"channel": channel}));
        assert!(r.get("error").is_none(), "{r}");
    }
    h.settle();
}

#[test]
fn an_archived_session_takes_its_tree_off_the_disk_once_its_agents_are_gone_and_a_wake_puts_it_back_first() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, chat, tree) = worktree_session_with_a_turn(&mut h, "a");
    // Archived while a client watches it: its agent still runs in the tree,
    // which stays.
    archive(&mut h, &uri, 2, true);
    assert_eq!(phase(&h, &uri), "live");
    assert!(h.git_cmds().is_empty(), "the tree is in use");
    // Nobody watches it: it goes at once, and its tree goes off the disk.
    unwatch(&mut h, &uri, &chat);
    assert_eq!(phase(&h, &uri), "asleep");
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::ArchiveTree { repo, worktree, .. })] if repo == "/src/app" && worktree.path == tree.path => *op,
        other => panic!("{other:?}"),
    };
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: false }));
    assert_eq!(off_disk(&h, &uri), Some(true), "the record says the tree is off the disk");
    h.settle();
    // Unarchived: the same tree comes back, on its branch.
    archive(&mut h, &uri, 3, false);
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::RestoreTree { repo, worktree })] if repo == "/src/app" && worktree.path == tree.path && worktree.branch == tree.branch => *op,
        other => panic!("{other:?}"),
    };
    h.done(op, Outcome::Git(GitResult::TreeRestored));
    assert_eq!(off_disk(&h, &uri), Some(false));
    h.settle();
    // Archived again while asleep: off the disk at once. Then a turn is
    // sent: the tree comes back before the agent starts in it.
    archive(&mut h, &uri, 4, true);
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::ArchiveTree { .. })]), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Git(GitResult::TreeArchived { kept: false }));
    h.settle();
    h.dispatch(1, &chat, 5, json!({"type": "chat/turnStarted", "turnId": "t2", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "again", "origin": {"kind": "user"}}}));
    let seen = h.settle();
    assert!(seen.is_empty(), "no agent starts before the tree is back: {seen:?}");
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::RestoreTree { worktree, .. })] if worktree.path == tree.path => *op,
        other => panic!("{other:?}"),
    };
    h.done(op, Outcome::Git(GitResult::TreeRestored));
    let seen = h.settle();
    let tree_uri = format!("file://{}", tree.path);
    let start = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Start { working_directory: Some(wd), .. } if *wd == tree_uri));
    let send = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Send { turn_id, .. } if turn_id == "t2"));
    assert!(matches!((start, send), (Some(a), Some(b)) if a < b), "{seen:?}");
}

#[test]
fn a_tree_with_uncommitted_work_stays_on_archive_and_one_that_cannot_come_back_fails_the_turn_clearly() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, chat, _) = worktree_session_with_a_turn(&mut h, "k");
    unwatch(&mut h, &uri, &chat);
    archive(&mut h, &uri, 2, true);
    let cmds = h.git_cmds();
    h.done(cmds[0].0, Outcome::Git(GitResult::TreeArchived { kept: true }));
    assert_eq!(off_disk(&h, &uri), Some(false), "a kept tree is still on the disk");
    assert!(h.pending.iter().any(|e| matches!(e, ahpd_core::Effect::Log(l) if l.event == "git.tree_kept")));
    h.settle();
    // Unarchived: nothing to put back, the tree never left.
    archive(&mut h, &uri, 3, false);
    assert!(h.git_cmds().is_empty());
    // Off the disk, then its branch vanished by hand: a client subscribing
    // wakes it, the tree cannot come back, and the subscribe fails saying
    // so; no agent starts anywhere else and the session stays asleep.
    archive(&mut h, &uri, 4, true);
    let cmds = h.git_cmds();
    h.done(cmds[0].0, Outcome::Git(GitResult::TreeArchived { kept: false }));
    h.settle();
    let id = h.send_request(1, "subscribe", json!({"channel": chat}));
    let seen = h.settle();
    assert!(seen.is_empty(), "no agent starts before the tree is back: {seen:?}");
    assert!(h.take_reply(1, id).is_none(), "the subscribe waits for the tree");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::RestoreTree { .. })]), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Failed { message: "the branch agents/k of the archived tree is gone".into() });
    let seen = h.settle();
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(phase(&h, &uri), "asleep");
    let reply = h.take_reply(1, id).expect("the subscribe is answered");
    assert!(reply["error"]["message"].as_str().is_some_and(|m| m.contains("could not be put back")), "{reply}");
}

#[test]
fn a_session_moved_to_another_folder_keeps_its_tree_and_takes_it_along_on_archive_and_dispose() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, chat, tree) = worktree_session_with_a_turn(&mut h, "m");
    let tree_uri = format!("file://{}", tree.path);
    h.dispatch(1, &uri, 2, json!({"type": "session/workingDirectoryReplaced", "directory": tree_uri, "replacement": "file:///src/other"}));
    h.settle();
    // Its next send asks git about the new folder, and cuts no tree there.
    h.dispatch(1, &chat, 3, json!({"type": "chat/turnStarted", "turnId": "t2", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "there", "origin": {"kind": "user"}}}));
    let mut seen = h.settle();
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::Begin { folder, worktree: None, .. })] if folder == "/src/other" => *op,
        other => panic!("{other:?}"),
    };
    h.done(op, Outcome::Git(GitResult::Begun { repo_root: Some("/src/other".into()), worktree: None }));
    seen.extend(h.settle());
    let start = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Start { working_directory: Some(wd), .. } if wd == "file:///src/other"));
    let send = seen.iter().position(|(_, c)| matches!(c, BackendCmd::Send { turn_id, .. } if turn_id == "t2"));
    assert!(matches!((start, send), (Some(a), Some(b)) if a < b), "the agent runs in the new folder: {seen:?}");
    h.agent_reply(&chat, "t2", "ok");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Checkpoint { workdir, .. })] if workdir == "/src/other"), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Git(GitResult::Checkpointed { changes: Changes::default() }));
    h.settle();
    let git = git_record(&h, &uri).expect("git record");
    assert_eq!(git.folder, "/src/other");
    assert_eq!(git.former.len(), 1);
    assert_eq!(git.former[0].folder, "/src/app");
    assert_eq!(git.former[0].worktree.as_ref().map(|w| w.path.clone()), Some(tree.path.clone()));
    // Archived (and asleep): the tree it moved away from goes off the disk
    // like its own would.
    unwatch(&mut h, &uri, &chat);
    archive(&mut h, &uri, 4, true);
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::ArchiveTree { repo, worktree, .. })] if repo == "/src/app" && worktree.path == tree.path), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Git(GitResult::TreeArchived { kept: false }));
    h.settle();
    // Disposed: the refs and tree of both folders go (once the tombstone
    // is durable).
    let id = h.send_request(1, "disposeSession", json!({"channel": uri}));
    h.settle_store();
    h.settle_backend();
    let cmds = h.git_cmds();
    let repos: Vec<(&str, Option<&str>)> = cmds
        .iter()
        .filter_map(|(_, c)| match c {
            GitCmd::Dispose { repo, worktree, .. } => Some((repo.as_str(), worktree.as_ref().map(|w| w.path.as_str()))),
            _ => None,
        })
        .collect();
    assert_eq!(repos, [("/src/app", Some(tree.path.as_str())), ("/src/other", None)], "{cmds:?}");
    for (op, _) in &cmds {
        h.done(*op, Outcome::Git(GitResult::Disposed { kept_tree: false }));
    }
    h.settle_store();
    assert_eq!(h.take_reply(1, id).expect("reply")["result"], Value::Null);
}

#[test]
fn a_session_in_a_folder_that_is_no_repository_counts_the_files_its_tools_wrote() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, chat) = create_in_repo(&mut h, "n", json!({}));
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "write notes", "origin": {"kind": "user"}}}));
    h.settle();
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Begin { .. })]), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Git(GitResult::Begun { repo_root: None, worktree: None }));
    h.settle();
    let wrote = |chat: &str, paths: &[&str]| ahpd_core::Input::Backend {
        chat: chat.to_owned(),
        event: ahpd_core::BackendEvent::Wrote { paths: paths.iter().map(|p| (*p).to_owned()).collect() },
    };
    // The same file by a relative and an absolute path counts once.
    h.input(wrote(&chat, &["notes.md", "/src/app/notes.md", "todo.txt"]));
    h.agent_reply(&chat, "t1", "done");
    assert!(h.git_cmds().is_empty(), "no checkpoint outside a repository");
    h.settle();
    let row = h.list(1).into_iter().find(|r| r["resource"] == uri.as_str()).expect("row");
    assert_eq!(row["changes"], json!({"files": 2}));
    assert_eq!(chat_entry_changes(&row, &chat), json!({"files": 2}), "the default chat carries the session's count");
    // Another chat's writes count for it and for the session.
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/side-n"}));
    h.settle();
    assert_eq!(h.take_reply(1, r).expect("createChat reply")["result"], Value::Null);
    h.input(wrote("ahp-chat:/side-n", &["other.txt", "todo.txt"]));
    h.settle();
    let row = h.list(1).into_iter().find(|r| r["resource"] == uri.as_str()).expect("row");
    assert_eq!(row["changes"], json!({"files": 3}));
    assert_eq!(chat_entry_changes(&row, "ahp-chat:/side-n"), json!({"files": 2}));
    // Kept across a restart.
    let record = h.host.view().sessions.get(uri.as_str()).map(|s| s.record().clone()).expect("record");
    let mut again = Harness::with_records(Config::default(), vec![record]);
    again.connect(1, "c");
    let row = again.list(1).into_iter().find(|r| r["resource"] == uri.as_str()).expect("row after restart");
    assert_eq!(row["changes"], json!({"files": 3}));
}
