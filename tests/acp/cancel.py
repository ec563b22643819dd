"""A prompt whose command is `sleep 30.0421`; session/cancel while it runs: the prompt answers
`cancelled` within a second, no update of that turn arrives after the answer, no such sleep is
left, and the next prompt runs to end_turn."""

import asyncio
import os

from harness import Recorder, check, finish, initialize, now, prompt_blocks, run, tern_acp, WS


def sleeping():
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() == b"sleep\x0030.0421\x00":
                    found.append(pid)
        except OSError:
            pass
    return found


async def main():
    client = Recorder()
    async with tern_acp(client) as (conn, proc, lines):
        await initialize(conn)
        s = await conn.new_session(cwd=WS, mcp_servers=[])
        turn = asyncio.create_task(conn.prompt(session_id=s.session_id, prompt=prompt_blocks("sleep")))
        for _ in range(500):
            if sleeping() and any(u.get("status") == "in_progress" for _, u in client.updates):
                break
            await asyncio.sleep(0.02)
        check(sleeping(), "the sleep never started")
        t = now()
        await conn.cancel(session_id=s.session_id)
        r = await asyncio.wait_for(turn, timeout=10)
        seconds = now() - t
        check(r.stop_reason == "cancelled", f"stop reason {r.stop_reason}")
        n = len(client.updates)
        await asyncio.sleep(0.5)
        check(len(client.updates) == n, f"updates after the answer: {client.updates[n:]}")
        check(not sleeping(), "sleep still running")
        last = [u for _, u in client.updates if u["sessionUpdate"] == "tool_call_update"][-1]
        check(last["status"] == "failed", f"last update {last}")
        r2 = await conn.prompt(session_id=s.session_id, prompt=prompt_blocks("go on"))
        check(r2.stop_reason == "end_turn", f"next prompt {r2.stop_reason}")
    finish({"stop_reason": r.stop_reason, "seconds": seconds})


run(main)
