#!/usr/bin/env bash
# The client under test for the MCP project's conformance suite (`@modelcontextprotocol/conformance
# client --command "tests/support/conformance_client.sh"`): the suite appends its server's URL and
# names the scenario in MCP_CONFORMANCE_SCENARIO; this script points a fresh tern configuration
# at that server and does what the scenario asks with `tern mcp`. TERN names the binary.
set -u
url="${!#}"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
mkdir -p "$home/tern" "$home/ws"
printf '{"mcpServers": {"conf": {"type": "http", "url": "%s"}}}\n' "$url" > "$home/tern/mcp.json"
cd "$home/ws"
export XDG_CONFIG_HOME="$home"
tern="${TERN:-tern}"
case "${MCP_CONFORMANCE_SCENARIO:-}" in
  tools_call) "$tern" mcp call conf add_numbers '{"a": 2, "b": 3}' ;;
  sse-retry) "$tern" mcp call conf test_reconnection ;;
  *) "$tern" mcp list conf ;;
esac
