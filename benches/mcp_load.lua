-- wrk script for benches/mcp_load/throughput.rs: POST one MCP `tools/call` (stateless JSON mode).
-- The JSON-RPC body comes from the MCP_BODY environment variable, e.g.
--   MCP_BODY='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_attempt_status","arguments":{"attempt_id":"<uuid>"}}}' \
--   wrk -t2 -c32 -d10s --latency -s benches/mcp_load.lua http://127.0.0.1:8765/mcp
wrk.method = "POST"
wrk.body = os.getenv("MCP_BODY")
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
