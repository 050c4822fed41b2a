//! The catalogue and paging (Sessions page, "Finding one").

use ahpd_core::Config;
use ahpd_core::testkit::Harness;
use proptest::prelude::*;
use serde_json::{json, Value};

fn walk(h: &mut Harness, limit: i64) -> (Vec<String>, usize) {
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut params = json!({"channel": "ahp-root://", "limit": limit});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let r = h.request(1, "listSessions", params);
        pages += 1;
        for row in r["result"]["items"].as_array().into_iter().flatten() {
            seen.push(row["resource"].as_str().unwrap_or("").to_owned());
        }
        match r["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return (seen, pages),
        }
        assert!(pages < 10_000, "the walk must end");
    }
}

/// Sessions all stamped at the same instant (the wall clock does not move).
fn same_time_sessions(n: usize) -> Harness {
    let mut h = Harness::new(Config { residency_limit: 0, ..Config::default() });
    h.connect(1, "c");
    for i in 0..n {
        let (_, chat) = h.create(1, &format!("s{i:03}"));
        h.start_turn(1, &chat, i as i64, "t", "hi");
        h.settle();
    }
    h
}

#[test]
fn identical_timestamps_page_without_skips_or_repeats() {
    let mut h = same_time_sessions(120);
    let (seen, pages) = walk(&mut h, 50);
    assert_eq!(pages, 3);
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 120);
    assert_eq!(seen.len(), 120);
}

#[test]
fn foreign_cursors_are_invalid_params() {
    let mut h = same_time_sessions(3);
    let r = h.request(1, "listSessions", json!({"channel": "ahp-root://", "limit": 1}));
    let good = r["result"]["nextCursor"].as_str().expect("cursor").to_owned();
    let mut flipped: Vec<char> = good.chars().collect();
    flipped[4] = if flipped[4] == 'a' { 'b' } else { 'a' };
    let flipped: String = flipped.into_iter().collect();
    for bad in ["abc", "", "Infinity", flipped.as_str()] {
        let r = h.request(1, "listSessions", json!({"channel": "ahp-root://", "cursor": bad}));
        assert_eq!(r["error"]["code"], -32602, "{bad:?}");
    }
    let r = h.request(1, "listSessions", json!({"channel": "ahp-root://", "limit": 0}));
    assert_eq!(r["error"]["code"], -32602);
}

#[test]
fn limits_are_capped_and_no_limit_is_the_whole_catalogue() {
    let mut h = same_time_sessions(7);
    let r = h.request(1, "listSessions", json!({"channel": "ahp-root://", "limit": 100000}));
    assert_eq!(r["result"]["items"].as_array().map(Vec::len), Some(7));
    assert_eq!(h.list(1).len(), 7);
}

