//! What a worktree session's record says about its tree when the process
//! stopped between two writes (issue 19, sim seeds 80116 and 42704): a
//! chat that holds turns is never started over them in a tree, and a
//! client's move out of the tree is one write with the tree it leaves.

use std::collections::BTreeMap;

use ahpd_core::git::{GitCmd, GitResult, RepoFacts, WorktreeRecord};
use ahpd_core::session::state::replayed_turn;
use ahpd_core::{BackendCmd, Config, Outcome, StoreCmd};
use ahpd_core::testkit::Harness;
use serde_json::json;

fn repo_facts() -> RepoFacts {
    RepoFacts { root: Some("/src/app".into()), current_branch: Some("main".into()), default_branch: Some("main".into()), branches: vec!["main".into()], not_directories: Vec::new(), git_error: None }
}

fn tree(name: &str) -> WorktreeRecord {
    WorktreeRecord {
        path: format!("/src/app.worktrees/{name}"),
        branch: format!("agents/{name}"),
        base_commit: "abc123".into(),
        base_branch: "main".into(),
        name: name.into(),
        ..Default::default()
    }
}

/// Answers the one `Begin` git was asked for with `tree`.
fn answer_begin(h: &mut Harness, tree: WorktreeRecord) {
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::Begin { worktree: Some(_), .. })] => *op,
        other => panic!("a first send asks git for its tree: {other:?}"),
    };
    h.done(op, Outcome::Git(GitResult::Begun { repo_root: Some("/src/app".into()), worktree: Some(tree) }));
}

#[test]
fn a_chat_holding_turns_is_resumed_in_a_tree_its_lost_record_makes_again() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (_, chat) = h.create_in("w", "/src/app", json!({"isolation": "worktree"}), repo_facts());
    let mut disk = BTreeMap::new();
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "hello", "origin": {"kind": "user"}}}));
    h.durable(&mut disk);
    answer_begin(&mut h, tree("w-1"));
    // The write naming the tree fails; the agent runs t1 in the tree, and
    // the process stops before anything else is written. (t1 goes only once
    // a write naming the conversation the tree's start began is answered,
    // docs/DECISIONS.md 8, and that write names the tree too: here it is
    // answered and lost all the same, as by a disk that lied, so the
    // restart still reads a record without the tree under a chat that
    // holds turns.)
    for (op, _) in h.store_ops() {
        h.done(op, Outcome::Failed { message: "simulated disk error (EIO)".into() });
    }
    let mut started = h.settle_backend();
    for (op, _) in h.store_ops() {
        h.done(op, Outcome::Ok);
    }
    started.extend(h.settle_backend());
    assert!(started.iter().any(|(_, cmd)| matches!(cmd, BackendCmd::Send { turn_id, .. } if turn_id == "t1")), "{started:?}");

    let mut h = Harness::with_records(Config::default(), disk.into_values().collect());
    h.connect(1, "c");
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnStarted", "turnId": "t2", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "again", "origin": {"kind": "user"}}}));
    h.settle_store();
    // The wake resumes the conversation, which has t1.
    for (op, _, cmd) in h.backend_cmds() {
        if let BackendCmd::Start { conversation_id, resume, .. } = cmd {
            assert!(resume, "the wake resumes");
            h.done(op, Outcome::Started { conversation_id, history: vec![replayed_turn("t1".into(), None, "hello".into())] });
        }
    }
    h.settle_store();
    // The record forgot its tree: the send asks for one again, and the
    // chat, which holds t1, is resumed in it rather than started over.
    answer_begin(&mut h, tree("w-2"));
    h.settle_store();
    let starts: Vec<bool> = h.backend_cmds().into_iter().filter_map(|(_, _, cmd)| match cmd {
        BackendCmd::Start { resume, working_directory, .. } => {
            assert_eq!(working_directory.as_deref(), Some("file:///src/app.worktrees/w-2"));
            Some(resume)
        }
        _ => None,
    }).collect();
    assert_eq!(starts, [true], "the chat's agent is resumed in the tree, not started over its turns");
}

/// Worktree session `id` runs a turn in its tree `/src/app.worktrees/<id>-1`,
/// then a client moves it to `/src/other`; the move's writes are left
/// pending. Returns the session's URI.
fn moved_out_of_its_tree(h: &mut Harness, id: &str) -> String {
    h.connect(1, "c");
    let (uri, chat) = h.create_in(id, "/src/app", json!({"isolation": "worktree"}), repo_facts());
    h.start_turn(1, &chat, 1, "t1", "hello");
    answer_begin(h, tree(&format!("{id}-1")));
    h.settle();
    h.agent_reply(&chat, "t1", "Echo: hello");
    // The turn's checkpoint answered (as git outside a repository would).
    h.settle_no_repo();
    h.dispatch(1, &uri, 2, json!({"type": "session/workingDirectoryReplaced",
        "directory": format!("file:///src/app.worktrees/{id}-1"), "replacement": "file:///src/other"}));
    uri
}

#[test]
fn a_move_out_of_the_tree_is_written_with_the_tree_it_leaves_in_one_record() {
    let mut h = Harness::new(Config::default());
    moved_out_of_its_tree(&mut h, "m");
    let puts: Vec<_> = h.store_ops().into_iter().filter_map(|(_, c)| match c {
        StoreCmd::Put { record, .. } => Some(record),
        _ => None,
    }).collect();
    // The first write after the move is the one a stopped process leaves.
    let record = puts.first().unwrap_or_else(|| panic!("the move is written: {:?} {:?}", h.frames(1), h.pending));
    assert_eq!(*record.working_directories, ["file:///src/other"]);
    let git = record.git.as_ref().expect("git facts kept");
    assert!(git.moved && git.worktree.is_none(), "{git:?}");
    assert_eq!(git.former.iter().filter_map(|f| f.worktree.as_ref()).map(|w| w.path.as_str()).collect::<Vec<_>>(), ["/src/app.worktrees/m-1"]);
}

/// A dispose answers once the trees it takes off the disk are gone: a
/// client that reads the reply and looks finds no tree (tests/e2e_git.rs
/// saw a handed-over tree still there after the reply under load).
#[test]
fn a_dispose_answers_after_the_tree_it_left_is_removed() {
    let mut h = Harness::new(Config::default());
    // Moved out of its tree: the tree is now a folder it left.
    let uri = moved_out_of_its_tree(&mut h, "d");
    h.settle_no_repo();
    h.frames(1);
    let rid = h.send_request(1, "disposeSession", json!({"channel": uri}));
    h.settle();
    let cmds = h.git_cmds();
    let removal = cmds.iter().find_map(|(op, cmd)| match cmd {
        GitCmd::Dispose { worktree: Some(w), .. } if w.path == "/src/app.worktrees/d-1" => Some(*op),
        _ => None,
    });
    let removal = removal.unwrap_or_else(|| panic!("the tree it left is removed: {cmds:?}"));
    assert!(h.take_reply(1, rid).is_none(), "no reply before the tree is gone");
    for (op, cmd) in cmds {
        h.done(op, Outcome::Git(if op == removal { GitResult::Disposed { kept_tree: false } } else { cmd.no_repo_answer() }));
    }
    h.settle();
    let reply = h.take_reply(1, rid).expect("the dispose answers once its trees are gone");
    assert_eq!(reply["result"], serde_json::Value::Null, "{reply}");
}
