//! Folder trust as a client sees it (Sessions page, "Isolation and
//! worktrees": "A worktree the host made is trusted when the repository it
//! came from is"; `core/src/trust.rs`). Git is answered by hand here;
//! `tests/e2e_git.rs` runs it on a real repository.

use ahpd_core::git::{Changes, GitCmd, GitResult, RepoFacts, WorktreeRecord};
use ahpd_core::trust::Trust;
use ahpd_core::{Config, Outcome};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

fn trusting(folders: &[&str]) -> Config {
    Config { trust: Trust::of(&folders.iter().map(|f| f.to_string()).collect::<Vec<_>>()), ..Config::default() }
}

fn repo_facts() -> RepoFacts {
    RepoFacts {
        root: Some("/src/app".into()),
        current_branch: Some("main".into()),
        default_branch: Some("main".into()),
        branches: vec!["main".into()],
        not_directories: Vec::new(),
        git_error: None,
    }
}

/// Sends `createSession` for `folder`, answers the question about its
/// repository with `facts` if one is asked, then its start; returns the
/// reply.
fn create(h: &mut Harness, id: &str, folder: &str, config: Value, facts: RepoFacts) -> Value {
    let rid = h.send_request(1, "createSession", json!({"channel": format!("ahp-session:/{id}"), "provider": "echo", "workingDirectories": [folder], "config": config}));
    for (op, command) in h.git_cmds() {
        assert!(matches!(command, GitCmd::Inspect { .. }), "{command:?}");
        h.done(op, Outcome::Git(GitResult::Repo(facts.clone())));
    }
    h.settle();
    h.take_reply(1, rid).expect("createSession reply")
}

