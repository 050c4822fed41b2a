#!/usr/bin/env python3
"""A minimal AHP client for ahpd, in Python (websockets), frame by frame.

It does what docs/PROTOCOL.md walks through, in the same order:
initialize (subscribed to the root), createSession, subscribe to the
session and to its default chat, a turn (streamed reply), a turn whose
tool call waits for the client's approval, listSessions paged with a
cursor, an error answered with its code, and a reconnect that replays what
it missed. Each step checks what the server said and exits non-zero with a
message if it is not what the guide says (CI runs it against the release
daemon: tests/e2e_python_example.rs).

    pip install websockets
    python3 examples/python/ahp_client.py --url ws://127.0.0.1:8765/ --token "$(ahpd token)" --folder /tmp/work

The daemon asks every connection for its connection token (`ahpd token`
prints it); it goes in the handshake as `Authorization: Bearer <token>`.

The session runs the built-in `echo` agent, so nothing else is needed.
"""

import argparse
import asyncio
import datetime
import json
import os
import pathlib
import sys
import uuid

import websockets

ROOT = "ahp-root://"


def now_iso():
    """An ISO-8601 UTC time with milliseconds, as `startedAt` wants it."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Failed(Exception):
    """The server did not do what the guide says."""


class Client:
    """One WebSocket connection speaking JSON-RPC 2.0 (one JSON text frame
    per message). Requests carry an `id`; the server's reply carries the
    same `id`. Everything else the server sends is a notification:
    `action` (an envelope of a channel you subscribed to) or a `root/...`
    notification about the catalogue."""

    def __init__(self, ws, trace=False):
        self.ws = ws
        self.trace = trace
        self.next_id = 1
        self.client_seq = 1
        # Notifications read while waiting for a reply, in order.
        self.pending = []
        self.last_seen_server_seq = 0

    async def send(self, message):
        text = json.dumps(message)
        if self.trace:
            print(f">> {text}")
        await self.ws.send(text)

    async def recv(self):
        text = await asyncio.wait_for(self.ws.recv(), timeout=20)
        if self.trace:
            print(f"<< {text}")
        message = json.loads(text)
        if message.get("method") == "action":
            self.last_seen_server_seq = max(self.last_seen_server_seq, message["params"]["serverSeq"])
        return message

    async def request(self, method, params):
        """Sends a request; returns its `result`, or raises with the JSON-RPC
        error (code and message) the server answered."""
        rid = self.next_id
        self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            message = await self.recv()
            if message.get("id") == rid:
                if "error" in message:
                    raise RpcError(message["error"])
                return message["result"]
            self.pending.append(message)

    async def next_notification(self):
        if self.pending:
            return self.pending.pop(0)
        return await self.recv()

    async def dispatch(self, channel, action):
        """`dispatchAction` is a notification (no `id`, no reply): the server
        answers with the `action` envelope it broadcasts, or with the same
        envelope carrying a `rejectionReason`."""
        seq = self.client_seq
        self.client_seq += 1
        await self.send({"jsonrpc": "2.0", "method": "dispatchAction", "params": {"channel": channel, "clientSeq": seq, "action": action}})
        return seq

    async def actions_until(self, chat, turn_id, done_types):
        """Reads `action` notifications of `chat` until one of `done_types`
        for `turn_id`; returns every envelope read, in order."""
        seen = []
        while True:
            message = await self.next_notification()
            if message.get("method") != "action":
                continue
            envelope = message["params"]
            if envelope["channel"] != chat:
                continue
            seen.append(envelope)
            action = envelope["action"]
            if envelope.get("rejectionReason"):
                raise Failed(f"{action['type']} was rejected: {envelope['rejectionReason']}")
            if action.get("turnId") == turn_id and action["type"] in done_types:
                return seen


class RpcError(Exception):
    def __init__(self, error):
        super().__init__(f"{error['code']}: {error['message']}")
        self.code = error["code"]


def turn_started(turn_id, text):
    """The `chat/turnStarted` action a client dispatches to send a message:
    `turnId` (the client picks it), `startedAt` and `message.origin.kind`
    are required."""
    return {
        "type": "chat/turnStarted",
        "turnId": turn_id,
        "startedAt": now_iso(),
        "message": {"text": text, "origin": {"kind": "user"}},
    }


def streamed_text(envelopes):
    """The reply's text: the deltas of its markdown parts, joined."""
    return "".join(e["action"]["content"] for e in envelopes if e["action"]["type"] == "chat/delta")


