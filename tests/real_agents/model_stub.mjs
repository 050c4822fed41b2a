// A stand-in for the model APIs on 127.0.0.1, so real agents run offline
// in the tests (issue 22): the Anthropic Messages API for Claude Code
// (`ANTHROPIC_BASE_URL`) and the Gemini API for Gemini CLI
// (`GOOGLE_GEMINI_BASE_URL`). No dependency but Node's own `http`.
//
// It plays a script written in the user's message, like the echo agent's
// directives, so each test says in its prompt what the model does:
//   /write <absolute path> <text>   a `Write` tool call (Claude Code asks for
//                                   permission), then "Wrote <path>." once the
//                                   tool's result comes back
//   /bash <command>                 a `Bash` tool call, then "Ran it."
//   /long <n>                       a reply of n words streamed slowly (cancel)
//   /slow <ms>                      waits before it answers
//   /error <status> <message>       answers with that HTTP status and message
//   /seen <word>                    "Seen <word> in <n> of <m> attached files.":
//                                   the files attached to the prompt (as
//                                   Claude Code's ACP adapter hands them) that
//                                   hold the word
//   /calltool <server> <tool> [json] calls tool mcp__<server>__<tool> with the JSON
//                                   object as input, then says `Tool said: <result>`
//   anything else                   "Stub says: <the message>"
// A request without tools (Claude Code's own side requests: titles, topic
// detection) gets a short fixed text.
//
//   node model_stub.mjs [--log FILE]
// prints `listening <port>` on stdout once it listens. Every request is
// appended to the log (one JSON line: model, whether it had tools, the last
// user text) so a failing test can show what the agent asked.

import http from "node:http";
import fs from "node:fs";

const logFile = (() => {
  const at = process.argv.indexOf("--log");
  return at > 0 ? process.argv[at + 1] : null;
})();

function log(entry) {
  if (logFile) fs.appendFileSync(logFile, JSON.stringify(entry) + "\n");
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The text of a message's content (a string or blocks). */
function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((b) => b.type === "text")
    .map((b) => b.text)
    .join("\n");
}

/** The last user message: its prompt (the last text block that is neither
 * one of Claude Code's <system-reminder>s nor its "[Request interrupted by
 * user]" note: a new prompt after a cancel or a denied tool shares the
 * message with them) and its tool results, if any. */
function lastUser(messages) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m.role !== "user") continue;
    const blocks = Array.isArray(m.content) ? m.content : [{ type: "text", text: m.content }];
    const results = blocks.filter((b) => b.type === "tool_result");
    // A file attached to the prompt comes after it: Claude Code's ACP
    // adapter hands an embedded resource as a link to it and a
    // `<context ref="...">` block with its text; ahpd names a file it did
    // not read as `[attached <label> (<uri>): not read: ...]`.
    const attached = blocks
      .filter((b) => b.type === "text" && b.text.trim().startsWith("<context ref="))
      .map((b) => b.text.trim());
    const texts = blocks
      .filter((b) => b.type === "text" && !b.text.trim().startsWith("<context ref="))
      .flatMap((b) => b.text.split(/\n\n+/))
      .map((t) => t.trim())
      .filter((t) => t && !t.startsWith("<system-reminder>") && !t.startsWith("[Request interrupted") && !t.startsWith("[attached ") && !/^\[@[^\]]*\]\([^)]*\)$/.test(t));
    return { text: texts.length > 0 ? texts[texts.length - 1] : "", results, attached };
  }
  return { text: "", results: [], attached: [] };
}

/** The first user text of the conversation that holds a directive: the
 * turn's prompt, which the follow-up requests (tool results) still carry. */
function promptOf(messages) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m.role !== "user") continue;
    const blocks = Array.isArray(m.content) ? m.content : [{ type: "text", text: m.content }];
    if (blocks.some((b) => b.type === "tool_result")) continue;
    return lastUser([m]).text;
  }
  return "";
}

let nextId = 1;

/** What the model does for this request: { text } or { tool } or { error }. */
function decide(body) {
  const hasTools = Array.isArray(body.tools) && body.tools.length > 0;
  if (!hasTools) return { text: "Stub title" };
  // Under its ACP adapter Claude Code's own file and shell tools are the
  // adapter's (`mcp__acp__Write`, ...: they ask the client through ACP);
  // alone, they are the built-in ones.
  const names = new Set(body.tools.map((t) => t.name));
  const tool = (name) => (names.has(`mcp__acp__${name}`) ? `mcp__acp__${name}` : name);
  return play(body.messages || [], tool);
}

/** The script's answer to a conversation (`messages` in the Messages API's
 * shape), naming tools through `tool` (the API's own name of `Write` or
 * `Bash`). */
