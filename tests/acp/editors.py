"""What two more editors found (issue 21), through the official SDK: `initialize` offers
`tern setup` as a terminal auth method to a client declaring `auth.terminal` (none otherwise); a prompt sent together with the cancel of the running
turn answers that turn `cancelled` and then runs; an empty model answer shows as a visible
warning; the mode set before a reconnect is the mode after it."""

import asyncio

from harness import Recorder, check, finish, initialize, prompt_blocks, run, tern_acp, WS


def running(client):
    return any(u.get("status") == "in_progress" for _, u in client.updates)


async def main():
    client = Recorder()
    async with tern_acp(client) as (conn, _, _):
        # Only a client that can run a terminal auth method is offered one.
        init = await initialize(conn, terminal_auth=True)
        methods = [m.model_dump(by_alias=True, exclude_none=True) for m in init.auth_methods]
        check(len(methods) == 1, f"auth methods {methods}")
        m = methods[0]
        check(m.get("type") == "terminal" and m.get("id") == "tern-setup", f"method {m}")
        check(m.get("args") == ["setup"], f"args {m}")
        s = await conn.new_session(cwd=WS, mcp_servers=[])
        sid = s.session_id
        await conn.set_session_mode(session_id=sid, mode_id="auto")
        first = asyncio.create_task(conn.prompt(session_id=sid, prompt=prompt_blocks("sleep")))
        for _ in range(500):
            if running(client):
                break
            await asyncio.sleep(0.02)
        check(running(client), "the command never started")
        # The cancel and the next prompt back to back, as Toad sends them.
        await conn.cancel(session_id=sid)
        second = asyncio.create_task(conn.prompt(session_id=sid, prompt=prompt_blocks("next")))
        r1 = await asyncio.wait_for(first, timeout=20)
        check(r1.stop_reason == "cancelled", f"first {r1.stop_reason}")
        r2 = await asyncio.wait_for(second, timeout=20)
        check(r2.stop_reason == "end_turn", f"second {r2.stop_reason}")
        check("next answer" in client.text(), f"text {client.text()!r}")
        client.updates.clear()
        r3 = await conn.prompt(session_id=sid, prompt=prompt_blocks("say nothing"))
        check(r3.stop_reason == "end_turn", f"third {r3.stop_reason}")
        check("tern (warning)" in client.text(), f"no visible warning: {client.text()!r}")

    again = Recorder()
    async with tern_acp(again) as (conn, _, _):
        plain = await initialize(conn)
        check(not plain.auth_methods, f"auth methods offered without auth.terminal: {plain.auth_methods}")
        loaded = await conn.load_session(cwd=WS, session_id=sid, mcp_servers=[])
        mode = loaded.modes.current_mode_id
        check(mode == "auto", f"mode after a reconnect: {mode}")
    finish({"first": r1.stop_reason, "second": r2.stop_reason, "mode": mode})


run(main)
