"""initialize → session/new (its configOptions offer the reasoning effort, `default` now) →
session/set_config_option to `high` (the answer carries the options, `high` now) → a prompt,
whose request the Rust side checks carries the effort; an unknown option is refused."""

from harness import Recorder, check, finish, initialize, prompt_blocks, run, tern_acp, WS


async def main():
    client = Recorder()
    async with tern_acp(client) as (conn, proc, lines):
        await initialize(conn)
        s = await conn.new_session(cwd=WS, mcp_servers=[])
        opts = {o.root.id if hasattr(o, "root") else o.id: (o.root if hasattr(o, "root") else o) for o in (s.config_options or [])}
        check("reasoning_effort" in opts, f"config options {s.config_options}")
        effort = opts["reasoning_effort"]
        check(effort.current_value == "default", f"current {effort.current_value}")
        check(effort.category == "thought_level", f"category {effort.category}")
        r = await conn.set_config_option(config_id="reasoning_effort", session_id=s.session_id, value="high")
        now = [o.root if hasattr(o, "root") else o for o in r.config_options]
        check(now[0].current_value == "high", f"after set: {now}")
        refused = None
        try:
            await conn.set_config_option(config_id="nope", session_id=s.session_id, value="x")
        except Exception as e:  # the SDK raises the JSON-RPC error
            refused = str(e)
        check(refused is not None, "an unknown option was accepted")
        p = await conn.prompt(session_id=s.session_id, prompt=prompt_blocks("think hard"))
        check(p.stop_reason == "end_turn", f"stop reason {p.stop_reason}")
    finish({"stop_reason": p.stop_reason, "refused": refused})


run(main)
