#!/usr/bin/env python3
"""Real-model evals for tern: small shell tasks, checked by verifiers, run against a local model.

Opt-in only, never in CI. Python 3.11 standard library only. See evals/README.md.

    python3 evals/run.py --tern target/release/tern --start-server --runs 4 --out evals/results/after.json
    python3 evals/run.py --report evals/results/before.json [evals/results/after.json]
    python3 evals/run.py --selftest

For each task x run: a fresh temp workspace with the task's files, then
`TERN exec --json --max-turns 12 PROMPT` in it (OPENAI_BASE_URL pointing at a small proxy inside
this script, TERN_MODEL=local, approval auto = exec's default), under a wall-clock limit; then the
task's verifier on the workspace, and a failure cause read from tern's JSONL events and from what
the proxy saw on the wire.

The proxy forwards every request to the model server unchanged except for two fields it sets,
`temperature` (default 0.2) and `seed` (base seed + run index), so that a "before" and an "after"
binary are sampled alike even though tern itself sends no temperature. It records, per request,
whether tern sent an output-token cap, `tool_choice`, the tools and system prompt as advertised,
and what came back (completion tokens, finish reason, the text).
"""

import argparse
import hashlib
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tasks import BY_NAME, TASKS  # noqa: E402

RUNAWAY_TOKENS = 1000  # one answer longer than this is a runaway generation (these tasks need < 400)
REPEAT_LIMIT = 3  # this many identical calls in a row (or in one answer) is a repetition loop

# The failure causes, in the order a failed run is assigned one (the first that applies).
CAUSES = [
    ("provider_error", "provider error (the server answered with an error, or tern gave up on it)"),
    ("runaway_generation", f"runaway generation (one answer over {RUNAWAY_TOKENS} output tokens)"),
    ("description_in_argument", "copied a tool description (or system-prompt text) into an argument"),
    ("prompt_example_verbatim", "ran the system prompt's example command verbatim"),
    ("repeated_calls_to_limit", "repeated identical calls until the turn (or time) limit"),
    ("timeout", "timeout (the run hit the wall-clock limit, none of the above)"),
    ("non_bash_first", "called a non-bash tool first"),
    ("unrun_call_at_end", "ended 'completed' on a tool call tern did not run"),
    ("prose_no_tool_call", "answered in prose without any tool call"),
    ("tern_failed", "tern ended the turn as failed (status failed)"),
    ("max_turns", "reached --max-turns (no repetition)"),
    ("completed_verifier_failed", "ended completed but the verifier failed"),
    ("other", "other"),
]
CAUSE_TEXT = dict(CAUSES)


# ---------------------------------------------------------------------------------------------
# The proxy


class Recorder:
    """What the proxy saw, per run. The runner sets `run` before each run and clears it after."""

    def __init__(self, upstream: str, temperature: float | None):
        u = urllib.parse.urlsplit(upstream)
        self.host, self.port = u.hostname, u.port or 80
        self.prefix = u.path.rstrip("/")  # e.g. /v1
        self.temperature = temperature
        self.lock = threading.Lock()
        self.run: dict | None = None
        self.seed = 0
        self.prompts: dict[str, dict] = {}  # sha -> {system, tools}; shared by all runs

    def new_request(self) -> dict | None:
        with self.lock:
            if self.run is None:
                return None
            r = {"t0": round(time.monotonic() - self.run["_t0"], 2)}
            self.run["requests"].append(r)
            return r


