//! The whole core: arbitrary frames from a few connections, interleaved
//! with ticks and answers to every command it issues, with every invariant
//! checked after every input. (The seeded schedules with faults live in
//! `sim/`; this target lets libFuzzer search the input space.)
#![no_main]
use ahpd_core::{BackendCmd, Config, ConnId, Effect, Host, Input, MonoTime, Now, Outcome, WallTime};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut now = Now { mono: MonoTime(0), wall: WallTime(1_767_225_600_000) };
    let config = Config { sleep_after_ms: 50, residency_limit: 2, ..Config::default() };
    let mut host = Host::new(config, 7, Vec::new(), now);
    let mut pending = Vec::new();
    for conn in 0..3 {
        pending.extend(host.handle(now, Input::Connected { conn: ConnId(conn) }));
        let init = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"channel":"ahp-root://","protocolVersions":["1.0.0"],"clientId":"c{conn}","initialSubscriptions":["ahp-root://"]}}}}"#);
        pending.extend(host.handle(now, Input::Frame { conn: ConnId(conn), text: init }));
    }
    // Each chunk: one control byte, then a frame up to the next 0xFF.
    for chunk in data.split(|b| *b == 0xFF).take(64) {
        let Some((&control, rest)) = chunk.split_first() else { continue };
        now.mono = now.mono.plus_ms(u64::from(control % 40));
        now.wall = WallTime(now.wall.0 + i64::from(control % 40) - 10);
        let input = match control % 4 {
            0 => Input::Tick,
            _ => Input::Frame { conn: ConnId(u64::from(control % 3)), text: String::from_utf8_lossy(rest).into_owned() },
        };
        pending.extend(host.handle(now, input));
        // Answer everything the host asked for, in order.
        let effects: Vec<Effect> = std::mem::take(&mut pending);
        for effect in effects {
            let done = match effect {
                Effect::Backend { op, command: BackendCmd::Start { conversation_id, .. }, .. } => {
                    Some((op, Outcome::Started { conversation_id, history: Vec::new() }))
                }
                Effect::Backend { op, .. } | Effect::Store { op, .. } => Some((op, Outcome::Ok)),
                // No repository and no registry here: git answers as a
                // failure (a folder session's turn still runs), the registry
                // as done.
                Effect::Git { op, .. } => Some((op, Outcome::Failed { message: "no git in the fuzzer".to_owned() })),
                Effect::Registry { op, .. } => Some((op, Outcome::Ok)),
                _ => None,
            };
            if let Some((op, outcome)) = done {
                pending.extend(host.handle(now, Input::Done { op, outcome }));
            }
        }
        if let Err(v) = ahpd_core::invariants::check_all(&host.view()) {
            panic!("invariant {} broken: {}", v.rule, v.detail);
        }
    }
});
