#!/usr/bin/env bash
# The client under test for the MCP project's conformance suite (`@modelcontextprotocol/conformance
# client --command "tests/support/conformance_client.sh"`): the suite appends its server's URL,
# names the scenario in MCP_CONFORMANCE_SCENARIO and may pass the tool calls it wants in
# MCP_CONFORMANCE_CONTEXT (`{"toolCalls": [{"name", "arguments"}]}`); this script points a fresh
# tern configuration at that server and does what the scenario asks with `tern mcp`. TERN names
# the binary.
set -u
url="${!#}"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
mkdir -p "$home/tern" "$home/ws"
printf '{"mcpServers": {"conf": {"type": "http", "url": "%s"}}}\n' "$url" > "$home/tern/mcp.json"
cd "$home/ws"
export XDG_CONFIG_HOME="$home"
tern="${TERN:-tern}"
# The calls the suite asks for, one "NAME<TAB>ARGUMENTS" line each.
calls=$(python3 - <<'EOF'
import json, os
ctx = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
for c in ctx.get("toolCalls") or []:
    print(c["name"] + "\t" + json.dumps(c.get("arguments") or {}))
EOF
)
case "${MCP_CONFORMANCE_SCENARIO:-}" in
  tools_call) "$tern" mcp call conf add_numbers '{"a": 2, "b": 3}' ;;
  sse-retry) "$tern" mcp call conf test_reconnection ;;
  json-schema-2020-12-preservation)
    # The other tool's input schema goes back through the echo tool, as tern listed it
    # (nothing resolved or rewritten on the way).
    focal=$("$tern" mcp list conf | sed -n 's/^  \([^ ]*\).*/\1/p' | grep -vx json_schema_echo | head -1)
    schema=$("$tern" mcp schema conf "$focal")
    "$tern" mcp call conf json_schema_echo "{\"schema\": $schema}" ;;
  http-invalid-tool-headers)
    # Every tool tern lists is called with arguments made from its schema: the ones whose
    # x-mcp-header is invalid are left out of the list, so never called.
    "$tern" mcp list conf | sed -n 's/^  \([^ ]*\).*/\1/p' | while read -r tool; do
      args=$("$tern" mcp schema conf "$tool" | python3 -c '
import json, sys
s = json.load(sys.stdin)
pick = {"string": "x", "integer": 1, "number": 1, "boolean": True}
print(json.dumps({k: pick.get(v.get("type"), "x") for k, v in (s.get("properties") or {}).items()}))')
      "$tern" mcp call conf "$tool" "$args"
    done ;;
  *)
    if [ -n "$calls" ]; then
      printf '%s\n' "$calls" | while IFS=$'\t' read -r tool args; do
        "$tern" mcp call conf "$tool" "$args"
      done
    else
      "$tern" mcp list conf
    fi ;;
esac