def make_handler(rec: Recorder):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self._forward(None)

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self._forward(self.rfile.read(n))

        def _forward(self, body: bytes | None):
            r = rec.new_request() if body is not None else None
            if body is not None and r is not None:
                body = self._rewrite(body, r)
            path = self.path
            if not path.startswith(rec.prefix + "/") and rec.prefix:
                path = rec.prefix + path
            up = http.client.HTTPConnection(rec.host, rec.port, timeout=900)
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "content-length", "connection", "accept-encoding")}
            if body is not None:
                headers["Content-Length"] = str(len(body))
            t = time.monotonic()
            try:
                up.request(self.command, path, body=body, headers=headers)
                resp = up.getresponse()
            except OSError as e:
                if r is not None:
                    r.update(status=502, error=f"upstream: {e}")
                self._send_plain(502, f"proxy: upstream unreachable: {e}\n".encode())
                up.close()
                return
            if r is not None:
                r["status"] = resp.status
            stream = "text/event-stream" in (resp.getheader("Content-Type") or "")
            try:
                if stream:
                    self._relay_stream(resp, r)
                else:
                    data = resp.read()
                    if r is not None:
                        self._note_body(data, r)
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError, OSError):
                # tern went away (killed at the time limit, or cancelled): drop the upstream
                # connection too, so the server stops generating.
                if r is not None:
                    r["aborted"] = True
                self.close_connection = True
            finally:
                up.close()
                if r is not None:
                    r["duration_s"] = round(time.monotonic() - t, 2)

        def _rewrite(self, body: bytes, r: dict) -> bytes:
            try:
                j = json.loads(body)
            except ValueError:
                r["note"] = "body is not JSON"
                return body
            if not isinstance(j, dict):
                return body
            r["sent_max_tokens"] = j.get("max_tokens", j.get("max_completion_tokens"))
            r["sent_temperature"] = j.get("temperature")
            r["tool_choice"] = j.get("tool_choice")
            r["stream"] = j.get("stream")
            msgs = j.get("messages") or []
            r["n_messages"] = len(msgs)
            tools = j.get("tools") or []
            r["tools"] = [((t.get("function") or {}).get("name")) for t in tools]
            system = "".join(m.get("content") or "" for m in msgs
                             if isinstance(m, dict) and m.get("role") == "system"
                             and isinstance(m.get("content"), str))
            key = hashlib.sha256(json.dumps([system, tools], sort_keys=True).encode()).hexdigest()[:12]
            with rec.lock:
                rec.prompts.setdefault(key, {"system": system, "tools": tools})
            r["prompt_key"] = key
            if rec.temperature is not None:
                j["temperature"] = rec.temperature
                j["seed"] = rec.seed
            return json.dumps(j).encode()

        def _note_body(self, data: bytes, r: dict):
            try:
                j = json.loads(data)
            except ValueError:
                r["error"] = data[:500].decode("utf-8", "replace")
                return
            if r.get("status", 200) >= 400:
                r["error"] = json.dumps(j)[:500]
            u = j.get("usage") or {}
            r["completion_tokens"] = u.get("completion_tokens")
            ch = (j.get("choices") or [{}])[0]
            r["finish_reason"] = ch.get("finish_reason")
            msg = ch.get("message") or {}
            r["text"] = (msg.get("content") or "")[:4000]

        def _relay_stream(self, resp, r):
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunks, text, calls, args_len = 0, [], set(), 0
            head, tail = [], ""
            while True:
                line = resp.readline()
                if not line:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                if r is None or not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    continue
                try:
                    j = json.loads(payload)
                except ValueError:
                    continue
                if "error" in j:
                    r["error"] = json.dumps(j["error"])[:500]
                for ch in j.get("choices") or []:
                    d = ch.get("delta") or {}
                    if d.get("content"):
                        chunks += 1
                        if sum(map(len, text)) < 20000:
                            text.append(d["content"])
                    for tc in d.get("tool_calls") or []:
                        chunks += 1
                        calls.add(tc.get("index", 0))
                        f = tc.get("function") or {}
                        piece = (f"[{f['name']}] " if f.get("name") else "") + (f.get("arguments") or "")
                        args_len += len(piece)
                        if sum(map(len, head)) < 1500:
                            head.append(piece)
                        tail = (tail + piece)[-300:]
                    if ch.get("finish_reason"):
                        r["finish_reason"] = ch["finish_reason"]
                if j.get("usage"):
                    r["completion_tokens"] = j["usage"].get("completion_tokens")
                    r["prompt_tokens"] = j["usage"].get("prompt_tokens")
                r["chunks"] = chunks
                r["text"] = "".join(text)
                if calls:
                    r["stream_calls"] = len(calls)
                    r["call_text"] = "".join(head) + (" … " + tail if args_len > 1800 else "")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _send_plain(self, code, data):
            try:
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass

    return Handler


class ProxyServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


# ---------------------------------------------------------------------------------------------
# Running one task


def tern_env(base_url: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("TERN_") or k.startswith("OPENAI_") or k.startswith("ANTHROPIC_"))}
    env.update(OPENAI_BASE_URL=base_url, TERN_MODEL="local", NO_COLOR="1")
    return env