function play(messages, tool) {
  const { text, results, attached } = lastUser(messages);
  // Tool results alone continue the turn that asked for the tool; a text
  // beside them is a new prompt.
  const following = results.length > 0 && !text;
  const prompt = following ? promptOf(messages) : text;
  const words = prompt.split(/\s+/);
  const directive = words[0];
  if (following) {
    const failed = results.some((r) => r.is_error);
    const said = results.map((r) => textOf(r.content)).join(" ").slice(0, 200);
    if (directive === "/write") return { text: failed ? `Could not write: ${said}` : `Wrote ${words[1]}.` };
    if (directive === "/bash") return { text: failed ? `Could not run it: ${said}` : `Ran it.` };
    if (directive === "/calltool") return { text: failed ? `Tool failed: ${said}` : `Tool said: ${said}` };
    return { text: "Done." };
  }
  switch (directive) {
    case "/write":
      return {
        tool: { name: tool("Write"), input: { file_path: words[1], content: words.slice(2).join(" ") + "\n" } },
        prefix: `Writing ${words[1]}.`,
      };
    case "/bash":
      // `timeout` (ms): the ACP adapter's Bash requires it.
      return { tool: { name: tool("Bash"), input: { command: words.slice(1).join(" "), description: "Run the command", timeout: 30000 } }, prefix: "Running it." };
    case "/calltool": {
      let input = {};
      try {
        input = JSON.parse(words.slice(3).join(" ") || "{}");
      } catch {}
      return { tool: { name: `mcp__${words[1]}__${words[2]}`, input }, prefix: "Calling it." };
    }
    case "/long": {
      const n = Math.max(1, Math.min(100000, parseInt(words[1] || "200", 10) || 200));
      return { text: Array.from({ length: n }, (_, i) => `word${i}`).join(" "), delayMs: 50 };
    }
    case "/slow":
      return { text: `Stub says: ${prompt}`, waitMs: parseInt(words[1] || "1000", 10) || 1000 };
    case "/seen": {
      // Which files attached to this prompt hold the word (issue 48: a
      // file attached to a message reaches the model).
      const n = attached.filter((a) => a.includes(words[1] || "")).length;
      return { text: `Seen ${words[1]} in ${n} of ${attached.length} attached files.` };
    }
    case "/error":
      return { error: { status: parseInt(words[1] || "500", 10) || 500, message: words.slice(2).join(" ") || "stub error" } };
    default:
      return { text: `Stub says: ${prompt}` };
  }
}

function usage() {
  return { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
}

/** The content blocks of a decision. */
function blocksOf(d) {
  const blocks = [];
  if (d.prefix) blocks.push({ type: "text", text: d.prefix });
  if (d.text !== undefined) blocks.push({ type: "text", text: d.text });
  if (d.tool) blocks.push({ type: "tool_use", id: `toolu_stub_${nextId++}`, name: d.tool.name, input: d.tool.input });
  return blocks;
}

async function answer(req, res, body) {
  const d = decide(body);
  log({ model: body.model, tools: Array.isArray(body.tools) ? body.tools.map((t) => t.name).join(",") : "", stream: !!body.stream, user: lastUser(body.messages || []).text.slice(0, 200), decision: d.error ? "error" : d.tool ? `tool ${d.tool.name}` : "text" });
  if (d.waitMs) await sleep(d.waitMs);
  if (d.error) {
    res.writeHead(d.error.status, { "content-type": "application/json", "x-should-retry": "false" });
    res.end(JSON.stringify({ type: "error", error: { type: d.error.status === 400 ? "invalid_request_error" : "api_error", message: d.error.message } }));
    return;
  }
  const id = `msg_stub_${nextId++}`;
  const blocks = blocksOf(d);
  const stop = d.tool ? "tool_use" : "end_turn";
  if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id, type: "message", role: "assistant", model: body.model, content: blocks, stop_reason: stop, stop_sequence: null, usage: usage() }));
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  let closed = false;
  res.on("close", () => (closed = true));
  const send = (event, data) => {
    if (!closed) res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
  };
  send("message_start", { message: { id, type: "message", role: "assistant", model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: usage() } });
  for (let index = 0; index < blocks.length; index++) {
    const b = blocks[index];
    if (b.type === "text") {
      send("content_block_start", { index, content_block: { type: "text", text: "" } });
      const pieces = d.delayMs && b.text === d.text ? b.text.split(/(?<= )/) : [b.text];
      for (const piece of pieces) {
        if (closed) return;
        send("content_block_delta", { index, delta: { type: "text_delta", text: piece } });
        if (d.delayMs && b.text === d.text) await sleep(d.delayMs);
      }
    } else {
      send("content_block_start", { index, content_block: { type: "tool_use", id: b.id, name: b.name, input: {} } });
      send("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: JSON.stringify(b.input) } });
    }
    send("content_block_stop", { index });
  }
  send("message_delta", { delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 5 } });
  send("message_stop", {});
  res.end();
}

