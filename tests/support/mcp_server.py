#!/usr/bin/env python3
"""A fake MCP server for tern's tests: a real process on stdio, or a real HTTP server on
127.0.0.1 (port 0, the port written to --port-file), speaking one protocol era:

  --era 2026   stateless (MCP 2026-07-28): server/discover, _meta on every request, unknown
               methods (initialize too) answered -32601 (HTTP 404)
  --era 2025   stateful (MCP 2025-11-25): initialize, then notifications/initialized; anything
               before initialize is refused (--before-init error|die|silent)

Tools: echo, add, fail (isError), image (a PNG part), env (a variable of the server's own
environment), slow (sleeps), die (the server exits), boom (a JSON-RPC error), and --tools N more
(tool_0 ...), listed --page K at a time with nextCursor. Every message received is appended as
one JSON line to --log (HTTP: with the request's headers).
"""

import argparse
import base64
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--era", choices=["2025", "2026"], default="2026")
p.add_argument("--http", action="store_true")
p.add_argument("--port-file")
p.add_argument("--sse", action="store_true", help="HTTP: answer requests as an SSE stream")
p.add_argument("--resume", action="store_true",
               help="HTTP SSE: close a tools/call stream after a priming event; the answer comes "
                    "on the GET that resumes it (Last-Event-ID, SEP-1699)")
p.add_argument("--before-init", choices=["error", "die", "silent"], default="error")
p.add_argument("--tools", type=int, default=0)
p.add_argument("--page", type=int, default=3)
p.add_argument("--log")
p.add_argument("--hang", action="store_true", help="never answer anything")
p.add_argument("--concurrent", action="store_true",
               help="stdio: each tools/call answered from a thread of its own")
p.add_argument("--start-delay", type=float, default=0.0,
               help="stdio: seconds of start-up before the first line is read (a slow start)")
p.add_argument("--reject-first", action="store_true",
               help="2026: refuse the first request with -32022 (supported: 2026-07-28)")
args = p.parse_args()

STATELESS = "2026-07-28"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
lock = threading.Lock()
state = {"initialized": False, "rejected": False, "pending": None}


def log(entry):
    if args.log:
        with lock, open(args.log, "a") as f:
            f.write(json.dumps(entry) + "\n")