def run_one(tern: str, task, k: int, seed: int, rec: Recorder, proxy_url: str, args) -> dict:
    ws = Path(tempfile.mkdtemp(prefix=f"tern-eval-{task.name}-"))
    task.setup(ws)
    run = {"task": task.name, "run": k, "seed": seed, "requests": [], "_t0": time.monotonic()}
    with rec.lock:
        rec.run, rec.seed = run, seed
    cmd = [tern, "exec", "--json", "--max-turns", str(args.max_turns), *args.tern_arg, task.prompt]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=ws, env=tern_env(proxy_url), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = p.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            out, err = p.communicate()
    wall = time.monotonic() - t0
    time.sleep(0.3)  # let the proxy thread note an aborted stream
    with rec.lock:
        rec.run = None
    run.pop("_t0")
    events = []
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    try:
        ok, detail = task.verify(ws)
    except Exception as e:  # a verifier bug must not stop the whole eval
        ok, detail = False, f"verifier raised {e!r}"
    run.update(
        wall_s=round(wall, 1), timed_out=timed_out, exit_code=p.returncode,
        verified=ok, verifier_detail=detail,
        stderr_tail=err.decode("utf-8", "replace")[-1500:],
        events=[slim(e) for e in events],
        workspace=str(ws),
    )
    classify(run, rec.prompts)
    if not args.keep:
        shutil.rmtree(ws, ignore_errors=True)
    return run


def slim(e: dict) -> dict:
    """The event without the fields that only bloat the results file."""
    e = {k: v for k, v in e.items() if k not in ("session", "ts")}
    if e.get("type") == "tool_result" and isinstance(e.get("content"), str) and len(e["content"]) > 1500:
        e["content"] = e["content"][:700] + " … " + e["content"][-700:]
    return e


# ---------------------------------------------------------------------------------------------
# Classifying a run


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().lower()


def _clauses(text: str, min_len: int = 25) -> list[str]:
    parts = re.split(r"(?<=[.;:!?])\s+|\n+", text)
    return [_norm(p).rstrip(".;:") for p in parts if len(_norm(p)) >= min_len]


def _leaves(v, path=""):
    if isinstance(v, str):
        yield path, v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, f"{path}.{k}" if path else k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _leaves(x, f"{path}[{i}]")


GRAM = 5
SCHEMA_TYPES = {"string", "array", "object", "integer", "number", "boolean"}


