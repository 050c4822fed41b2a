//! The whole core: arbitrary frames from a few connections, interleaved
//! with ticks and answers to every command it issues, with every invariant
//! checked after every input (the core's one test driver,
//! `ahpd_core::testkit`). (The seeded schedules with faults live in
//! `sim/`; this target lets libFuzzer search the input space.)
#![no_main]
use ahpd_core::testkit::Harness;
use ahpd_core::{Config, ConnId, Input, Outcome, WallTime};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let config = Config { sleep_after_ms: 50, residency_limit: 2, ..Config::default() };
    let mut h = Harness::with_seed(config, 7);
    for conn in 0..3 {
        h.input(Input::Connected { conn: ConnId(conn) });
        let init = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"channel":"ahp-root://","protocolVersions":["1.0.0"],"clientId":"c{conn}","initialSubscriptions":["ahp-root://"]}}}}"#);
        h.raw(conn, &init);
    }
    // Each chunk: one control byte, then a frame up to the next 0xFF.
    for chunk in data.split(|b| *b == 0xFF).take(64) {
        let Some((&control, rest)) = chunk.split_first() else { continue };
        h.now.mono = h.now.mono.plus_ms(u64::from(control % 40));
        h.now.wall = WallTime(h.now.wall.0 + i64::from(control % 40) - 10);
        let input = match control % 4 {
            0 => Input::Tick,
            _ => Input::Frame { conn: ConnId(u64::from(control % 3)), text: String::from_utf8_lossy(rest).into_owned() },
        };
        h.input(input);
        // Answer everything the host asked for, in order. No repository
        // and no registry here: git answers as a failure (a folder
        // session's turn still runs), the registry as done.
        h.answer_each(|_| Outcome::Failed { message: "no git in the fuzzer".to_owned() });
    }
});
