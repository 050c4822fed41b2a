//! Swarm options: the scenario a seed picks before step 1 (docs/STYLE.md 3.6).
//! Every knob is drawn from the options stream, and some faults are switched
//! off entirely per seed so that rare interleavings are not drowned out.

use std::fmt;

use ahpd_core::config::{AgentSpec, Config};

use crate::rng::{SimRng, Stream};

/// Per-fault probabilities (0 = off for this seed) and fault timers.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// A fresh `Start` fails.
    pub start_fail: f64,
    /// A resuming `Start` fails.
    pub resume_fail: f64,
    /// A resume takes a long-tail delay.
    pub slow_resume: f64,
    /// An agent exits mid-turn (per streamed step).
    pub crash_mid_turn: f64,
    /// An agent reports background work for a while (per turn).
    pub busy_flap: f64,
    /// A `Done` reply is delayed far beyond the usual latency.
    pub late_done: f64,
    /// A `Done` reply is delivered twice.
    pub dup_done: f64,
    /// A client drops its connection when it next acts.
    pub client_disconnect: f64,
    /// A store write fails.
    pub store_fail: f64,
    /// A backend `Send` fails.
    pub send_fail: f64,
    /// An agent's output for a turn is still in flight when the turn is
    /// cancelled: one more event for the finished turn arrives.
    pub stale_event: f64,
    /// A backend `Delete` answers Ok but its copy of the conversation
    /// stays (a transcript its CLI keeps, or one put back from a backup):
    /// the disposed session must stay disposed across rescans and restarts.
    pub delete_keeps_copy: f64,
    /// A git command fails (`Outcome::Failed`) before it runs.
    pub git_fail: f64,
    /// Mean sim time between host crashes, in ms (`None` = no crashes).
    pub host_crash_mean_ms: Option<u64>,
    /// Mean sim time between wall-clock jumps, in ms (`None` = no jumps).
    pub wall_jump_mean_ms: Option<u64>,
    /// A registry scan fails (`session_awareness_error`).
    pub registry_fail: f64,
    /// At a host restart, the operator narrowed the trusted folders: one
    /// entry of the list is gone (a host trusting every folder starts
    /// trusting one list): sessions read back in a folder no longer
    /// trusted are not woken (Sessions page, "Isolation and worktrees").
    pub trust_narrows: f64,
    /// The host is killed right after a store write made a chat durable in
    /// a second session's record, before it hears that the write landed:
    /// a crash between the two writes of a `moveChat` to another session
    /// (docs/DECISIONS.md, 17), which random crashes hit a handful of
    /// times in 2,000 seeds. Restore must keep the copy with the higher
    /// move generation (`restore_moved_chat_settled`).
    pub crash_between_move_writes: f64,
    /// An echo conversation's transcript found damaged when a start
    /// resumes it (`Outcome::TranscriptDamaged`, issue 25): it stays
    /// damaged for later resumes until restored (as from a backup: a
    /// chance per resume, and at once when faults heal).
    pub transcript_damaged: f64,
}

impl Faults {
    /// Every fault off (the heal phase).
    pub fn none() -> Faults {
        Faults {
            start_fail: 0.0,
            resume_fail: 0.0,
            slow_resume: 0.0,
            crash_mid_turn: 0.0,
            busy_flap: 0.0,
            late_done: 0.0,
            dup_done: 0.0,
            client_disconnect: 0.0,
            store_fail: 0.0,
            send_fail: 0.0,
            stale_event: 0.0,
            delete_keeps_copy: 0.0,
            git_fail: 0.0,
            host_crash_mean_ms: None,
            wall_jump_mean_ms: None,
            registry_fail: 0.0,
            trust_narrows: 0.0,
            crash_between_move_writes: 0.0,
            transcript_damaged: 0.0,
        }
    }
}