def _grams(text: str, n: int = GRAM) -> set[tuple]:
    w = re.findall(r"[a-z0-9_$]+", text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def _descriptions(tools: list) -> list[str]:
    out = []
    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "description" and isinstance(x, str):
                    out.append(x)
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(tools)
    return out


def _short(v, n=160) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[:n] + "…"


_CALL_SHAPE = re.compile(r'"name"\s*:\s*"[^"]+"\s*,\s*"arguments"\s*:')


def classify(run: dict, prompts: dict) -> None:
    ev = run["events"]
    calls = [e for e in ev if e.get("type") == "tool_call"]
    results = [e for e in ev if e.get("type") == "result"]
    res = results[-1] if results else {}
    status = res.get("status")
    reqs = run["requests"]
    prompt = prompts.get(next((r.get("prompt_key") for r in reqs if r.get("prompt_key")), ""), {})
    system, tools = prompt.get("system", ""), prompt.get("tools", [])
    flags: dict[str, str] = {}  # flag -> one concrete example

    # The wire.
    out_tok = [(r.get("completion_tokens") if r.get("completion_tokens") is not None else r.get("chunks", 0))
               for r in reqs]
    run["output_tokens"] = sum(x or 0 for x in out_tok)
    run["max_answer_tokens"] = max((x or 0 for x in out_tok), default=0)
    run["usage_output_tokens"] = sum(e.get("output_tokens", 0) for e in ev if e.get("type") == "usage")
    run["n_requests"] = len(reqs)
    run["sent_output_cap"] = any(r.get("sent_max_tokens") is not None for r in reqs)
    bad = [r for r in reqs if (r.get("status") or 200) >= 400 or r.get("error")]
    if bad or status == "provider_unavailable" or any(e.get("type") == "retry" for e in ev):
        b = bad[0] if bad else {}
        flags["provider_error"] = _short(b.get("error") or res.get("error") or "retry", 200)
    big = [(i, x) for i, x in enumerate(out_tok) if (x or 0) > RUNAWAY_TOKENS]
    if big:
        i, x = big[0]
        r = reqs[i]
        flags["runaway_generation"] = (f"request {i + 1}: {x} output tokens, no max_tokens sent"
                                       if r.get("sent_max_tokens") is None else f"request {i + 1}: {x} tokens") + \
            f"; {r.get('stream_calls', 0)} tool calls in it; starts " + \
            _short(r.get("text") or r.get("call_text") or "", 160)
    gen_s = sum(r.get("duration_s") or 0 for r in reqs)
    run["tokens_per_s"] = round(run["output_tokens"] / gen_s, 1) if gen_s else None
    if run["timed_out"]:
        flags["timeout"] = (f"killed after {run['wall_s']} s; {len(reqs)} requests, {len(calls)} tool calls, "
                            f"{run['output_tokens']} tokens at {run['tokens_per_s']} tokens/s")

    # Tool calls.
    desc_clauses = {c for d in _descriptions(tools) for c in _clauses(d)}
    desc_grams = {g for d in _descriptions(tools) for g in _grams(d)}
    desc_norm = [_norm(d) for d in _descriptions(tools)]
    sys_clauses = set(_clauses(system))
    sys_norm = _norm(system)
    for c in calls:
        args = c.get("arguments") or {}
        for path, s in _leaves(args):
            ns = _norm(s)
            if c.get("name") == "bash" and path == "command":
                if len(ns) >= 8 and ns in sys_norm and "prompt_example_verbatim" not in flags:
                    flags["prompt_example_verbatim"] = f"bash {_short(args)}"
                continue
            hit = next((cl for cl in desc_clauses if cl in ns), None) or \
                (ns if len(ns) >= 20 and any(ns in d for d in desc_norm) else None)
            where = "tool description"
            if hit is None:
                g = next((g for g in _grams(s) if g in desc_grams), None)
                hit = " ".join(g) if g else None
                where = f"{GRAM} words in a row from a tool description"
            if hit is None and ns in SCHEMA_TYPES:
                hit, where = ns, "a JSON-schema type name as the value"
            if hit is None:
                hit = next((cl for cl in sys_clauses if cl in ns), None)
                where = "system prompt"
            if hit and "description_in_argument" not in flags:
                flags["description_in_argument"] = f"{c.get('name')} {path}={_short(s, 140)} ({where})"
    if calls and calls[0].get("name") != "bash":
        flags["non_bash_first"] = f"{calls[0].get('name')} {_short(calls[0].get('arguments'))}"
    if calls and not any(c.get("name") == "bash" for c in calls):
        flags["no_bash_call"] = ", ".join(sorted({c.get("name") for c in calls}))
    sig = [json.dumps([c.get("name"), c.get("arguments")], sort_keys=True) for c in calls]
    best, cur = 0, 0
    for i, s in enumerate(sig):
        cur = cur + 1 if i and s == sig[i - 1] else 1
        best = max(best, cur)
    run["max_identical_in_a_row"] = best
    per_answer = 0
    for e in ev:
        if e.get("type") == "assistant":
            tc = [json.dumps([t.get("name"), t.get("arguments")], sort_keys=True) for t in e.get("tool_calls") or []]
            per_answer = max([per_answer] + [tc.count(x) for x in set(tc)])
    run["max_identical_in_one_answer"] = per_answer
    if best >= REPEAT_LIMIT or per_answer >= REPEAT_LIMIT:
        i = max(range(len(sig)), key=lambda j: sig.count(sig[j])) if sig else 0
        flags["repeated_calls"] = (f"{best} identical calls in a row, {per_answer} in one answer: "
                                   f"{calls[i].get('name')} {_short(calls[i].get('arguments'), 120)}") if calls else ""
    many = max((r.get("stream_calls", 0) for r in reqs), default=0)
    if many >= REPEAT_LIMIT:
        r = next(r for r in reqs if r.get("stream_calls", 0) == many)
        flags["many_calls_in_one_answer"] = f"{many} tool calls streamed in one answer: {_short(r.get('call_text', ''), 160)}"
    if any(e.get("type") == "boundary" and e.get("kind") == "tools_off" for e in ev):
        flags["loop_guard_fired"] = "boundary tools_off"
    nudges = [e for e in ev if e.get("type") == "nudge"]
    if nudges:
        after = [e for e in ev[ev.index(nudges[0]):] if e.get("type") == "tool_call"]
        flags["nudged"] = (f"shown: {_short(nudges[0].get('command'), 100)}; then "
                           + (f"{after[0].get('name')} {_short(after[0].get('arguments'), 100)}" if after else "no call"))
    if (status == "max_turns" or run["timed_out"]) and "repeated_calls" in flags:
        flags["repeated_calls_to_limit"] = flags["repeated_calls"]
    answers = [e for e in ev if e.get("type") == "assistant"]
    if status == "completed" and answers:
        last = answers[-1]
        if _CALL_SHAPE.search(last.get("text") or "") or (last.get("tool_calls") and not any(
                e.get("type") == "tool_result" and e.get("id") == last["tool_calls"][-1].get("id") for e in ev)):
            flags["unrun_call_at_end"] = f"last answer: {_short(last.get('text') or last.get('tool_calls'), 160)}"
    if not calls and not run["timed_out"] and status in ("completed", None):
        text = res.get("text") or (answers[-1].get("text") if answers else "") or ""
        flags["prose_no_tool_call"] = f"answer: {_short(text, 160)}"
    if status == "failed":
        flags["tern_failed"] = _short(res.get("error") or "", 200)
    if status == "max_turns":
        flags["max_turns"] = f"{res.get('turns')} turns; last call {_short(calls[-1].get('name') if calls else None)}"
    if status == "completed" and not run["verified"]:
        flags["completed_verifier_failed"] = f"verifier: {run['verifier_detail']}"
    pc = [e for e in ev if e.get("type") == "tool_result" and e.get("name") == "plan_confirm" and e.get("is_error")]
    if pc:
        flags["plan_confirm_failed"] = f"{len(pc)}x: {_short(pc[0].get('content'), 160)}"
    tool_errors = [e for e in ev if e.get("type") == "tool_result" and e.get("is_error")]
    if tool_errors:
        flags["tool_errors"] = f"{len(tool_errors)}; first: {tool_errors[0].get('name')}: {_short(tool_errors[0].get('content'), 140)}"
    if run["verified"] and run["exit_code"] != 0:
        flags["passed_but_exit_nonzero"] = f"exit {run['exit_code']} ({status})"

    run["status"] = status
    run["flags"] = flags
    run["first_call"] = f"{calls[0].get('name')} {_short(calls[0].get('arguments'), 200)}" if calls else None
    run["tool_calls"] = [f"{c.get('name')} {_short(c.get('arguments'), 300)}" for c in calls]
    if run["verified"]:
        run["cause"] = None
    else:
        run["cause"] = next((k for k, _ in CAUSES if k in flags), "other")
        run["cause_example"] = flags.get(run["cause"], f"status {status}, verifier: {run['verifier_detail']}")


# ---------------------------------------------------------------------------------------------
# The report


def report(doc: dict, out=sys.stdout) -> None:
    runs = doc["runs"]
    for r in runs:  # from the raw record, so a fix to classify() applies to old results too
        classify(r, doc.get("advertised", {}))
    meta = doc["meta"]
    w = out.write
    w(f"\n{meta.get('label') or meta.get('tern')}: {meta.get('tern_version', '')} "
      f"temperature {meta['temperature']} seeds {meta['seed_base']}+run, "
      f"--max-turns {meta['max_turns']}, limit {meta['timeout_s']} s per run\n\n")
    names = [t for t in meta["tasks"]]
    w(f"{'task':<14} {'pass':>6}  {'median tok':>10}  {'median s':>8}  failure causes\n")
    for n in names:
        rs = [r for r in runs if r["task"] == n]
        p = sum(r["verified"] for r in rs)
        causes = {}
        for r in rs:
            if r["cause"]:
                causes[r["cause"]] = causes.get(r["cause"], 0) + 1
        tok = statistics.median([r["output_tokens"] for r in rs]) if rs else 0
        sec = statistics.median([r["wall_s"] for r in rs]) if rs else 0
        cs = ", ".join(f"{k} {v}" for k, v in sorted(causes.items(), key=lambda x: -x[1]))
        w(f"{n:<14} {p:>2}/{len(rs):<3}  {tok:>10.0f}  {sec:>8.1f}  {cs}\n")
    p = sum(r["verified"] for r in runs)
    tok = statistics.median([r["output_tokens"] for r in runs]) if runs else 0
    sec = statistics.median([r["wall_s"] for r in runs]) if runs else 0
    w(f"{'total':<14} {p:>2}/{len(runs):<3}  {tok:>10.0f}  {sec:>8.1f}  "
      f"(wall time {sum(r['wall_s'] for r in runs) / 60:.1f} min)\n")
    w(f"passed but exit code not 0: {sum(1 for r in runs if r['verified'] and r['exit_code'] != 0)}; "
      f"runs that sent an output-token cap: {sum(1 for r in runs if r.get('sent_output_cap'))} of {len(runs)}; "
      f"model speed, median over runs: {statistics.median([r['tokens_per_s'] or 0 for r in runs]) if runs else 0} tokens/s\n")

    w("\nfailure causes (one per failed run, the first that applies in this order):\n")
    for k, text in CAUSES:
        rs = [r for r in runs if r["cause"] == k]
        if rs:
            w(f"  {len(rs):>3}  {k}: {text}\n       e.g. {rs[0]['task']}#{rs[0]['run']}: {rs[0]['cause_example']}\n")
    w("\nsignals seen (all runs, passed ones too; a run can show several):\n")
    counts: dict[str, list] = {}
    for r in runs:
        for f, ex in r["flags"].items():
            counts.setdefault(f, []).append((r, ex))
    for f, lst in sorted(counts.items(), key=lambda x: -len(x[1])):
        r, ex = lst[0]
        w(f"  {len(lst):>3}  {f}   e.g. {r['task']}#{r['run']}: {_short(ex, 150)}\n")
    firsts: dict[str, int] = {}
    for r in runs:
        n = r["first_call"].split(" ")[0] if r["first_call"] else "(no call)"
        firsts[n] = firsts.get(n, 0) + 1
    w("\nfirst tool call: " + ", ".join(f"{k} {v}" for k, v in sorted(firsts.items(), key=lambda x: -x[1])) + "\n")


def compare(a: dict, b: dict) -> None:
    for d in (a, b):
        report(d)
    w = sys.stdout.write
    w("\nper task, passes: before -> after\n")
    for n in a["meta"]["tasks"]:
        pa = sum(r["verified"] for r in a["runs"] if r["task"] == n)
        pb = sum(r["verified"] for r in b["runs"] if r["task"] == n)
        na = sum(1 for r in a["runs"] if r["task"] == n)
        nb = sum(1 for r in b["runs"] if r["task"] == n)
        w(f"  {n:<14} {pa}/{na} -> {pb}/{nb}\n")


# ---------------------------------------------------------------------------------------------
# Starting the model server (optional)


def find_start_sh(given: str | None) -> Path:
    here = Path(__file__).resolve().parent
    cands = [given, os.environ.get("TERN_REALMODEL_START"),
             here.parent.parent / "shared/realmodel/start.sh", "/work/shared/realmodel/start.sh"]
    for c in cands:
        if c and Path(c).is_file():
            return Path(c)
    sys.exit("no start.sh found: pass --start-sh PATH (shared/realmodel/start.sh) or --base-url of a running server")


def start_server(start_sh: Path, port: int) -> tuple[str, int]:
    r = subprocess.run(["bash", str(start_sh), str(port)], capture_output=True, text=True)
    m = re.search(r"OPENAI_BASE_URL=(\S+) pid=(\d+)", r.stdout)
    if r.returncode != 0 or not m:
        sys.exit(f"start.sh failed: {r.stdout}{r.stderr}")
    return m.group(1), int(m.group(2))


# ---------------------------------------------------------------------------------------------


def selftest() -> int:
    """Each verifier fails on the untouched workspace and passes on a known-good solution."""
    good = {
        "hello_file": "echo 'Hello, tern!' > greeting.txt",
        "count_lines": "wc -l < data.txt > count.txt",
        "fix_python": "sed -i 's/return a - b/return a + b/' calc.py",
        "rename_ext": "for f in docs/*.txt; do mv \"$f\" \"${f%.txt}.md\"; done",
        "json_value": "python3 -c 'import json;print(json.load(open(\"config.json\"))[\"server\"][\"port\"])' > port.txt",
        "script_exec": "printf '#!/bin/bash\\necho \"Hello from the script\"\\n' > hello.sh && chmod +x hello.sh",
        "append_line": "echo 'buy milk' >> todo.txt",
        "backup_logs": "mkdir backup && cp logs/*.log backup/ && ls backup/*.log | wc -l > backup/count.txt",
    }
    bad = 0
    for t in TASKS:
        for sol, want in ((None, False), (good[t.name], True)):
            ws = Path(tempfile.mkdtemp(prefix="tern-eval-selftest-"))
            t.setup(ws)
            if sol:
                subprocess.run(["bash", "-c", sol], cwd=ws, check=True)
            ok, detail = t.verify(ws)
            shutil.rmtree(ws)
            mark = "ok " if ok == want else "BAD"
            bad += ok != want
            print(f"{mark} {t.name:<14} {'solved' if sol else 'untouched':<9} -> {ok} {detail}")
    print(f"{len(TASKS) * 2 - bad} passed, {bad} failed")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", help="the tern binary to evaluate")
    ap.add_argument("--label", help="a name for this binary in the report (default: the path)")
    ap.add_argument("--base-url", default="http://127.0.0.1:8088/v1", help="the model server (OpenAI-compatible)")
    ap.add_argument("--start-server", action="store_true",
                    help="start shared/realmodel/start.sh on --port first and stop it (by its pid) at the end")
    ap.add_argument("--start-sh", help="path of start.sh (default: found beside the repository)")
    ap.add_argument("--port", type=int, default=8088)
    ap.add_argument("--model", default="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (llama.cpp, shared/realmodel)",
                    help="what the server runs, recorded in the results (MODEL=1.5b start.sh: the 1.5B)")
    ap.add_argument("--runs", type=int, default=4, help="runs per task")
    ap.add_argument("--tasks", help="comma-separated task names (default: all)")
    ap.add_argument("--temperature", type=float, default=0.2,
                    help="set on every request by the proxy; negative: leave requests as tern sends them")
    ap.add_argument("--seed", type=int, default=1000, help="run k of every task is sampled with seed SEED+k")
    ap.add_argument("--max-turns", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=240, help="wall-clock limit per run, seconds")
    ap.add_argument("--tern-arg", action="append", default=[], help="an extra argument for tern exec (repeatable)")
    ap.add_argument("--out", help="write the results JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the workspaces")
    ap.add_argument("--report", nargs="+", metavar="RESULTS", help="print the table of one results file, or compare two")
    ap.add_argument("--selftest", action="store_true", help="check the verifiers against known-good solutions")
    args = ap.parse_args()

    if args.selftest:
        return selftest()
    if args.report:
        docs = [json.loads(Path(p).read_text()) for p in args.report]
        compare(*docs[:2]) if len(docs) > 1 else report(docs[0])
        return 0
    if not args.tern:
        ap.error("--tern is required")
    tern = str(Path(args.tern).resolve())
    tasks = [BY_NAME[n] for n in args.tasks.split(",")] if args.tasks else TASKS

    server_pid = None
    base_url = args.base_url
    if args.start_server:
        base_url, server_pid = start_server(find_start_sh(args.start_sh), args.port)
        print(f"model server: {base_url} pid {server_pid}", file=sys.stderr)
    temperature = args.temperature if args.temperature >= 0 else None
    rec = Recorder(base_url, temperature)
    proxy = ProxyServer(("127.0.0.1", 0), make_handler(rec))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}{rec.prefix}"

    version = subprocess.run([tern, "--version"], capture_output=True, text=True).stdout.strip()
    meta = {
        "tern": tern, "label": args.label, "tern_version": version,
        "tern_sha256": hashlib.sha256(Path(tern).read_bytes()).hexdigest(),
        "model_server": base_url, "model": args.model,
        "temperature": temperature, "temperature_how": "set in every request body by the runner's proxy",
        "seed_base": args.seed, "runs": args.runs, "max_turns": args.max_turns, "timeout_s": args.timeout,
        "tern_args": args.tern_arg, "runaway_tokens": RUNAWAY_TOKENS,
        "tasks": [t.name for t in tasks], "prompts": {t.name: t.prompt for t in tasks},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    doc = {"meta": meta, "runs": [], "advertised": rec.prompts}

    def save():
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(args.out + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
            tmp.replace(args.out)

    try:
        for k in range(args.runs):  # run k of every task before run k+1 of any, so a cut-short eval is balanced
            for t in tasks:
                r = run_one(tern, t, k, args.seed + k, rec, proxy_url, args)
                doc["runs"].append(r)
                save()
                print(f"{t.name}#{k}: {'PASS' if r['verified'] else 'fail'} {r['cause'] or ''} "
                      f"exit {r['exit_code']} {r['wall_s']} s {r['output_tokens']} tok; "
                      f"first {_short(r['first_call'] or '-', 90)}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted; the runs so far are saved", file=sys.stderr)
    finally:
        proxy.shutdown()
        if server_pid:
            try:
                os.kill(server_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        save()
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
