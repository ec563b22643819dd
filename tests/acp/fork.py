"""session/fork (UNSTABLE in the SDK 0.12.1 schema): two turns in a session, then fork it; the
fork is a new session that goes on from the original's end: a prompt in the fork, then the same
prompt in the original. The Rust test compares the two requests byte for byte."""

from harness import Recorder, check, finish, initialize, prompt_blocks, run, tern_acp, WS


async def main():
    rec = Recorder()
    async with tern_acp(rec) as (conn, _, _):
        init = await initialize(conn)
        check(init.agent_capabilities.session_capabilities.fork is not None, "fork not offered")
        s = await conn.new_session(cwd=WS, mcp_servers=[])
        sid = s.session_id
        for p in ("turn one", "turn two"):
            r = await conn.prompt(session_id=sid, prompt=prompt_blocks(p))
            check(r.stop_reason == "end_turn", f"{p}: {r.stop_reason}")
        f = await conn.fork_session(session_id=sid, cwd=WS)
        check(f.session_id != sid, f"fork id {f.session_id}")
        check(f.modes is not None, "fork modes")
        r = await conn.prompt(session_id=f.session_id, prompt=prompt_blocks("turn three"))
        check(r.stop_reason == "end_turn", f"fork: {r.stop_reason}")
        r = await conn.prompt(session_id=sid, prompt=prompt_blocks("turn three"))
        check(r.stop_reason == "end_turn", f"original: {r.stop_reason}")
        await conn.close_session(session_id=f.session_id)
        await conn.close_session(session_id=sid)
    finish({"original": sid, "fork": f.session_id})


run(main)