def tools():
    base = [
        {"name": "echo", "description": "Echo the text back.\nSecond line.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
        {"name": "add", "description": "Add two numbers.",
         "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                         "required": ["a", "b"]}},
        {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
        {"name": "image", "description": "A picture.", "inputSchema": {"type": "object"}},
        {"name": "env", "description": "A variable of the server's environment.",
         "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}},
        {"name": "slow", "description": "Sleeps.", "inputSchema": {"type": "object"}},
        {"name": "die", "description": "The server exits.", "inputSchema": {"type": "object"}},
        {"name": "boom", "description": "A protocol error.", "inputSchema": {"type": "object"}},
        {"name": "write", "description": "Writes a file.",
         "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}}},
    ]
    base += [{"name": f"tool_{i}", "description": f"Extra tool {i}.", "inputSchema": {"type": "object"}}
             for i in range(args.tools)]
    return base


def text(t, error=False):
    r = {"content": [{"type": "text", "text": t}]}
    if error:
        r["isError"] = True
    return r


def call(params):
    name = params.get("name")
    a = params.get("arguments") or {}
    if name == "echo":
        return text(str(a.get("text", "")))
    if name == "add":
        return text(str(a.get("a", 0) + a.get("b", 0)))
    if name == "fail":
        return text("the tool failed on purpose", error=True)
    if name == "image":
        return {"content": [{"type": "text", "text": "here:"},
                            {"type": "image", "mimeType": "image/png", "data": PNG}]}
    if name == "env":
        return text(os.environ.get(str(a.get("name", "")), "(unset)"))
    if name == "slow":
        time.sleep(float(a.get("seconds", 30)))
        return text("slept")
    if name == "die":
        sys.stdout.flush()
        os._exit(3)
    if name == "write":
        try:
            with open(str(a.get("path", "")), "w") as f:
                f.write(str(a.get("text", "")))
            return text("wrote")
        except OSError as e:
            return text(f"refused: {e}", error=True)
    if name == "boom":
        raise RpcError(-32603, "the tool exploded")
    if name and name.startswith("tool_"):
        return text(name)
    raise RpcError(-32602, f"Unknown tool: {name}")


class RpcError(Exception):
    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def handle(msg, headers=None):
    """One message in; (the answer or None, HTTP status)."""
    log({"msg": msg, "headers": headers or {}})
    if args.hang:
        time.sleep(3600)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        if method == "notifications/initialized":
            state["initialized"] = True
        return None, 202
    params = msg.get("params") or {}

    def ok(result):
        if args.era == "2026":
            result.setdefault("resultType", "complete")
        return {"jsonrpc": "2.0", "id": mid, "result": result}, 200

    def err(code, message, status=200, data=None):
        e = {"code": code, "message": message}
        if data is not None:
            e["data"] = data
        return {"jsonrpc": "2.0", "id": mid, "error": e}, status

    try:
        if args.era == "2026":
            meta = params.get("_meta") or {}
            if args.reject_first and not state["rejected"]:
                state["rejected"] = True
                return err(-32022, "Unsupported protocol version", 400,
                           {"supported": [STATELESS], "requested": "x"})
            if meta.get("io.modelcontextprotocol/protocolVersion") != STATELESS:
                return err(-32602, "Invalid params: missing _meta keys", 400)
            if headers is not None and headers.get("mcp-protocol-version") != STATELESS:
                return err(-32020, "MCP-Protocol-Version header does not match _meta", 400)
            if method == "server/discover":
                return ok({"supportedVersions": [STATELESS], "capabilities": {"tools": {}},
                           "serverInfo": {"name": "fake-2026", "version": "1.0"}})
        else:
            if method == "initialize":
                state["initialized"] = True
                return ok({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "fake-2025", "version": "1.0"}})
            if method == "ping":
                return ok({})
            if not state["initialized"]:
                if args.before_init == "die":
                    os._exit(1)
                if args.before_init == "silent":
                    return None, 202
                return err(-32600, "Received request before initialization was complete", 400)
        if method == "tools/list":
            all_tools = tools()
            start = int(params.get("cursor") or 0)
            page = all_tools[start:start + args.page]
            result = {"tools": page}
            if start + args.page < len(all_tools):
                result["nextCursor"] = str(start + args.page)
            return ok(result)
        if method == "tools/call":
            return ok(call(params))
        return err(-32601, f"Method not found: {method}", 404)
    except RpcError as e:
        return err(e.code, e.message)


def stdio():
    out = threading.Lock()

    def one(msg):
        answer, _ = handle(msg)
        if answer is not None:
            with out:
                # A notification of the server's own comes first, as real servers send logs.
                sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                             "params": {"level": "info", "data": "working"}}) + "\n")
                sys.stdout.write(json.dumps(answer) + "\n")
                sys.stdout.flush()

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        print("got " + line[:80], file=sys.stderr, flush=True)
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if args.concurrent and msg.get("method") == "tools/call":
            # Each call in a thread of its own: answers come back in any order, by id.
            threading.Thread(target=one, args=(msg,), daemon=True).start()
        else:
            one(msg)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        headers = {k.lower(): v for k, v in self.headers.items()}
        log({"get": True, "headers": headers})
        answer = state["pending"]
        if not answer or headers.get("last-event-id") != "prime-1":
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        state["pending"] = None
        data = f"id: 2\ndata: {json.dumps(answer)}\n\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_DELETE(self):
        log({"delete": True, "headers": {k.lower(): v for k, v in self.headers.items()}})
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            msg = json.loads(body)
        except ValueError:
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if args.era == "2025" and msg.get("method") != "initialize" and state["initialized"]:
            if headers.get("mcp-session-id") != "sess-1":
                answer = {"jsonrpc": "2.0", "id": None,
                          "error": {"code": -32000, "message": "Bad Request: No valid session ID"}}
                return self.send_json(answer, 400)
        answer, status = handle(msg, headers)
        if answer is None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if args.resume and status == 200 and msg.get("method") == "tools/call":
            state["pending"] = answer
            data = b"id: prime-1\nretry: 50\ndata: \n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if args.sse and status == 200:
            note = json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                               "params": {"progress": 1}})
            ping = json.dumps({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
            data = f"data: {note}\n\ndata: {ping}\n\nid: 7\ndata: {json.dumps(answer)}\n\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            if msg.get("method") == "initialize":
                self.send_header("Mcp-Session-Id", "sess-1")
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_json(answer, status, msg.get("method") == "initialize")

    def send_json(self, answer, status, session=False):
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if session:
            self.send_header("Mcp-Session-Id", "sess-1")
        self.end_headers()
        self.wfile.write(data)


if args.http:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.handle_error = lambda *a: None  # a client that closed its kept-alive connection
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(tmp, args.port_file)
    srv.serve_forever()
else:
    time.sleep(args.start_delay)
    stdio()
