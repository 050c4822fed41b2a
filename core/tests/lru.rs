//! The residency limit's LRU order against a naive model (issue 11,
//! "proptest model tests"): a list of sessions in order of last use, moved
//! to the back on every use, whose front goes first.

mod harness;

use std::collections::BTreeSet;

use ahpd_core::lru::least_recent;
use ahpd_core::Config;
use harness::Harness;
use proptest::prelude::*;
use serde_json::json;

/// The naive model: keys in order of last use, oldest first.
#[derive(Debug, Default)]
struct Model {
    order: Vec<u8>,
}

impl Model {
    fn touch(&mut self, k: u8) {
        self.order.retain(|x| *x != k);
        self.order.push(k);
    }

    /// The least recently used key among `allowed`.
    fn lru(&self, allowed: &BTreeSet<u8>) -> Option<u8> {
        self.order.iter().copied().find(|k| allowed.contains(k))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Stamps from one increasing counter and `least_recent` pick what the
    /// model's front picks, for any use history and any candidate set.
    #[test]
    fn least_recent_is_the_front_of_the_recency_list(
        uses in proptest::collection::vec(0u8..8, 0..40),
        candidates in proptest::collection::btree_set(0u8..8, 0..8),
    ) {
        let mut clock = 0u64;
        let mut stamps = [0u64; 8];
        let mut model = Model::default();
        for k in &uses {
            clock += 1;
            stamps[*k as usize] = clock;
            model.touch(*k);
        }
        // Keys never used are stamped 0 and come first, smallest key first.
        let mut expected: Option<u8> = candidates.iter().copied().find(|k| !uses.contains(k));
        if expected.is_none() {
            expected = model.lru(&candidates);
        }
        let got = least_recent(candidates.iter().map(|k| (k, stamps[*k as usize]))).copied();
        prop_assert_eq!(got, expected);
    }
}

fn uri(k: u8) -> String {
    format!("ahp-session:/s{k}")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The host's resident set follows the model through creations (a start
    /// and a turn are uses) and subscriptions (a use, and a wake for an
    /// evicted session): whenever more than `limit` sessions hold state,
    /// the least recently used unwatched one is let go.
    #[test]
    fn the_host_evicts_in_lru_order(limit in 1usize..4, uses in proptest::collection::vec(0u8..6, 1..24)) {
        let mut h = Harness::new(Config { residency_limit: limit, sleep_after_ms: 0, ..Config::default() });
        h.connect(1, "c");
        let mut model = Model::default();
        let mut resident: BTreeSet<u8> = BTreeSet::new();
        let mut created: BTreeSet<u8> = BTreeSet::new();
        for (step, k) in uses.iter().copied().enumerate() {
            if created.insert(k) {
                let (_, chat) = h.create(1, &format!("s{k}"));
                h.start_turn(1, &chat, 1, "t1", "hello");
                h.settle_backend();
                h.agent_reply(&chat, "t1", "Echo: hello");
                h.settle();
            } else {
                let id = h.send_request(1, "subscribe", json!({"channel": uri(k)}));
                h.settle();
                let reply = h.take_reply(1, id).expect("subscribe answered");
                prop_assert!(reply["result"].is_object(), "{}", reply);
                h.request(1, "unsubscribe", json!({"channel": uri(k)}));
                h.settle();
            }
            model.touch(k);
            resident.insert(k);
            while resident.len() > limit {
                let others: BTreeSet<u8> = resident.iter().copied().filter(|x| *x != k).collect();
                let victim = model.lru(&others).expect("a victim");
                resident.remove(&victim);
            }
            let view = h.host.view();
            let held: BTreeSet<u8> = created.iter().copied().filter(|c| view.sessions.get(&uri(*c)).expect("the session is held").resident.is_some()).collect();
            prop_assert_eq!(&held, &resident, "after step {} (use of s{}), limit {}", step, k, limit);
        }
    }
}