/// The scenario of one seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The run seed.
    pub seed: u64,
    /// Simulated clients (1..=6).
    pub clients: usize,
    /// Size of the session id space (`ahp-session:/s<N>`).
    pub session_ids: u64,
    /// Whether the id space is hot (3-5 ids, forcing URI collisions).
    pub hot: bool,
    /// The core's `residency_limit` (0 = off).
    pub residency_limit: usize,
    /// The core's `sleep_after_ms` (0 = never sleep).
    pub sleep_after_ms: u64,
    /// The core's `residency_sweep_ms`.
    pub residency_sweep_ms: u64,
    /// The core's `replay_buffer_len`.
    pub replay_buffer_len: usize,
    /// The core's `Limits::replay_buffer_max_bytes` (issue 25): small now
    /// and then, so the byte bound, not the count, ends the window, and
    /// now and then below one envelope's size.
    pub replay_buffer_max_bytes: usize,
    /// The core's `list_limit_max`.
    pub list_limit_max: usize,
    /// The core's `scan_interval_ms` (transcript passes behind listings).
    pub scan_interval_ms: u64,
    /// The core's `scan_merge_slice`: rows (and sessions walked) a pass
    /// merges per input; mostly a few, so a pass's merge spans many inputs
    /// and other inputs come between its slices.
    pub scan_merge_slice: usize,
    /// Whether a second, non-resumable agent is offered.
    pub non_resumable_agent: bool,
    /// Probability that a fresh conversation gets a backend-assigned id.
    pub backend_assigns_id: f64,
    /// Mean client think time between actions, in ms.
    pub think_ms: u64,
    /// Mean one-way network latency, in ms.
    pub net_ms: u64,
    /// Mean backend reply latency, in ms.
    pub backend_ms: u64,
    /// Mean store write latency, in ms.
    pub store_ms: u64,
    /// Steps of the safety phase (faults on).
    pub safety_steps: u64,
    /// Step budget of the liveness phase (faults off, no new work).
    pub liveness_steps: u64,
    /// The faults of the safety phase.
    pub faults: Faults,
    /// The users directory and who each client signs in as (`None`: a host
    /// with no users directory; `users.rs`).
    pub users: Option<crate::users::Cast>,
    /// Workspace awareness: on or off, heartbeat, foreign peers, tiers.
    pub awareness: crate::registry::AwarenessOptions,
    /// The simulated machine's git (`sim/src/git.rs`).
    pub git: GitOptions,
    /// Whether clients make and run automations (issue 24).
    pub automations: bool,
}

/// The simulated machine's repositories and folder trust.
#[derive(Debug, Clone, PartialEq)]
pub struct GitOptions {
    /// Whether the machine has repositories (off: every folder is in none,
    /// as before the simulated git).
    pub repos: bool,
    /// `/work/repo1`'s `origin/HEAD` names `dev` (else `main`).
    pub remote_default_dev: bool,
    /// `/work/repo2`'s HEAD is detached.
    pub detached: bool,
    /// Mean git answer latency, in ms.
    pub git_ms: u64,
    /// The core's `trust.folders` (`None`: every folder trusted).
    pub trusted_folders: Option<Vec<String>>,
    /// Probability that a client's `createSession` asks for a folder of
    /// the machine (else the old `/work/a`, `/work/b` or none).
    pub in_folders: f64,
    /// Probability that such a session asks `isolation: worktree`.
    pub worktree: f64,
}

/// Trust lists a seed may draw: some folders trusted, others not.
pub const TRUST_LISTS: [&[&str]; 5] = [
    &["/work/repo1"],
    &["/work/repo1", "/work/plain", "/work/a"],
    &["/work/repo1/pkg", "/work/repo2"],
    &["/work"],
    &[],
];

/// Probability that a fault kind is switched off for a whole seed.
const FAULT_OFF: f64 = 0.35;

fn fault(rng: &mut SimRng, lo: f64, hi: f64) -> f64 {
    if rng.chance(FAULT_OFF) {
        0.0
    } else {
        lo + (hi - lo) * rng.unit()
    }
}

