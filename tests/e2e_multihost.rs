//! Many machines (issue 22, docs/SCALING.md): one ahpd per machine and a
//! client fleet through the official `ahp::hosts::MultiHostClient`. Three
//! daemons with three sessions each are aggregated into one inbox with each
//! row's host; one daemon is killed (-9) and started again on its address,
//! and the multi-host client reconnects to it by itself: its old sessions
//! and the ones made after the restart are all in the inbox.

mod common;

use common::*;

use std::collections::BTreeMap;
use std::time::Duration;

use ahp::hosts::{Backoff, HostConfig, HostId, HostState, MultiHostClient, ReconnectPolicy};
use ahp::transport::BoxedTransport;
use ahp::TransportError;

/// Three listed sessions on the daemon at `url` (a turn each: a session is
/// listed from its first turn).
async fn three_sessions(url: &str, tag: &str) -> Vec<String> {
    let (c, _, _root) = connect_init(url, &format!("seed-{tag}")).await;
    let mut made = Vec::new();
    for i in 0..3 {
        let (sid, chat, _ssub, _state, mut csub) = new_session(&c).await;
        turn(&c, &chat, &mut csub, "t1", &format!("{tag} session {i}")).await;
        made.push(sid);
    }
    c.shutdown().await;
    made.sort();
    made
}

/// The aggregated rows by host id, each host's session URIs sorted.
async fn by_host(fleet: &MultiHostClient) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in fleet.aggregated_sessions().await {
        out.entry(row.host_id.as_str().to_owned()).or_default().push(row.summary.resource.clone());
    }
    for rows in out.values_mut() {
        rows.sort();
    }
    out
}

/// Waits until `fleet` aggregates exactly `want`.
async fn until_aggregated(fleet: &MultiHostClient, what: &str, want: &BTreeMap<String, Vec<String>>) {
    within(what, async {
        loop {
            if &by_host(fleet).await == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// A host of the fleet at `url`, reconnecting quickly after a drop.
fn host(id: &str, url: String) -> HostConfig {
    let open = move |_id: HostId| {
        let url = url.clone();
        async move {
            let ws = ahp_ws::WebSocketTransport::connect(&url).await.map_err(|e| TransportError::Io(e.to_string()))?;
            Ok::<_, TransportError>(BoxedTransport::new(ws))
        }
    };
    HostConfig::new(id, format!("machine {id}"), open).with_reconnect_policy(ReconnectPolicy {
        backoff: Backoff::Exponential { initial: Duration::from_millis(100), max: Duration::from_millis(500), multiplier: 2.0 },
        jitter: 0.0,
        max_attempts: None,
        reset_on_success: true,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_daemons_is_one_inbox_and_a_killed_one_comes_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut daemons = Vec::new();
    let mut want = BTreeMap::new();
    for name in ["a", "b", "c"] {
        let data = tmp.path().join(name);
        let d = Daemon::start_with(&data, &["--awareness-dir", ""]);
        want.insert(name.to_owned(), three_sessions(&d.url, name).await);
        daemons.push((name, data, d));
    }

    let fleet = MultiHostClient::new();
    for (name, _, d) in &daemons {
        within("add_host", fleet.add_host(host(name, d.url.clone()))).await.expect("add_host");
    }
    until_aggregated(&fleet, "the fleet's inbox", &want).await;
    let rows = fleet.aggregated_sessions().await;
    assert_eq!(rows.len(), 9);
    assert!(rows.iter().all(|r| r.host_label == format!("machine {}", r.host_id.as_str())), "each row names its host");
    assert!(rows.windows(2).all(|w| w[0].summary.modified_at >= w[1].summary.modified_at), "newest first across hosts");

    // Machine b dies; the others stay listed; b is restarted on the same
    // address and the fleet reconnects to it by itself.
    let (_, data_b, mut b) = daemons.remove(1);
    let listen = b.addr.clone();
    b.kill();
    drop(b);
    within("b seen down", async {
        loop {
            if let Some(h) = fleet.host(&HostId::new("b")).await {
                if !matches!(h.state, HostState::Connected) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let b = Daemon::start_at(&listen, &data_b, &["--awareness-dir", ""], &[]);
    within("b reconnected", async {
        loop {
            if fleet.host(&HostId::new("b")).await.is_some_and(|h| matches!(h.state, HostState::Connected)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // Live again through the new connection: a session made on b now
    // reaches the inbox (its root notifications, or the relisting).
    let more = three_sessions(&b.url, "b-again").await;
    want.get_mut("b").expect("b").extend(more);
    want.get_mut("b").expect("b").sort();
    until_aggregated(&fleet, "b's old and new sessions in the inbox", &want).await;
    assert_eq!(fleet.aggregated_sessions().await.len(), 12);
    drop(b);
    drop(daemons);
}