fn refused(reply: &Value) -> String {
    assert_eq!(reply["error"]["code"], -32009, "{reply}");
    reply["error"]["message"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn with_no_list_every_folder_is_trusted() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    assert_eq!(create(&mut h, "a", "file:///anywhere", json!({}), RepoFacts::not_a_repo())["result"], Value::Null);
    assert_eq!(create(&mut h, "b", "vscode-remote://box/x", json!({}), RepoFacts::not_a_repo())["result"], Value::Null);
}

#[test]
fn a_session_is_made_only_in_a_trusted_folder_and_git_is_not_asked_about_another() {
    let mut h = Harness::new(trusting(&["/src/app"]));
    h.connect(1, "c");
    assert_eq!(create(&mut h, "in", "file:///src/app/pkg", json!({}), RepoFacts::not_a_repo())["result"], Value::Null);
    for (id, folder) in [("out", "file:///src/other"), ("dots", "file:///src/app/../other"), ("prefix", "file:///src/app2"), ("remote", "vscode-remote://box/src/app")] {
        let rid = h.send_request(1, "createSession", json!({"channel": format!("ahp-session:/{id}"), "provider": "echo", "workingDirectories": [folder]}));
        assert!(h.git_cmds().is_empty(), "git was asked about {folder}");
        let message = refused(&h.take_reply(1, rid).expect("refused at once"));
        assert!(message.contains("trusted"), "{message}");
        assert!(h.host.view().sessions.get(&format!("ahp-session:/{id}")).is_none(), "a refused session never existed");
    }
    // A peer folder is asked about too.
    let rid = h.send_request(1, "createSession", json!({"channel": "ahp-session:/peer", "provider": "echo", "workingDirectories": ["file:///src/app", "file:///etc"]}));
    refused(&h.take_reply(1, rid).expect("refused"));
    // A session without a folder would start its agent wherever the host
    // runs it, which no entry names.
    for folders in [json!(null), json!([])] {
        let rid = h.send_request(1, "createSession", json!({"channel": "ahp-session:/none", "provider": "echo", "workingDirectories": folders}));
        let message = refused(&h.take_reply(1, rid).expect("refused"));
        assert!(message.contains("name a working directory"), "{message}");
    }
    // Nor is git asked about an untrusted folder by resolveSessionConfig.
    let r = h.request(1, "resolveSessionConfig", json!({"channel": "ahp-root://", "provider": "echo", "workingDirectory": "file:///src/other"}));
    assert!(h.git_cmds().is_empty());
    refused(&r);
}

#[test]
fn a_client_cannot_move_a_session_into_a_folder_that_is_not_trusted() {
    let mut h = Harness::new(trusting(&["/src/app", "/src/lib"]));
    h.connect(1, "c");
    create(&mut h, "m", "file:///src/app", json!({}), RepoFacts::not_a_repo());
    let uri = "ahp-session:/m";
    h.request(1, "subscribe", json!({"channel": uri}));
    h.frames(1);
    h.dispatch(1, uri, 1, json!({"type": "session/workingDirectoryReplaced", "directory": "file:///src/app", "replacement": "file:///etc"}));
    h.dispatch(1, uri, 2, json!({"type": "session/workingDirectorySet", "directory": "file:///home/x"}));
    h.dispatch(1, uri, 3, json!({"type": "session/workingDirectorySet", "directory": "file:///src/lib"}));
    h.settle();
    let frames = h.frames(1);
    let echo = |seq: i64| frames.iter().find(|f| f["params"]["origin"]["clientSeq"] == seq).cloned().unwrap_or(Value::Null);
    for seq in [1, 2] {
        let reason = echo(seq)["params"]["rejectionReason"].as_str().unwrap_or_default().to_owned();
        assert!(reason.contains("not a trusted folder"), "{seq}: {frames:?}");
    }
    assert!(echo(3)["params"].get("rejectionReason").is_none(), "{frames:?}");
    let dirs = h.host.view().sessions.get(uri).expect("session").record().working_directories.clone();
    assert_eq!(*dirs, ["file:///src/app", "file:///src/lib"]);
}

/// Makes worktree session `w` in trusted `/src/app` and runs its first
/// turn, which moves it into the tree git makes, `/src/app.worktrees/agents-w`.
fn worktree_session_w(h: &mut Harness) -> ahpd_core::SessionRecord {
    create(h, "w", "file:///src/app", json!({"isolation": "worktree"}), repo_facts());
    let chat = "ahp-chat:/ahp-session@w";
    h.request(1, "subscribe", json!({"channel": chat}));
    h.start_turn(1, chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Begin { worktree: Some(_), .. })]), "{cmds:?}");
    let tree = WorktreeRecord {
        path: "/src/app.worktrees/agents-w".into(),
        branch: "agents/w".into(),
        base_branch: "main".into(),
        name: "agents-w".into(),
        repo_root: "/src/app".into(),
        ..Default::default()
    };
    h.done(cmds[0].0, Outcome::Git(GitResult::Begun { repo_root: Some("/src/app".into()), worktree: Some(tree) }));
    h.settle();
    h.agent_reply(chat, "t1", "ok");
    for (op, _) in h.git_cmds() {
        h.done(op, Outcome::Git(GitResult::Checkpointed { changes: Changes::default() }));
    }
    h.settle();
    let record = h.host.view().sessions.get("ahp-session:/w").expect("session").record().clone();
    assert_eq!(*record.working_directories, ["file:///src/app.worktrees/agents-w"], "the session moved into its tree");
    record
}

