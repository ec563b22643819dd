"""initialize → session/new → a prompt whose answer runs `echo sdk-hello`: the tool call, its
in_progress and completed updates and the answer chunk arrive in that order, the stop reason is
end_turn, and every stdout line is JSON-RPC."""

from harness import Recorder, check, finish, initialize, prompt_blocks, run, tern_acp, WS


async def main():
    client = Recorder()
    async with tern_acp(client) as (conn, proc, lines):
        await initialize(conn)
        s = await conn.new_session(cwd=WS, mcp_servers=[])
        check(s.modes.current_mode_id == "auto", f"mode {s.modes.current_mode_id}")
        r = await conn.prompt(session_id=s.session_id, prompt=prompt_blocks("say hello"))
        check(r.stop_reason == "end_turn", f"stop reason {r.stop_reason}")
        seq = []
        for sid, u in client.updates:
            check(sid == s.session_id, f"update for another session {sid}")
            k = u["sessionUpdate"]
            if k == "tool_call":
                seq.append(f"tool_call {u['toolCallId']} {u['kind']} {u['status']} {u['title']}")
            elif k == "tool_call_update":
                seq.append(f"update {u['toolCallId']} {u['status']}")
            elif k in ("agent_message_chunk",):
                if not seq or seq[-1] != k:
                    seq.append(k)
        check(
            seq
            == [
                "tool_call call_1 execute pending echo sdk-hello",
                "update call_1 in_progress",
                "update call_1 completed",
                "agent_message_chunk",
            ],
            f"order: {seq}",
        )
        done = [u for _, u in client.updates if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed"]
        check("sdk-hello" in done[0]["content"][0]["content"]["text"], f"output: {done}")
        check(client.text() == "Said hello.", f"text {client.text()!r}")
        check("available_commands_update" in client.kinds(), "no commands")
        check("usage_update" in client.kinds(), "no usage")
        check(len(client.permissions) == 0, "asked in auto mode")
    check(len(lines) > 0 and all(m.get("jsonrpc") == "2.0" for m in lines), "stdout lines")
    # The cost and usage as the SDK parsed them (the test configures a price).
    costs = [u.get("cost") for _, u in client.updates if u["sessionUpdate"] == "usage_update"]
    usage = r.usage.model_dump(by_alias=True, exclude_none=True) if r.usage else None
    finish({"stop_reason": r.stop_reason, "lines": len(lines), "cost": costs[-1] if costs else None, "usage": usage})


run(main)
