#!/usr/bin/env node
// acp_node_agent: a small ACP agent for ahpd's end-to-end tests
// (tests/e2e_acp_node.rs), written on the npm `@agentclientprotocol/sdk`
// (pinned in package.json) so the backend is proven against an ACP
// implementation not derived from the Rust crate. It speaks ACP v1 as
// newline-delimited JSON on stdin/stdout and logs to stderr.
//
// What a prompt does, by the words it contains:
// - `permission`: announces a tool call and asks for permission
//   (session/request_permission, allow once / reject once); allowed, the
//   call completes, denied it fails; then a reply saying which.
// - `slow`: streams `tick N.` every 100 ms for 20 s unless the client sends
//   session/cancel, then stops with `cancelled`.
// - anything else: `Node says: <prompt> (turn <n>)` in three chunks, `n`
//   counting the conversation's turns (so a test can tell a loaded
//   conversation from a fresh one).
//
// Options: `--store DIR` keeps each conversation as DIR/<session id>.json
// and advertises loadSession; session/load replays the stored turns as
// session/update notifications (user_message_chunk, agent_message_chunk)
// before it answers.

import { Readable, Writable } from "node:stream";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import * as acp from "@agentclientprotocol/sdk";

const log = (...parts) => process.stderr.write(`acp_node_agent: ${parts.join(" ")}\n`);

let store = null;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--store" && i + 1 < argv.length) {
    store = argv[++i];
  } else {
    log(`unknown argument ${JSON.stringify(argv[i])}`);
    process.exit(2);
  }
}
if (store) mkdirSync(store, { recursive: true });

/**
 * sessionId -> { cwd, turns: [[prompt, reply]], started, running }:
 * `started` counts the prompts begun (the turn number), `running` holds an
 * AbortController per prompt in flight, aborted by session/cancel.
 */
const sessions = new Map();

function save(id) {
  if (!store) return;
  const s = sessions.get(id);
  if (!s) return;
  const tmp = join(store, `.${id}.tmp`);
  writeFileSync(tmp, JSON.stringify({ cwd: s.cwd, turns: s.turns }));
  renameSync(tmp, join(store, `${id}.json`));
}

function load(id) {
  if (!store || id.includes("/") || id.includes("..")) return null;
  try {
    return JSON.parse(readFileSync(join(store, `${id}.json`), "utf8"));
  } catch {
    return null;
  }
}

const text = (t) => ({ type: "text", text: t });

function say(client, sessionId, update) {
  return client.notify(acp.methods.client.session.update, { sessionId, update });
}

function chunk(kind, t) {
  return { sessionUpdate: kind, content: text(t) };
}

/** Waits `ms`, or less if `signal` aborts first. */
function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

async function turn(client, sessionId, session, prompt, n, signal) {
  if (prompt.includes("slow")) {
    for (let i = 0; i < 200; i++) {
      if (signal.aborted) return ["cancelled", `slow, cancelled after ${i} chunks`];
      await say(client, sessionId, chunk("agent_message_chunk", `tick ${i}. `));
      await pause(100, signal);
    }
    return ["end_turn", "slow, done"];
  }
  if (prompt.includes("permission")) {
    const toolCallId = `node-call-${n}`;
    await say(client, sessionId, { sessionUpdate: "tool_call", toolCallId, title: "Run node task", kind: "execute", status: "pending" });
    const answer = await client.request(acp.methods.client.session.requestPermission, {
      sessionId,
      toolCall: { toolCallId, title: "Run node task" },
      options: [
        { optionId: "yes", name: "Allow once", kind: "allow_once" },
        { optionId: "no", name: "Reject", kind: "reject_once" },
      ],
    });
    if (signal.aborted || answer.outcome.outcome !== "selected") return ["cancelled", "permission cancelled"];
    const allowed = answer.outcome.optionId === "yes";
    await say(client, sessionId, { sessionUpdate: "tool_call_update", toolCallId, status: allowed ? "completed" : "failed" });
    const reply = allowed ? "node: permission granted, task ran" : "node: permission denied";
    await say(client, sessionId, chunk("agent_message_chunk", reply));
    return ["end_turn", reply];
  }
  const reply = `Node says: ${prompt} (turn ${n})`;
  const size = Math.max(1, Math.ceil(reply.length / 3));
  for (let i = 0; i < reply.length; i += size) {
    await pause(20, signal);
    await say(client, sessionId, chunk("agent_message_chunk", reply.slice(i, i + size)));
  }
  return ["end_turn", reply];
}

const app = acp
  .agent({ name: "acp_node_agent" })
  .onRequest(acp.methods.agent.initialize, ({ params }) => ({
    protocolVersion: Math.min(params.protocolVersion, acp.PROTOCOL_VERSION),
    agentCapabilities: { loadSession: store !== null },
    agentInfo: { name: "acp_node_agent", version: "0.0.0" },
  }))
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    const sessionId = `node-${randomUUID()}`;
    sessions.set(sessionId, { cwd: params.cwd, turns: [], started: 0, running: new Set() });
    save(sessionId);
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.load, async ({ params, client }) => {
    const stored = load(params.sessionId);
    if (!stored) throw acp.RequestError.invalidParams({ sessionId: params.sessionId }, `no conversation ${params.sessionId}`);
    for (const [user, reply] of stored.turns) {
      await say(client, params.sessionId, chunk("user_message_chunk", user));
      await say(client, params.sessionId, chunk("agent_message_chunk", reply));
    }
    sessions.set(params.sessionId, { cwd: params.cwd, turns: stored.turns, started: stored.turns.length, running: new Set() });
    log(`loaded ${params.sessionId} with ${stored.turns.length} turns`);
    return {};
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const session = sessions.get(params.sessionId);
    if (!session) throw acp.RequestError.invalidParams({ sessionId: params.sessionId }, "unknown session");
    const n = ++session.started;
    const controller = new AbortController();
    session.running.add(controller);
    const prompt = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join("");
    let stopReason, reply;
    try {
      [stopReason, reply] = await turn(client, params.sessionId, session, prompt, n, controller.signal);
    } finally {
      session.running.delete(controller);
    }
    session.turns.push([prompt, reply]);
    save(params.sessionId);
    return { stopReason };
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    const session = sessions.get(params.sessionId);
    for (const controller of session?.running ?? []) controller.abort();
  });

log(`started (store: ${store ?? "none"})`);
const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const connection = app.connect(stream);
await connection.closed;
log("connection closed");