// ---- The Gemini API (`GOOGLE_GEMINI_BASE_URL`), for Gemini CLI ----

/** A Gemini request's `contents` in the Messages API's shape: `functionCall`
 * parts become tool uses, `functionResponse` parts tool results, and the
 * CLI's own context blocks are dropped. */
function messagesOfGemini(contents) {
  return (contents || []).map((c) => ({
    role: c.role === "model" ? "assistant" : "user",
    content: (c.parts || []).flatMap((p) => {
      if (typeof p.text === "string") return p.text.trimStart().startsWith("<session_context>") ? [] : [{ type: "text", text: p.text }];
      if (p.functionResponse) {
        const r = p.functionResponse.response || {};
        return [{ type: "tool_result", is_error: !!r.error, content: JSON.stringify(r) }];
      }
      if (p.functionCall) return [{ type: "tool_use", name: p.functionCall.name, input: p.functionCall.args }];
      return [];
    }),
  }));
}

/** A value of a Gemini `responseJsonSchema` (the CLI's side requests ask
 * for JSON: a routing score, a next speaker): the first of each enum, 1 for
 * numbers, "stub" for strings. */
function valueOf(schema) {
  const type = String((schema && schema.type) || "STRING").toUpperCase();
  if (schema && Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  if (type === "OBJECT") return Object.fromEntries(Object.entries(schema.properties || {}).map(([k, v]) => [k, valueOf(v)]));
  if (type === "ARRAY") return [];
  if (type === "INTEGER" || type === "NUMBER") return 1;
  if (type === "BOOLEAN") return false;
  return "stub";
}

async function answerGemini(req, res, body, stream) {
  const declared = (body.tools || []).flatMap((t) => t.functionDeclarations || []).map((f) => f.name);
  const geminiName = { Write: "write_file", Bash: "run_shell_command" };
  const schema = body.generationConfig && body.generationConfig.responseJsonSchema;
  let d;
  if (schema) d = { text: JSON.stringify(valueOf(schema)) };
  else if (declared.length === 0) d = { text: "Stub title" };
  else d = play(messagesOfGemini(body.contents), (name) => geminiName[name] || name);
  log({ api: "gemini", path: req.url, tools: declared.join(","), user: lastUser(messagesOfGemini(body.contents)).text.slice(0, 200), decision: d.error ? "error" : d.tool ? `tool ${d.tool.name}` : "text" });
  if (d.waitMs) await sleep(d.waitMs);
  if (d.error) {
    res.writeHead(d.error.status, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { code: d.error.status, message: d.error.message, status: d.error.status === 400 ? "INVALID_ARGUMENT" : "INTERNAL" } }));
    return;
  }
  const parts = [];
  if (d.prefix) parts.push({ text: d.prefix });
  if (d.text !== undefined) parts.push({ text: d.text });
  if (d.tool) {
    const args = { ...d.tool.input };
    parts.push({ functionCall: { name: d.tool.name, args } });
  }
  const usageMetadata = { promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 };
  const chunk = (ps, finish) => ({ candidates: [{ content: { role: "model", parts: ps }, ...(finish ? { finishReason: "STOP" } : {}), index: 0 }], usageMetadata });
  if (!stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(chunk(parts, true)));
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  let closed = false;
  res.on("close", () => (closed = true));
  const pieces = [];
  for (const p of parts) {
    if (p.text !== undefined && d.delayMs && p.text === d.text) for (const w of p.text.split(/(?<= )/)) pieces.push({ text: w });
    else pieces.push(p);
  }
  for (let i = 0; i < pieces.length; i++) {
    if (closed) return;
    res.write(`data: ${JSON.stringify(chunk([pieces[i]], i === pieces.length - 1))}\n\n`);
    if (d.delayMs && pieces[i].text !== undefined) await sleep(d.delayMs);
  }
  res.end();
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const path = req.url.split("?")[0];
    if (req.method === "HEAD" || req.method === "GET") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(req.method === "HEAD" ? undefined : "{}");
      return;
    }
    let body = {};
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
    } catch {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "stub: body is not JSON" } }));
      return;
    }
    if (path.includes(":streamGenerateContent") || path.includes(":generateContent")) {
      answerGemini(req, res, body, path.includes(":streamGenerateContent")).catch((e) => {
        log({ failed: String(e) });
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
      return;
    }
    if (path.includes(":countTokens")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ totalTokens: 10 }));
      return;
    }
    if (path.endsWith("/count_tokens")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ input_tokens: 10 }));
      return;
    }
    if (path.endsWith("/v1/messages")) {
      answer(req, res, body).catch((e) => {
        log({ failed: String(e) });
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
      return;
    }
    log({ unknown: `${req.method} ${path}` });
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ type: "error", error: { type: "not_found_error", message: `stub: no ${path}` } }));
  });
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