impl Options {
    /// Draws the scenario of `seed` from its options stream.
    pub fn from_seed(seed: u64) -> Options {
        let mut rng = SimRng::new(seed, Stream::Options);
        let clients = rng.range(1, 6) as usize;
        let hot = rng.chance(0.6);
        let session_ids = if hot { rng.range(3, 5) } else { rng.range(20, 200) };
        let residency_limit = if rng.chance(0.85) { rng.range(0, 3) as usize } else { rng.range(4, 10) as usize };
        let sleep_after_ms = if rng.chance(0.1) { 0 } else { rng.range(50, 2000) };
        let faults = Faults {
            start_fail: fault(&mut rng, 0.02, 0.3),
            resume_fail: fault(&mut rng, 0.02, 0.4),
            slow_resume: fault(&mut rng, 0.02, 0.3),
            crash_mid_turn: fault(&mut rng, 0.005, 0.05),
            busy_flap: fault(&mut rng, 0.05, 0.4),
            late_done: fault(&mut rng, 0.01, 0.1),
            dup_done: fault(&mut rng, 0.01, 0.1),
            client_disconnect: fault(&mut rng, 0.005, 0.05),
            store_fail: fault(&mut rng, 0.01, 0.2),
            send_fail: fault(&mut rng, 0.01, 0.1),
            stale_event: fault(&mut rng, 0.1, 0.8),
            delete_keeps_copy: 0.0,
            git_fail: 0.0,
            host_crash_mean_ms: if rng.chance(0.5) { None } else { Some(rng.range(3_000, 30_000)) },
            wall_jump_mean_ms: if rng.chance(0.5) { None } else { Some(rng.range(1_000, 20_000)) },
            registry_fail: 0.0,
            trust_narrows: 0.0,
            crash_between_move_writes: 0.0,
            transcript_damaged: 0.0,
        };
        // Awareness is drawn from its own stream so that its knobs never
        // shift the values of the others.
        let awareness = crate::registry::AwarenessOptions::from_seed(seed);
        let mut faults = faults;
        faults.registry_fail = awareness.registry_fail;
        // Drawn last, so the draws above are those of the seed before the
        // simulated git existed.
        faults.git_fail = fault(&mut rng, 0.01, 0.15);
        let repos = !rng.chance(0.25);
        let git = GitOptions {
            repos,
            remote_default_dev: rng.chance(0.5),
            detached: rng.chance(0.3),
            git_ms: rng.range(1, 60),
            trusted_folders: if rng.chance(0.7) { None } else { Some(TRUST_LISTS[rng.below(TRUST_LISTS.len() as u64) as usize].iter().map(|f| (*f).to_owned()).collect()) },
            in_folders: if repos { 0.3 + 0.6 * rng.unit() } else { 0.3 },
            worktree: rng.unit(),
        };
        let mut options = Options {
            git,
            seed,
            clients,
            session_ids,
            hot,
            residency_limit,
            sleep_after_ms,
            residency_sweep_ms: rng.range(100, 5_000),
            replay_buffer_len: if rng.chance(0.3) { rng.range(1, 20) as usize } else { 1000 },
            replay_buffer_max_bytes: ahpd_core::config::REPLAY_BUFFER_MAX_BYTES,
            list_limit_max: rng.range(2, 500) as usize,
            scan_interval_ms: rng.range(200, 20_000),
            scan_merge_slice: ahpd_core::config::SCAN_MERGE_SLICE,
            non_resumable_agent: rng.chance(0.3),
            backend_assigns_id: if rng.chance(0.5) { 0.0 } else { 0.5 },
            think_ms: rng.range(20, 400),
            net_ms: rng.range(1, 20),
            backend_ms: rng.range(1, 80),
            store_ms: rng.range(1, 40),
            safety_steps: rng.range(800, 2_500),
            liveness_steps: 20_000,
            faults,
            users: crate::users::Cast::draw(seed, clients),
            awareness,
            automations: false,
        };
        // Drawn last, so the draws above keep their values.
        options.faults.delete_keeps_copy = fault(&mut rng, 0.2, 0.8);
        options.faults.trust_narrows = fault(&mut rng, 0.1, 0.6);
        // Drawn after those, for the same reason: a quarter of the seeds
        // merge a pass in one input (the daemon's slice is far bigger than
        // a simulated pass), the rest a few rows or sessions at a time.
        options.scan_merge_slice = match rng.below(4) {
            0 => ahpd_core::config::SCAN_MERGE_SLICE,
            _ => rng.range(1, 6) as usize,
        };
        // Drawn last for the same reason (issue 23, a move's two writes).
        options.faults.crash_between_move_writes = fault(&mut rng, 0.3, 0.9);
        // Drawn last for the same reason (issue 24, automations).
        options.automations = rng.chance(0.4);
        // Drawn last for the same reason (issue 25, the replay buffer's
        // byte bound): the sim's envelopes are 100 B to a few KB.
        if rng.chance(0.3) {
            options.replay_buffer_max_bytes = rng.range(200, 8_000) as usize;
        }
        // Drawn last for the same reason (issue 25, damaged transcripts).
        options.faults.transcript_damaged = fault(&mut rng, 0.02, 0.25);
        options
    }

