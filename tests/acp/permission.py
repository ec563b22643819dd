"""Mode ask (the default): the model's `touch sdk-rejected.txt` becomes a permission request
naming the command; the client rejects it; the command does not run, its tool call fails, and
the turn still ends with end_turn."""

import os

from harness import Recorder, check, finish, initialize, prompt_blocks, run, tern_acp, WS


async def main():
    client = Recorder(choose="reject-once")
    async with tern_acp(client) as (conn, _, _):
        await initialize(conn)
        s = await conn.new_session(cwd=WS, mcp_servers=[])
        check(s.modes.current_mode_id == "ask", f"mode {s.modes.current_mode_id}")
        check([m.id for m in s.modes.available_modes] == ["ask", "auto", "plan"], "modes")
        r = await conn.prompt(session_id=s.session_id, prompt=prompt_blocks("make a file"))
        check(len(client.permissions) == 1, f"permissions {client.permissions}")
        p = client.permissions[0]
        check(p["tool_call"]["title"] == "touch sdk-rejected.txt", f"title {p}")
        check(p["options"] == ["allow-once", "allow-always", "reject-once", "reject-always"], f"options {p}")
        check(not os.path.exists(os.path.join(WS, "sdk-rejected.txt")), "the command ran")
        ups = [u for _, u in client.updates if u["sessionUpdate"] == "tool_call_update"]
        check([u["status"] for u in ups] == ["failed"], f"updates {ups}")
    finish({"stop_reason": r.stop_reason})


run(main)
