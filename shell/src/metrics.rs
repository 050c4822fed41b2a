//! Counters for `/metrics`, kept by the driver: requests by method and
//! error code and their latency (measured from the frame's arrival at the
//! driver to its reply leaving it), and the Prometheus text rendering. The
//! session counts come from the core's view (`Host::view()`); nothing here
//! decides anything about sessions.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::time::Instant;

use ahpd_core::protocol::codec::Method;
use ahpd_core::session::Phase;
use ahpd_core::{ConnId, HostView};

/// Upper bounds of the latency histogram's buckets, in seconds.
const BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The method label for `method`: its name for the requests counted by
/// name, `other` for every other method, known or not (so a client cannot
/// grow the label set, and the labels stay those the dashboards know).
pub fn method_label(method: &Method) -> &'static str {
    match method {
        Method::Ping
        | Method::Initialize
        | Method::Reconnect
        | Method::Authenticate
        | Method::Subscribe
        | Method::Unsubscribe
        | Method::CreateSession
        | Method::DisposeSession
        | Method::ListSessions
        | Method::FetchTurns
        | Method::CreateChat
        | Method::DisposeChat => method.known_name().unwrap_or("other"),
        _ => "other",
    }
}

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }
}

/// The request counters and the latency histograms.
#[derive(Debug, Default)]
pub struct Metrics {
    in_flight: HashMap<(ConnId, u64), (&'static str, Instant)>,
    /// (method, code) → replies; code is `ok` or the JSON-RPC error code.
    requests: BTreeMap<(&'static str, String), u64>,
    latency: BTreeMap<&'static str, Histogram>,
}

impl Metrics {
    /// A request `id` arrived on `conn`, counted under `label` (its
    /// method's [`method_label`]).
    pub fn request_in(&mut self, conn: ConnId, id: u64, label: &'static str) {
        self.in_flight.insert((conn, id), (label, Instant::now()));
    }

    /// The reply to request `id` on `conn` left; `code` is `None` for a
    /// result, else the error code. A reply with no readable id (`None`)
    /// counts as method `invalid`.
    pub fn reply_out(&mut self, conn: ConnId, id: Option<u64>, code: Option<i64>) {
        let code = code.map(|c| c.to_string()).unwrap_or_else(|| "ok".to_owned());
        let method = match id.and_then(|id| self.in_flight.remove(&(conn, id))) {
            Some((method, at)) => {
                self.latency.entry(method).or_default().observe(at.elapsed().as_secs_f64());
                method
            }
            None if id.is_none() => "invalid",
            None => "other",
        };
        *self.requests.entry((method, code)).or_default() += 1;
    }

    /// The connection is gone: its unanswered requests are forgotten.
    pub fn forget_conn(&mut self, conn: ConnId) {
        self.in_flight.retain(|(c, _), _| *c != conn);
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self, view: &HostView<'_>, clients: usize) -> String {
        let mut o = String::new();
        let mut phases: BTreeMap<&'static str, u64> =
            ["starting", "live", "asleep", "waking", "disposing"].into_iter().map(|p| (p, 0)).collect();
        let mut resident = 0u64;
        for s in view.sessions.values() {
            *phases.entry(phase_name(s.phase())).or_default() += 1;
            if s.resident().is_some() {
                resident += 1;
            }
        }
        let stats = view.stats;
        let _ = writeln!(o, "# HELP ahpd_sessions Sessions this host knows, by phase (live: agents running; asleep: agents let go).");
        let _ = writeln!(o, "# TYPE ahpd_sessions gauge");
        for (phase, n) in &phases {
            let _ = writeln!(o, "ahpd_sessions{{phase=\"{phase}\"}} {n}");
        }
        gauge(&mut o, "ahpd_sessions_resident", "Sessions whose state is held in memory.", resident);
        counter(&mut o, "ahpd_session_sleeps_total", "Sessions put to sleep after being idle.", stats.sleeps);
        counter(&mut o, "ahpd_residency_evictions_total", "Sessions evicted by the residency limit.", stats.evictions);
        counter(&mut o, "ahpd_session_wakes_total", "Sessions woken (resumed) successfully.", stats.wakes);
        counter(&mut o, "ahpd_session_failed_resumes_total", "Wakes whose resume failed.", stats.failed_resumes);
        counter(&mut o, "ahpd_action_rejections_total", "Client actions rejected.", stats.rejections);
        gauge(&mut o, "ahpd_connected_clients", "WebSocket clients connected now.", clients as u64);
        counter(&mut o, "ahpd_fsyncs_total", "Fsyncs of files and directories made by this process.", crate::exec::fsutil::fsyncs());
        let _ = writeln!(o, "# HELP ahpd_http_refused_total Requests the front door refused, by reason (host: a foreign Host, DNS rebinding; origin: a web page of a foreign origin; token: no or a wrong connection token).");
        let _ = writeln!(o, "# TYPE ahpd_http_refused_total counter");
        for (reason, n) in crate::exec::net::refused_counts() {
            let _ = writeln!(o, "ahpd_http_refused_total{{reason=\"{reason}\"}} {n}");
        }
        let _ = writeln!(o, "# HELP ahpd_requests_total JSON-RPC requests answered, by method and code (ok or the error code).");
        let _ = writeln!(o, "# TYPE ahpd_requests_total counter");
        for ((method, code), n) in &self.requests {
            let _ = writeln!(o, "ahpd_requests_total{{method=\"{method}\",code=\"{code}\"}} {n}");
        }
        let _ = writeln!(o, "# HELP ahpd_request_duration_seconds Time from a request frame's arrival to its reply, by method.");
        let _ = writeln!(o, "# TYPE ahpd_request_duration_seconds histogram");
        for (method, h) in &self.latency {
            for (i, bound) in BUCKETS.iter().enumerate() {
                let n = h.counts.get(i).copied().unwrap_or(0);
                let _ = writeln!(o, "ahpd_request_duration_seconds_bucket{{method=\"{method}\",le=\"{bound}\"}} {n}");
            }
            let _ = writeln!(o, "ahpd_request_duration_seconds_bucket{{method=\"{method}\",le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(o, "ahpd_request_duration_seconds_sum{{method=\"{method}\"}} {}", h.sum);
            let _ = writeln!(o, "ahpd_request_duration_seconds_count{{method=\"{method}\"}} {}", h.count);
        }
        o
    }
}

fn phase_name(p: &Phase) -> &'static str {
    p.name()
}

fn gauge(o: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

fn counter(o: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
}