    /// The core's settings for this scenario.
    pub fn config(&self) -> Config {
        let mut agents = vec![AgentSpec::echo()];
        if self.non_resumable_agent {
            agents.push(AgentSpec {
                provider: "oneshot".to_owned(),
                display_name: "One-shot".to_owned(),
                description: "A simulated agent that cannot resume.".to_owned(),
                can_resume: false,
                // As an ACP agent: many chats, none forked or moved.
                multiple_chats: true,
                peer_directories: false,
                forgets: false,
                forks: false,
                resumes_turns: false,
                moves_chats: false,
                steers: false,
            });
        }
        Config {
            host_name: "sim".to_owned(),
            agents,
            sleep_after_ms: self.sleep_after_ms,
            residency_limit: self.residency_limit,
            residency_sweep_ms: self.residency_sweep_ms,
            replay_buffer_len: self.replay_buffer_len,
            list_limit_max: self.list_limit_max,
            list_default_max: 1000,
            turns_page_len: 3,
            cursor_secret: b"sim-cursor-secret".to_vec(),
            scan_interval_ms: self.scan_interval_ms,
            scan_merge_slice: self.scan_merge_slice,
            users: self.users.as_ref().map(|u| u.directory.clone()),
            host_token_sha256: self.users.as_ref().map(|_| ahpd_core::grants::token_hash(crate::users::HOST_TOKEN)),
            awareness: self.awareness.config(),
            trust: match &self.git.trusted_folders {
                Some(list) => ahpd_core::trust::Trust::of(list),
                None => ahpd_core::trust::Trust::default(),
            },
            // Small, so a client's queue reaches the limit (issue 23).
            limits: ahpd_core::config::Limits {
                queued_messages_per_chat: 4,
                replay_buffer_max_bytes: self.replay_buffer_max_bytes,
                message_text_max_bytes: SIM_MESSAGE_TEXT_MAX_BYTES,
                ..Default::default()
            },
            ..Config::default()
        }
    }
}

impl fmt::Display for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |x: f64| if x == 0.0 { "off".to_owned() } else { format!("{x:.3}") };
        let ms = |x: Option<u64>| x.map_or("off".to_owned(), |v| format!("{v}ms"));
        writeln!(
            f,
            "options: clients={} ids={}({}) residency_limit={} sleep_after_ms={} sweep_ms={} replay_len={} replay_bytes={} list_max={} scan_ms={} merge_slice={} oneshot={} think={}ms net={}ms backend={}ms store={}ms safety_steps={} liveness_steps={}",
            self.clients,
            self.session_ids,
            if self.hot { "hot" } else { "cold" },
            self.residency_limit,
            self.sleep_after_ms,
            self.residency_sweep_ms,
            self.replay_buffer_len,
            self.replay_buffer_max_bytes,
            self.list_limit_max,
            self.scan_interval_ms,
            self.scan_merge_slice,
            self.non_resumable_agent,
            self.think_ms,
            self.net_ms,
            self.backend_ms,
            self.store_ms,
            self.safety_steps,
            self.liveness_steps,
        )?;
        let g = &self.git;
        writeln!(
            f,
            "git: repos={} origin_head={} repo2_detached={} git={}ms trusted={} in_folders={:.2} worktree={:.2}",
            g.repos,
            if g.remote_default_dev { "dev" } else { "main" },
            g.detached,
            g.git_ms,
            g.trusted_folders.as_ref().map_or("all".to_owned(), |l| format!("{l:?}")),
            g.in_folders,
            g.worktree,
        )?;
        let x = &self.faults;
        write!(
            f,
            "faults: start_fail={} resume_fail={} slow_resume={} crash_mid_turn={} busy_flap={} late_done={} dup_done={} disconnect={} store_fail={} send_fail={} stale_event={} delete_keeps_copy={} git_fail={} host_crash={} wall_jump={} registry_fail={} trust_narrows={} crash_between_move_writes={} transcript_damaged={}",
            p(x.start_fail),
            p(x.resume_fail),
            p(x.slow_resume),
            p(x.crash_mid_turn),
            p(x.busy_flap),
            p(x.late_done),
            p(x.dup_done),
            p(x.client_disconnect),
            p(x.store_fail),
            p(x.send_fail),
            p(x.stale_event),
            p(x.delete_keeps_copy),
            p(x.git_fail),
            ms(x.host_crash_mean_ms),
            ms(x.wall_jump_mean_ms),
            p(x.registry_fail),
            p(x.trust_narrows),
            p(x.crash_between_move_writes),
            p(x.transcript_damaged),
        )?;
        match &self.users {
            Some(cast) => write!(f, "\n{cast}")?,
            None => write!(f, "\nusers: no directory")?,
        }
        write!(f, "\n{}", self.awareness)
    }
}

/// The sim host's cap on a message's text (`limits.message_text_max_bytes`),
/// in bytes: small, so that a sim client's message over it (its 7th,
/// 20th, ... turn) stays cheap to send (issue 25's caps).
pub const SIM_MESSAGE_TEXT_MAX_BYTES: usize = 2048;