def connect(url, token):
    """Opens the WebSocket, presenting the connection token, if any."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return websockets.connect(url, additional_headers=headers)


async def main(url, token, folder, trace):
    client_id = f"python-example-{uuid.uuid4()}"
    async with connect(url, token) as ws:
        c = Client(ws, trace)
        # 1. initialize: the first message on a connection.
        init = await c.request("initialize", {"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": client_id, "initialSubscriptions": [ROOT]})
        print(f"initialize: protocol {init['protocolVersion']}, serverSeq {init['serverSeq']}")
        if init["protocolVersion"] != "1.0.0":
            raise Failed(f"unexpected protocol version {init['protocolVersion']}")

        # 2. createSession: the client names the session. It is provisional
        # (not listed) until its first turn.
        session = f"ahp-session:/{uuid.uuid4()}"
        work = pathlib.Path(folder).resolve().as_uri()
        await c.request("createSession", {"channel": session, "provider": "echo", "workingDirectories": [work]})
        print(f"createSession: {session} in {work}")

        # 3. subscribe to the session: its snapshot names the default chat.
        snap = await c.request("subscribe", {"channel": session})
        state = snap["snapshot"]["state"]
        chat = state["defaultChat"]
        print(f"subscribe {session}: status {state['status']}, default chat {chat}")
        # Subscribe to the chat BEFORE dispatching to it: the turn's
        # envelopes go to the chat's subscribers only.
        await c.request("subscribe", {"channel": chat})

        # 4. a turn: dispatched, streamed, completed.
        await c.dispatch(chat, turn_started("t1", "hello from Python"))
        envelopes = await c.actions_until(chat, "t1", {"chat/turnComplete", "chat/error"})
        types = [e["action"]["type"] for e in envelopes]
        reply = streamed_text(envelopes)
        print(f"turn t1: {' '.join(types)}")
        print(f"turn t1 reply: {reply!r}")
        if types[-1] != "chat/turnComplete" or reply != "Echo: hello from Python":
            raise Failed(f"turn t1 ended {types[-1]} with {reply!r}")

        # 5. a tool call that waits for the client: approve it.
        await c.dispatch(chat, turn_started("t2", "/approve"))
        envelopes = await c.actions_until(chat, "t2", {"chat/toolCallReady"})
        ready = envelopes[-1]["action"]
        print(f"turn t2: tool call {ready['toolCallId']} waits: {ready.get('confirmationTitle')}")
        await c.dispatch(chat, {"type": "chat/toolCallConfirmed", "turnId": "t2", "toolCallId": ready["toolCallId"], "approved": True})
        envelopes = await c.actions_until(chat, "t2", {"chat/turnComplete", "chat/error"})
        types = [e["action"]["type"] for e in envelopes]
        print(f"turn t2 after approval: {' '.join(types)}")
        if "chat/toolCallComplete" not in types or types[-1] != "chat/turnComplete":
            raise Failed(f"the approved tool call did not complete: {types}")

        # 5b. the session's files: write one, read it back (text comes back
        # as utf-8), and watch the folder: a change arrives as
        # `resourceWatch/changed` on the watch's own channel.
        notes = f"{work}/notes.md"
        await c.request("resourceWrite", {"channel": ROOT, "uri": notes, "data": "hello from Python\n", "encoding": "utf-8"})
        read = await c.request("resourceRead", {"channel": ROOT, "uri": notes})
        print(f"resourceRead notes.md: {read['data']!r} ({read['encoding']})")
        if read["data"] != "hello from Python\n":
            raise Failed(f"read back {read['data']!r}")
        watch = (await c.request("createResourceWatch", {"channel": ROOT, "uri": work, "recursive": True}))["channel"]
        await c.request("subscribe", {"channel": watch})
        await c.request("resourceWrite", {"channel": ROOT, "uri": f"{work}/later.md", "data": "later\n", "encoding": "utf-8"})
        while True:
            message = await c.next_notification()
            if message.get("method") != "action" or message["params"]["channel"] != watch:
                continue
            changes = message["params"]["action"]["changes"]["items"]
            if any(ch["uri"].endswith("/later.md") for ch in changes):
                break
        print(f"watch {watch}: " + ", ".join(f"{ch['type']} {ch['uri'].rsplit('/', 1)[-1]}" for ch in changes))
        await c.request("unsubscribe", {"channel": watch})

        # 6. listSessions, paged: `limit` rows a page, `nextCursor` for more.
        page = await c.request("listSessions", {"channel": ROOT, "limit": 1})
        rows = list(page["items"])
        while page.get("nextCursor"):
            page = await c.request("listSessions", {"channel": ROOT, "limit": 1, "cursor": page["nextCursor"]})
            rows.extend(page["items"])
        mine = [r for r in rows if r["resource"] == session]
        print(f"listSessions: {len(rows)} row(s) in pages of 1; ours: title {mine[0]['title']!r}" if mine else "listSessions: ours missing")
        if not mine:
            raise Failed("the session is not listed after its first turn")

        # 7. an error: a session URI that is not one is refused with -32602.
        try:
            await c.request("subscribe", {"channel": "ahp-session:/../etc"})
            raise Failed("a hostile URI was accepted")
        except RpcError as e:
            print(f"subscribe to a bad URI: error {e}")
            if e.code not in (-32602, -32001):
                raise Failed(f"unexpected error code {e.code}")
        last_seen = c.last_seen_server_seq

    # 8. reconnect. While this client is away, another one runs a turn;
    # coming back with the same clientId and the last serverSeq it saw,
    # it is sent what it missed (a replay; snapshots once the replay
    # window has passed).
    async with connect(url, token) as ws:
        other = Client(ws, trace)
        await other.request("initialize", {"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": f"python-example-other-{uuid.uuid4()}", "initialSubscriptions": [chat]})
        await other.dispatch(chat, turn_started("t3", "while you were away"))
        await other.actions_until(chat, "t3", {"chat/turnComplete", "chat/error"})
    async with connect(url, token) as ws:
        c = Client(ws, trace)
        result = await c.request("reconnect", {"channel": ROOT, "clientId": client_id, "lastSeenServerSeq": last_seen, "subscriptions": [ROOT, session, chat]})
        if result.get("type") == "replay":
            missed = [a["action"]["type"] for a in result["actions"] if a["channel"] == chat]
            print(f"reconnect: replay of {len(result['actions'])} envelope(s); on the chat: {' '.join(missed)}")
            if "chat/turnComplete" not in missed:
                raise Failed(f"the replay lacks the turn run meanwhile: {missed}")
        elif result.get("type") == "snapshot":
            print(f"reconnect: {len(result['snapshots'])} snapshot(s)")
        else:
            raise Failed(f"unexpected reconnect result {result}")
        # Dispose the session: it is gone from the catalogue, its chats with it.
        await c.request("disposeSession", {"channel": session})
        print(f"disposeSession: {session}")
    print("ok")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765/")
    parser.add_argument("--token", default=os.environ.get("AHPD_TOKEN"), help="the connection token (`ahpd token`; default: $AHPD_TOKEN)")
    parser.add_argument("--folder", default=".", help="the session's working directory (must exist)")
    parser.add_argument("--trace", action="store_true", help="print every frame sent (>>) and received (<<)")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.url, args.token, args.folder, args.trace))
    except (Failed, RpcError, asyncio.TimeoutError, OSError) as e:
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