#[test]
fn a_cursor_whose_row_was_disposed_continues_where_it_would_have_been() {
    let mut h = same_time_sessions(6);
    let r = h.request(1, "listSessions", json!({"channel": "ahp-root://", "limit": 2}));
    let first: Vec<String> = r["result"]["items"].as_array().into_iter().flatten().map(|x| x["resource"].as_str().unwrap_or("").to_owned()).collect();
    let cursor = r["result"]["nextCursor"].as_str().expect("cursor").to_owned();
    let rid = h.send_request(1, "disposeSession", json!({"channel": first[1]}));
    h.settle();
    assert_eq!(h.take_reply(1, rid).expect("reply")["result"], Value::Null);
    let r = h.request(1, "listSessions", json!({"channel": "ahp-root://", "limit": 10, "cursor": cursor}));
    let rest: Vec<String> = r["result"]["items"].as_array().into_iter().flatten().map(|x| x["resource"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(rest.len(), 4, "{rest:?}");
    assert!(!rest.contains(&first[0]));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Pager vs a model: a walk while sessions are added, modified and
    /// removed never repeats a row, ends, and yields every row that was
    /// there for the whole walk and never moved.
    #[test]
    fn a_walk_under_churn_never_repeats_and_ends(
        n in 3usize..25,
        limit in 1i64..6,
        churn in proptest::collection::vec((0u8..3, 0usize..40), 0..30),
    ) {
        let mut h = Harness::new(Config { residency_limit: 0, ..Config::default() });
        h.connect(1, "c");
        for i in 0..n {
            let (_, chat) = h.create(1, &format!("s{i}"));
            h.start_turn(1, &chat, 1, "t0", "hi");
            h.settle();
            h.advance(1);
        }
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut touched = std::collections::BTreeSet::new();
        let mut steps = churn.into_iter();
        let mut extra = 0;
        for _page in 0..1000 {
            let mut params = json!({"channel": "ahp-root://", "limit": limit});
            if let Some(c) = &cursor { params["cursor"] = json!(c); }
            let r = h.request(1, "listSessions", params);
            for row in r["result"]["items"].as_array().into_iter().flatten() {
                seen.push(row["resource"].as_str().unwrap_or("").to_owned());
            }
            if let Some((kind, i)) = steps.next() {
                let target = format!("ahp-session:/s{}", i % n);
                h.advance(1);
                match kind {
                    0 => { extra += 1; let (_, chat) = h.create(1, &format!("x{extra}")); h.start_turn(1, &chat, 1, "t0", "new"); h.settle(); }
                    1 if h.host.view().sessions.contains_key(&target) => {
                        touched.insert(target.clone());
                        let chat = format!("ahp-chat:/ahp-session@s{}", i % n);
                        h.start_turn(1, &chat, 1, &format!("t{extra}{i}{}", seen.len()), "more");
                        h.settle();
                        let turn = h.host.view().sessions.get(&target).expect("the session is held").resident().and_then(|r| r.chats[&chat].active_turn.as_ref().map(|t| t.id.clone()));
                        if let Some(turn) = turn { h.agent_reply(&chat, &turn, "ok"); }
                    }
                    2 if h.host.view().sessions.contains_key(&target) => {
                        touched.insert(target.clone());
                        let rid = h.send_request(1, "disposeSession", json!({"channel": target}));
                        h.settle();
                        prop_assert!(h.take_reply(1, rid).is_some());
                    }
                    _ => {}
                }
            }
            match r["result"]["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        prop_assert_eq!(unique.len(), seen.len(), "a row was repeated: {:?}", seen);
        for i in 0..n {
            let uri = format!("ahp-session:/s{i}");
            if !touched.contains(&uri) {
                prop_assert!(seen.contains(&uri), "{} was skipped", uri);
            }
        }
    }
}

mod owner_filter {
    use super::*;
    use ahpd_core::grants::{token_hash, Membership, Role, User, UsersDirectory};

    fn user(id: &str) -> User {
        User {
            id: id.into(),
            token_sha256: token_hash(&format!("token-{id}")),
            role: Role::Member,
            administrator: false,
            memberships: vec![Membership { team: "t".into(), project: id.into(), primary: true }],
        }
    }

    fn login(h: &mut Harness, conn: u64, id: &str) {
        h.connect(conn, &format!("client-{conn}"));
        let r = h.request(conn, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": format!("token-{id}")}));
        assert_eq!(r["result"], json!({}), "{r}");
    }

    /// Every page of `conn`'s own sessions, walked with `limit`.
    fn walk_mine(h: &mut Harness, conn: u64, limit: i64) -> Vec<Vec<String>> {
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = json!({"channel": "ahp-root://", "limit": limit, "_meta": {"ahpd.owner": "me"}});
            if let Some(c) = &cursor {
                params["cursor"] = json!(c);
            }
            let r = h.request(conn, "listSessions", params);
            let page: Vec<String> = r["result"]["items"].as_array().into_iter().flatten()
                .map(|row| row["resource"].as_str().unwrap_or("").to_owned()).collect();
            pages.push(page);
            match r["result"]["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => return pages,
            }
            assert!(pages.len() < 1_000, "the walk must end");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// The owner filter is applied before the limit: walking "mine"
        /// gives exactly my sessions, in catalogue order, every page but the
        /// last full, whatever the mix of owners.
        #[test]
        fn the_owner_filter_applies_before_the_limit(
            owners in proptest::collection::vec(any::<bool>(), 0..14),
            limit in 1i64..5,
        ) {
            let mut h = Harness::new(Config {
                users: Some(UsersDirectory { users: vec![user("me"), user("other")], plugins: Vec::new() }),
                residency_limit: 0,
                ..Config::default()
            });
            login(&mut h, 1, "me");
            login(&mut h, 2, "other");
            for (i, mine) in owners.iter().enumerate() {
                let conn = if *mine { 1 } else { 2 };
                let (_, chat) = h.create(conn, &format!("s{i:02}"));
                h.start_turn(conn, &chat, 1, "t", "hi");
                h.settle();
            }
            let (all, _) = walk(&mut h, 500);
            let expected: Vec<String> = all.into_iter()
                .filter(|u| u.strip_prefix("ahp-session:/s").and_then(|n| n.parse::<usize>().ok()).is_some_and(|i| owners[i]))
                .collect();
            let pages = walk_mine(&mut h, 1, limit);
            let got: Vec<String> = pages.iter().flatten().cloned().collect();
            prop_assert_eq!(&got, &expected);
            for page in &pages[..pages.len() - 1] {
                prop_assert_eq!(page.len() as i64, limit, "a page before the last is full: {:?}", pages);
            }
        }
    }
}
