"""Two turns in one `tern acp` (each a bash call and an answer); then a new process: session/list
finds the session, session/resume opens it without replaying anything, session/close frees it,
and session/load replays both turns — user chunk, tool call, its final update, agent chunk — in
order before it answers; a prompt then continues it."""

from harness import Recorder, check, finish, initialize, prompt_blocks, run, tern_acp, WS


def flatten(updates):
    out = []
    for _, u in updates:
        k = u["sessionUpdate"]
        if k in ("user_message_chunk", "agent_message_chunk"):
            out.append(f"{k} {u['content']['text']}")
        elif k == "tool_call":
            out.append(f"tool_call {u['toolCallId']} {u['title']}")
        elif k == "tool_call_update":
            out.append(f"update {u['toolCallId']} {u['status']}")
    return out


async def main():
    first = Recorder()
    async with tern_acp(first) as (conn, _, _):
        await initialize(conn)
        s = await conn.new_session(cwd=WS, mcp_servers=[])
        sid = s.session_id
        for p in ("turn one", "turn two"):
            r = await conn.prompt(session_id=sid, prompt=prompt_blocks(p))
            check(r.stop_reason == "end_turn", f"{p}: {r.stop_reason}")

    second = Recorder()
    async with tern_acp(second) as (conn, _, _):
        init = await initialize(conn)
        check(init.agent_capabilities.session_capabilities.list is not None, "list not offered")
        listed = await conn.list_sessions(cwd=WS)
        check([x.session_id for x in listed.sessions] == [sid], f"list {listed}")
        check(listed.sessions[0].title == "turn one", f"title {listed.sessions[0].title}")
        await conn.resume_session(session_id=sid, cwd=WS, mcp_servers=[])
        # Nothing replayed (the commands update follows the answer, and may still be on its way).
        check(set(second.kinds()) <= {"available_commands_update"}, f"resume sent {second.kinds()}")
        await conn.close_session(session_id=sid)
        second.updates.clear()
        await conn.load_session(cwd=WS, session_id=sid, mcp_servers=[])
        replay = flatten(second.updates)
        want = [
            "user_message_chunk turn one",
            "tool_call call_1 echo turn-one",
            "update call_1 completed",
            "agent_message_chunk One done.",
            "user_message_chunk turn two",
            "tool_call call_2 echo turn-two",
            "update call_2 completed",
            "agent_message_chunk Two done.",
        ]
        check(replay == want, f"replay {replay}")
        r = await conn.prompt(session_id=sid, prompt=prompt_blocks("and now?"))
        check(r.stop_reason == "end_turn", f"after load: {r.stop_reason}")
        await conn.close_session(session_id=sid)
    finish({"replayed": True, "updates": len(second.updates)})


run(main)
