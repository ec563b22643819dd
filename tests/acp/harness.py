"""Shared by the ACP SDK scripts in this folder (run by tests/acp.rs): starts `tern acp`
(TERN_BIN, with TERN_ARGS) in the workspace TERN_WS with the environment the Rust test set,
connects the official SDK's ClientSideConnection to it, checks that every line tern writes on
stdout is a JSON-RPC 2.0 message, and records what the client receives.

Each script prints one JSON summary line last; any failed check raises (non-zero exit).
"""

import asyncio
import contextlib
import json
import os
import shlex
import sys
import time

from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    AuthCapabilities,
    ClientCapabilities,
    DeniedOutcome,
    Implementation,
    RequestPermissionResponse,
)

WS = os.environ["TERN_WS"]


class Recorder:
    """The client side: records updates; answers permission questions with `choose` (an
    option id, or None for "cancelled")."""

    def __init__(self, choose="allow-once"):
        self.choose = choose
        self.updates = []
        self.permissions = []

    async def request_permission(self, options, session_id, tool_call, **kwargs):
        self.permissions.append(
            {
                "session_id": session_id,
                "tool_call": tool_call.model_dump(by_alias=True, exclude_none=True),
                "options": [o.option_id for o in options],
            }
        )
        if self.choose is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.choose)
        )

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append((session_id, update.model_dump(by_alias=True, exclude_none=True)))

    async def write_text_file(self, *args, **kwargs):
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args, **kwargs):
        raise RequestError.method_not_found("fs/read_text_file")

    def kinds(self, session_id=None):
        return [
            u["sessionUpdate"]
            for s, u in self.updates
            if session_id is None or s == session_id
        ]

    def text(self, kind="agent_message_chunk"):
        return "".join(
            u["content"]["text"] for _, u in self.updates if u["sessionUpdate"] == kind
        )


def check(cond, what):
    if not cond:
        raise AssertionError(what)


@contextlib.asynccontextmanager
async def tern_acp(client):
    """Starts `tern acp`; yields (connection, process, lines) where `lines` collects every
    stdout line as parsed JSON. stderr goes to a file (a full pipe must never stall tern)."""
    args = shlex.split(os.environ.get("TERN_ARGS", ""))
    log = open(os.path.join(WS, "tern-acp-stderr.log"), "ab")
    proc = await asyncio.create_subprocess_exec(
        os.environ["TERN_BIN"],
        "acp",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
        cwd=WS,
        env=dict(os.environ),
        limit=16 << 20,
    )
    feed = asyncio.StreamReader(limit=16 << 20)
    lines = []

    async def pump():
        # The purity check: each stdout line parses as one JSON-RPC 2.0 object.
        while True:
            line = await proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            check(isinstance(msg, dict) and msg.get("jsonrpc") == "2.0", f"not JSON-RPC: {line!r}")
            lines.append(msg)
            feed.feed_data(line)
        feed.feed_eof()

    pumper = asyncio.create_task(pump())
    conn = ClientSideConnection(client, proc.stdin, feed)
    try:
        yield conn, proc, lines
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()
        try:
            code = await asyncio.wait_for(proc.wait(), timeout=20)
        except asyncio.TimeoutError:
            proc.kill()
            raise AssertionError("tern acp did not exit after stdin closed")
        await pumper
        await conn.close()
        log.close()
        check(code == 0, f"tern acp exited {code}")


async def initialize(conn, terminal_auth=False):
    caps = ClientCapabilities(auth=AuthCapabilities(terminal=True)) if terminal_auth else ClientCapabilities()
    r = await conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=caps,
        client_info=Implementation(name="tern-sdk-test", version="1"),
    )
    check(r.protocol_version == 1, f"protocol version {r.protocol_version}")
    check(r.agent_capabilities.load_session, "loadSession not offered")
    return r


def prompt_blocks(text):
    return [text_block(text)]


def finish(summary):
    print(json.dumps(summary))
    sys.exit(0)


def run(main):
    asyncio.run(main())


def now():
    return time.monotonic()
