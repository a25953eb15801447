"""Park N wait_for_attempt_change calls on a running daemon (session mode, e.g. `vk-observer
demo`) over raw HTTP/1.1 sockets, one connection each, and print the daemon's VmRSS before, 4 s
after the last call was sent, and LATER seconds after that (issue 27, lean waiters; a stand-in
for mcp_load's phase c7 `lean_waiters` when the bench cannot be built).

Usage: python3 benches/park_probe.py PORT N DAEMON_PID PROGRESS(0|1) [LATER]
The waits watch the demo's project (no since_token), so they stay parked until a change or 60 s.
It does not check the daemon's `vk_observer_waiters` gauge: on a loaded machine the ramp of N
connections may still be going on when RSS is read (see docs/performance.md).
"""
import asyncio, json, sys, time, re
HOST, PORT = "127.0.0.1", int(sys.argv[1]); N = int(sys.argv[2]); PID = int(sys.argv[3]); PROG = sys.argv[4] == "1"
def rss():
    for l in open(f"/proc/{PID}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
async def post(body, sid=None, keep=False):
    r, w = await asyncio.open_connection(HOST, PORT)
    b = json.dumps(body).encode()
    h = f"POST /mcp HTTP/1.1\r\nhost: {HOST}:{PORT}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\ncontent-length: {len(b)}\r\n"
    if sid: h += f"mcp-session-id: {sid}\r\n"
    w.write(h.encode() + b"\r\n" + b); await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    if keep: return r, w, head
    data = b""
    try:
        data = await asyncio.wait_for(r.read(65536), 2)
    except asyncio.TimeoutError: pass
    w.close()
    return head, data
async def main():
    head, data = await post({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"p","version":"1"}}})
    sid = re.search(rb"mcp-session-id: (\S+)", head, re.I).group(1).decode()
    await post({"jsonrpc":"2.0","method":"notifications/initialized"}, sid)
    for k in range(30):
        head, data = await post({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_projects","arguments":{}}}, sid)
        m = re.search(rb'([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})', data)
        if m: break
        await asyncio.sleep(1)
    pid_ = m.group(1).decode()
    await asyncio.sleep(2)
    r0 = rss(); conns = []
    for i in range(N):
        body = {"jsonrpc":"2.0","id":100+i,"method":"tools/call","params":{"name":"wait_for_attempt_change","arguments":{"project_id":pid_,"timeout_ms":60000}}}
        if PROG: body["params"]["_meta"] = {"progressToken": 100+i}
        conns.append(asyncio.ensure_future(post(body, sid, keep=True)))
        if i % 200 == 199: await asyncio.sleep(0.05)
    await asyncio.sleep(4)
    r1 = rss()
    print(f"N={N} prog={PROG} rss before {r0/1024:.1f} MB after {r1/1024:.1f} MB per wait {(r1-r0)*1024/N:.0f} B", flush=True)
    await asyncio.sleep(float(sys.argv[5]) if len(sys.argv) > 5 else 0)
    r2 = rss(); print(f"later {r2/1024:.1f} MB per wait {(r2-r0)*1024/N:.0f} B")
asyncio.run(main())
