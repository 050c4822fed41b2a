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
// - `/tool NAME [JSON]`: calls tool NAME of the MCP server the client gave
//   this session (ahpd's host tools: over HTTP with the headers given, or a
//   stdio command this agent starts) with the npm `@modelcontextprotocol/sdk`
//   client, the JSON object as its arguments, and replies `tool NAME ok:
//   <text>`, `tool NAME error: <text>` (a tool error) or `tool NAME failed:
//   <why>` (no answer); `/tool-bad-secret NAME` calls over HTTP with a
//   made-up secret.
// - anything else: `Node says: <prompt> (turn <n>)` in three chunks, `n`
//   counting the conversation's turns (so a test can tell a loaded
//   conversation from a fresh one).
//
// Options: `--store DIR` keeps each conversation as DIR/<session id>.json
// and advertises loadSession; session/load replays the stored turns as
// session/update notifications (user_message_chunk, agent_message_chunk)
// before it answers. `--no-mcp-http` does not advertise mcpCapabilities.http,
// so the client names its MCP servers as stdio commands.

import { Readable, Writable } from "node:stream";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import * as acp from "@agentclientprotocol/sdk";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const log = (...parts) => process.stderr.write(`acp_node_agent: ${parts.join(" ")}\n`);

let store = null;
let mcpHttp = true;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--store" && i + 1 < argv.length) {
    store = argv[++i];
  } else if (argv[i] === "--no-mcp-http") {
    mcpHttp = false;
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

/** `/tool NAME [JSON]` or `/tool-bad-secret NAME` (`rest` follows `/tool`). */
async function callTool(servers, rest) {
  const badSecret = rest.startsWith("-bad-secret");
  if (badSecret) rest = rest.slice("-bad-secret".length);
  rest = rest.trim();
  const space = rest.search(/\s/);
  const name = space < 0 ? rest : rest.slice(0, space);
  const argText = space < 0 ? "" : rest.slice(space).trim();
  let args = {};
  if (argText) {
    try {
      args = JSON.parse(argText);
    } catch {
      return `tool ${name} failed: the arguments are not JSON`;
    }
  }
  const server = servers?.[0];
  if (!server) return `tool ${name} failed: no MCP server was given`;
  let transport;
  if (server.type === "http") {
    const headers = {};
    for (const h of server.headers ?? []) {
      headers[h.name] = badSecret && h.name.toLowerCase() === "authorization" ? "Bearer " + "0".repeat(64) : h.value;
    }
    transport = new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers } });
  } else if (server.command) {
    const env = { ...process.env };
    for (const e of server.env ?? []) env[e.name] = e.value;
    transport = new StdioClientTransport({ command: server.command, args: server.args ?? [], env });
  } else {
    return `tool ${name} failed: an MCP server of a kind this agent does not take`;
  }
  const mcp = new McpClient({ name: "acp_node_agent", version: "0.0.0" });
  try {
    await mcp.connect(transport);
    const result = await mcp.callTool({ name, arguments: args });
    const text = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join(" ");
    return `tool ${name} ${result.isError ? "error" : "ok"}: ${text}`;
  } catch (e) {
    return `tool ${name} failed: ${e?.message ?? e}`;
  } finally {
    await mcp.close().catch(() => {});
  }
}

async function turn(client, sessionId, session, prompt, n, signal) {
  if (prompt.startsWith("/tool")) {
    const reply = await callTool(session.mcpServers, prompt.slice("/tool".length));
    await say(client, sessionId, chunk("agent_message_chunk", reply));
    return ["end_turn", reply];
  }
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
    agentCapabilities: { loadSession: store !== null, mcpCapabilities: { http: mcpHttp } },
    agentInfo: { name: "acp_node_agent", version: "0.0.0" },
  }))
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    const sessionId = `node-${randomUUID()}`;
    sessions.set(sessionId, { cwd: params.cwd, turns: [], started: 0, running: new Set(), mcpServers: params.mcpServers });
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
    sessions.set(params.sessionId, { cwd: params.cwd, turns: stored.turns, started: stored.turns.length, running: new Set(), mcpServers: params.mcpServers });
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