#[test]
fn a_tree_the_host_made_is_trusted_when_its_repository_is_and_a_hand_made_one_is_not() {
    let mut h = Harness::new(trusting(&["/src/app"]));
    h.connect(1, "c");
    let record = worktree_session_w(&mut h);
    // Another session may be made in the tree (or a folder inside it)...
    assert_eq!(create(&mut h, "in-tree", "file:///src/app.worktrees/agents-w/src", json!({}), repo_facts())["result"], Value::Null);
    // ...but not in a tree beside it the host did not make.
    let message = refused(&create(&mut h, "by-hand", "file:///src/app.worktrees/by-hand", json!({}), repo_facts()));
    assert!(message.contains("/src/app.worktrees/by-hand"), "{message}");

    // After a restart the tree is still the host's: the session wakes in
    // it. With its repository no longer trusted, it is not woken, and the
    // request waiting on it says why.
    let mut again = Harness::with_records(trusting(&["/src/app"]), vec![record.clone()]);
    again.connect(1, "c");
    let r = again.send_request(1, "subscribe", json!({"channel": "ahp-session:/w"}));
    again.settle();
    assert!(again.take_reply(1, r).expect("subscribe reply").get("result").is_some());
    let mut moved_on = Harness::with_records(trusting(&["/src/lib"]), vec![record]);
    moved_on.connect(1, "c");
    let r = moved_on.send_request(1, "subscribe", json!({"channel": "ahp-session:/w"}));
    moved_on.settle();
    let reply = moved_on.take_reply(1, r).expect("subscribe reply");
    let message = refused(&reply);
    assert!(message.contains("not woken") && message.contains("not a trusted folder"), "{reply}");
    assert!(moved_on.backend_cmds().is_empty(), "no agent was started");
    assert_eq!(moved_on.host.view().sessions.get("ahp-session:/w").map(|s| s.phase().name()), Some("asleep"));
}

/// A tree on its way off the disk (its maker disposed, nobody else working
/// in it) is no longer one the host keeps: a session asked for in it
/// while its maker goes is refused, even when the question was asked
/// before the tree went and answered after (sim seeds 806, 6807).
#[test]
fn a_session_is_not_made_in_a_tree_its_maker_takes_off_the_disk() {
    let mut h = Harness::new(trusting(&["/src/app"]));
    h.connect(1, "c");
    worktree_session_w(&mut h);
    let early = h.send_request(1, "createSession", json!({"channel": "ahp-session:/early", "provider": "echo", "workingDirectories": ["file:///src/app.worktrees/agents-w"]}));
    let inspect = h.git_cmds();
    assert!(matches!(&inspect[..], [(_, GitCmd::Inspect { .. })]), "the tree is the host's: its repository is asked about: {inspect:?}");
    let disposed = h.send_request(1, "disposeSession", json!({"channel": "ahp-session:/w"}));
    h.settle();
    let removal: Vec<_> = h.git_cmds();
    assert!(removal.iter().any(|(_, c)| matches!(c, GitCmd::Dispose { worktree: Some(w), .. } if w.path == "/src/app.worktrees/agents-w")), "{removal:?}");
    // Asked while the tree goes: refused before git is asked.
    let rid = h.send_request(1, "createSession", json!({"channel": "ahp-session:/late", "provider": "echo", "workingDirectories": ["file:///src/app.worktrees/agents-w"]}));
    assert!(h.git_cmds().is_empty(), "git is not asked about a tree on its way off");
    assert!(refused(&h.take_reply(1, rid).expect("refused at once")).contains("not a trusted folder"));
    // Asked before, answered after: refused too, and no agent started there.
    h.done(inspect[0].0, Outcome::Git(GitResult::Repo(repo_facts())));
    h.settle();
    assert!(refused(&h.take_reply(1, early).expect("createSession reply")).contains("not a trusted folder"));
    for (op, cmd) in removal {
        h.done(op, Outcome::Git(cmd.no_repo_answer()));
    }
    h.settle();
    assert_eq!(h.take_reply(1, disposed).expect("dispose reply")["result"], Value::Null);
    let sessions: Vec<String> = h.host.view().sessions.iter().map(|(u, _)| u.clone()).collect();
    assert!(sessions.is_empty(), "{sessions:?}");
}

/// Only part of a repository is trusted (`/mono/pkg`): a worktree session
/// made there works in the same folder of its tree (`<tree>/pkg`), and only
/// that part of the tree is trusted, not its top.
#[test]
fn a_tree_cut_from_a_trusted_folder_of_a_repository_is_trusted_there_alone() {
    let mut h = Harness::new(trusting(&["/mono/pkg"]));
    h.connect(1, "c");
    let mono = RepoFacts { root: Some("/mono".into()), current_branch: Some("main".into()), default_branch: None, branches: vec!["main".into()], not_directories: Vec::new(), git_error: None };
    assert_eq!(create(&mut h, "p", "file:///mono/pkg", json!({"isolation": "worktree"}), mono.clone())["result"], Value::Null);
    let chat = "ahp-chat:/ahp-session@p";
    h.request(1, "subscribe", json!({"channel": chat}));
    h.start_turn(1, chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Begin { .. })]), "{cmds:?}");
    let tree = WorktreeRecord { path: "/mono.worktrees/agents-p".into(), branch: "agents/p".into(), name: "agents-p".into(), repo_root: "/mono".into(), ..Default::default() };
    h.done(cmds[0].0, Outcome::Git(GitResult::Begun { repo_root: Some("/mono".into()), worktree: Some(tree) }));
    let started = h.settle();
    assert!(
        started.iter().any(|(_, c)| matches!(c, ahpd_core::BackendCmd::Start { working_directory: Some(w), .. } if w == "file:///mono.worktrees/agents-p/pkg")),
        "the agent starts in the tree's pkg: {started:?}"
    );
    let record = h.host.view().sessions.get("ahp-session:/p").expect("session").record().clone();
    assert_eq!(*record.working_directories, ["file:///mono.worktrees/agents-p/pkg"]);
    assert_eq!(create(&mut h, "in-pkg", "file:///mono.worktrees/agents-p/pkg/src", json!({}), mono.clone())["result"], Value::Null);
    let message = refused(&create(&mut h, "top", "file:///mono.worktrees/agents-p", json!({}), mono));
    assert!(message.contains("not a trusted folder"), "{message}");
}

/// A session made in a window's own tree (a detached worktree) keeps
/// knowing the tree is the host's after a restart, when the window's
/// handles are gone: it is woken there while its repository is trusted.
#[test]
fn a_session_in_a_windows_tree_is_still_trusted_after_a_restart() {
    let mut h = Harness::new(trusting(&["/src/app"]));
    h.connect(1, "c");
    create(&mut h, "a", "file:///src/app", json!({"isolation": "worktree"}), repo_facts());
    let id = h.send_request(1, "vscode/createAgentHostDetachedWorktree", json!({"session": "ahp-session:/a", "prompt": "fix it"}));
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::MakeTree { .. })]), "{cmds:?}");
    let tree = WorktreeRecord { path: "/src/app.worktrees/fix-it".into(), branch: "agents/fix-it".into(), name: "fix-it".into(), repo_root: "/src/app".into(), ..Default::default() };
    h.done(cmds[0].0, Outcome::Git(GitResult::TreeMade { worktree: tree }));
    let reply = h.take_reply(1, id).expect("create reply");
    assert_eq!(reply["result"]["resource"], "file:///src/app.worktrees/fix-it", "{reply}");
    assert_eq!(create(&mut h, "b", "file:///src/app.worktrees/fix-it", json!({}), repo_facts())["result"], Value::Null);
    let chat = "ahp-chat:/ahp-session@b";
    h.request(1, "subscribe", json!({"channel": chat}));
    h.start_turn(1, chat, 1, "t1", "hi");
    for (op, command) in h.git_cmds() {
        assert!(matches!(command, GitCmd::Begin { .. }), "{command:?}");
        h.done(op, Outcome::Git(GitResult::Begun { repo_root: Some("/src/app.worktrees/fix-it".into()), worktree: None }));
    }
    h.settle();
    h.agent_reply(chat, "t1", "ok");
    for (op, _) in h.git_cmds() {
        h.done(op, Outcome::Git(GitResult::Checkpointed { changes: Changes::default() }));
    }
    h.settle();
    let record = h.host.view().sessions.get("ahp-session:/b").expect("session").record().clone();
    assert_eq!(record.in_tree.as_ref().map(|t| t.path.as_str()), Some("/src/app.worktrees/fix-it"));

    let mut again = Harness::with_records(trusting(&["/src/app"]), vec![record]);
    again.connect(1, "c");
    let r = again.send_request(1, "subscribe", json!({"channel": "ahp-session:/b"}));
    again.settle();
    let reply = again.take_reply(1, r).expect("subscribe reply");
    assert!(reply.get("result").is_some(), "woken in the window's tree: {reply}");
}
