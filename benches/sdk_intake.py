#!/usr/bin/env python3
"""How long the official Python MCP SDK (`mcp`, tests/py/requirements.txt) takes to take in a batch
`get_attempt_status` answer (issue 39 item 7), beside a raw HTTP client in the same run.

usage:
  target/py-venv/bin/python benches/sdk_intake.py --url http://127.0.0.1:PORT/mcp
      [--token TOKEN] [--count 50] [--calls 200] [--detail 0] [--mode auto|legacy]
      [--wait 600] [--profile 0]

Against a running daemon, e.g. `cargo build --release` then `target/release/vk-observer demo
--listen 127.0.0.1:18931 --every 1`: the demo adds one attempt every ~7 s, and the script waits
(up to --wait seconds) until the Demo project has --count + 2 attempts, then asks for the status
of the --count oldest (finished, so the answer does not change between calls). It first calls
the tool once at each detail level, batch and single (the SDK checks each answer against the
output schema and raises on a mismatch), then over Streamable HTTP makes --calls calls (after 20
warm-up calls) of each of, alternating:

- `sdk`: `client.session.call_tool("get_attempt_status", {"attempt_ids": [...]})`, the SDK's
  whole path: the POST, reading the SSE or JSON answer, its parse, its pydantic validation and its
  `jsonschema` validation of `structuredContent` against the tool's `outputSchema`;
- `raw`: the very request the SDK sent (captured from its HTTP client: same headers, same body)
  POSTed again by a bare `httpx2.AsyncClient`, timed until the answer's last byte;

with, beside each one's wall time, this process's CPU time during it (`sdk_cpu`, `raw_cpu`: what
the client spent, the daemon's time and a loaded machine's waits left out); and then, on the
answer's bytes, the pieces of the SDK's intake (CPU time), each as the installed SDK calls it
(mcp/client/streamable_http.py, mcp/client/session.py):

- `parse`: `jsonrpc_message_adapter.validate_json` of the JSON-RPC message (the SDK's parse);
- `debug_fmt`: `f"SSE message: {message}"`, which the SDK formats on every SSE message even when
  debug logging is off;
- `surface`: `mcp_types.methods.validate_server_result("tools/call", version, result)`;
- `model`: the session's `_call_tool_adapter.validate_python(result)` (the `CallToolResult`);
- `jsonschema`: `best_match(validator.iter_errors(structuredContent))` with the session's own
  compiled validator for the tool (`_output_schema_validator`);

and at detail 0 the same pieces (`floor_*`) on the answer cut to seed 002's "SHALL include" fields
(each item only those ten, the schema only their subschemas, as typed today): the least any typed
answer carrying the seed's fields costs the SDK, whatever the shape of the rest.

It prints the p50 and p90 (ms) of each, the answer's sizes and a summary of the output schema's
shape, as one JSON line per measure and a Markdown table. `--profile N` adds a cProfile of N more
SDK calls (top 25 functions by own time, then by cumulative time).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx2
from jsonschema import exceptions as jsonschema_exceptions
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp_types import methods as mcp_methods
from mcp_types.jsonrpc import jsonrpc_message_adapter

TOOL = "get_attempt_status"
PIECES = ("parse", "debug_fmt", "surface", "model", "jsonschema")
# Seed 002's "SHALL include" list for an attempt's status: what any answer must carry.
SEED_FIELDS = ("attempt_id", "task_id", "workspace_branch", "created_at", "updated_at", "latest_session_id",
               "latest_execution_process_id", "state", "last_activity_at", "failure_summary")
FLOOR = ("floor_parse", "floor_debug_fmt", "floor_surface", "floor_model", "floor_jsonschema")


class Capture(httpx2.AsyncBaseTransport):
    """The SDK's HTTP transport, keeping the last `tools/call` request it sent for `TOOL`."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.request: tuple[str, dict[str, str], bytes] | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = request.content
        if request.method == "POST" and b'"tools/call"' in body and TOOL.encode() in body:
            self.request = (str(request.url), dict(request.headers), body)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def sse_message(body: bytes, content_type: str) -> bytes:
    """The JSON-RPC response in an answer: the body itself, or the SSE event carrying it."""
    if content_type.startswith("application/json"):
        return body
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
        if b'"result"' in data or b'"error"' in data:
            return data
    raise SystemExit(f"no JSON-RPC response in the answer: {body[:300]!r}")


def percentiles(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[max(0, int(len(ms) * 0.9) - 1)]


async def oldest_attempts(client: Client, count: int, wait: float) -> list[str]:
    """The `count` oldest attempt ids of the Demo project, waiting up to `wait` seconds for them."""
    deadline = time.monotonic() + wait
    while True:
        projects = (await client.call_tool("list_projects", {})).structured_content["projects"]
        ids: list[str] = []
        for project in projects:
            cursor = None
            while True:
                args: dict[str, Any] = {"project_id": project["project_id"], "limit": 200}
                if cursor:
                    args["cursor"] = cursor
                page = (await client.call_tool("list_tasks", args)).structured_content
                ids += [t["latest_attempt_id"] for t in page["tasks"] if t.get("latest_attempt_id")]
                cursor = page.get("next_cursor")
                if not cursor:
                    break
        if len(ids) >= count + 2:
            # list_tasks lists the newest first: keep the oldest, leaving out the newest (running).
            return ids[-count:]
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(ids)} attempts after {wait:.0f} s, fewer than {count} + 2")
        print(f"waiting: {len(ids)} attempts of {count} + 2", flush=True)
        await asyncio.sleep(5)


def schema_shape(schema: dict[str, Any]) -> dict[str, int]:
    """Bytes, `$defs` and how many of each costly keyword the schema holds."""
    counts = {"bytes": len(json.dumps(schema)), "defs": len(schema.get("$defs", {}))}
    counts.update({k: 0 for k in ("$ref", "anyOf", "oneOf", "format", "type_lists")})

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k in ("$ref", "anyOf", "oneOf", "format"):
                counts[k] += k in v
            counts["type_lists"] += isinstance(v.get("type"), list)
            for k, sub in v.items():
                if k != "properties" or not isinstance(sub, dict):
                    walk(sub)
                else:
                    for prop in sub.values():
                        walk(prop)
        elif isinstance(v, list):
            for sub in v:
                walk(sub)

    walk(schema)
    return counts


def intake_pieces(client: Client, message: bytes, tool: str = TOOL, prefix: str = "") -> dict[str, Callable[[], Any]]:
    """Each piece of the SDK's intake of `message` (checked against `tool`'s cached output
    schema), as a call doing just that piece, named with `prefix`."""
    session = client.session
    version = session.protocol_version or "2025-11-25"
    parsed = jsonrpc_message_adapter.validate_json(message, by_name=False)
    raw = parsed.result
    result = session._call_tool_adapter.validate_python(raw, by_name=False)
    schema = session._tool_output_schemas[tool]
    validator = session._output_schema_validator(tool, schema)
    structured = result.structured_content

    def check() -> None:
        error = jsonschema_exceptions.best_match(validator.iter_errors(structured))
        if error is not None:
            raise SystemExit(f"the answer does not validate: {error}")

    pieces: dict[str, Callable[[], Any]] = {
        "parse": lambda: jsonrpc_message_adapter.validate_json(message, by_name=False),
        "debug_fmt": lambda: f"SSE message: {parsed}",
        "surface": lambda: mcp_methods.validate_server_result("tools/call", version, raw),
        "model": lambda: session._call_tool_adapter.validate_python(raw, by_name=False),
        "jsonschema": check,
    }
    return {prefix + name: piece for name, piece in pieces.items()}


def seed_floor(client: Client, message: bytes) -> bytes:
    """`message` cut to the floor of any typed answer: each item keeps only seed 002's fields, and
    the tool's cached output schema (as the SDK validates with it) keeps only their (unchanged)
    subschemas; the pieces timed on it are what no shaping of today's schema could go below."""
    session = client.session
    whole = json.loads(message)
    structured = whole["result"]["structuredContent"]
    structured["attempts"] = [{k: a.get(k) for k in SEED_FIELDS} for a in structured["attempts"]]
    whole["result"]["content"] = [{"type": "text", "text": json.dumps(structured, separators=(",", ":"))}]
    schema = json.loads(json.dumps(session._tool_output_schemas[TOOL]))
    item = schema["properties"]["attempts"]["items"]
    item["properties"] = {k: v for k, v in item["properties"].items() if k in SEED_FIELDS}
    item["required"] = [k for k in item.get("required", []) if k in SEED_FIELDS]
    session._tool_output_schemas[FLOOR_TOOL] = schema
    return json.dumps(whole, separators=(",", ":")).encode()


FLOOR_TOOL = TOOL + "@seed-floor"


async def measure(client: Client, capture: Capture, ids: list[str], args: argparse.Namespace) -> None:
    for detail in (0, 1, 2):
        for target in ({"attempt_ids": ids}, {"attempt_id": ids[0]}):
            # The SDK checks structuredContent against the output schema: a mismatch raises.
            r = await client.session.call_tool(TOOL, {**target, "detail": detail})
            if r.is_error:
                raise SystemExit(f"{TOOL} at detail {detail} failed: {r.content}")
    call = {"attempt_ids": ids, "detail": args.detail}
    for _ in range(20):
        r = await client.session.call_tool(TOOL, call)
        if r.is_error:
            raise SystemExit(f"{TOOL} failed: {r.content}")
    assert capture.request is not None, "the SDK's tools/call was not captured"
    url, headers, body = capture.request
    times: dict[str, list[float]] = {"sdk": [], "raw": [], "sdk_cpu": [], "raw_cpu": []}
    answer = (b"", "")
    async with httpx2.AsyncClient(timeout=30) as raw:
        for _ in range(5):
            await raw.post(url, headers=headers, content=body)
        for _ in range(args.calls):
            t, c = time.perf_counter(), time.process_time()
            await client.session.call_tool(TOOL, call)
            times["sdk"].append((time.perf_counter() - t) * 1000)
            times["sdk_cpu"].append((time.process_time() - c) * 1000)
            t, c = time.perf_counter(), time.process_time()
            resp = await raw.post(url, headers=headers, content=body)
            content = resp.content
            times["raw"].append((time.perf_counter() - t) * 1000)
            times["raw_cpu"].append((time.process_time() - c) * 1000)
            answer = (content, resp.headers.get("content-type", ""))
    message = sse_message(*answer)
    pieces = intake_pieces(client, message)
    if args.detail == 0:
        floor = seed_floor(client, message)
        pieces.update(intake_pieces(client, floor, FLOOR_TOOL, "floor_"))
    for name in pieces:
        times[name] = []
    for _ in range(args.calls):
        for name, piece in pieces.items():
            c = time.process_time()
            piece()
            times[name].append((time.process_time() - c) * 1000)
    report(client, times, answer, message, len(ids), args)
    if args.profile:
        await profile(client, call, args.profile)


def report(client: Client, times: dict[str, list[float]], answer: tuple[bytes, str], message: bytes, n: int,
           args: argparse.Namespace) -> None:
    result = json.loads(message)["result"]
    text = result["content"][0]["text"]
    sizes = {"answer_bytes": len(answer[0]), "text_bytes": len(text.encode()),
             "structured_bytes": len(json.dumps(result["structuredContent"], separators=(",", ":")).encode())}
    shape = schema_shape(client.session._tool_output_schemas[TOOL])
    print(json.dumps({"attempts": n, "detail": args.detail, "protocol": client.session.protocol_version,
                      "content_type": answer[1], **sizes, "schema": shape}))
    rows = []
    for name, ms in times.items():
        p50, p90 = percentiles(ms)
        rows.append((name, p50, p90))
        print(json.dumps({"measure": name, "p50_ms": round(p50, 3), "p90_ms": round(p90, 3)}))
    pieces = sum(p50 for name, p50, _ in rows if name in PIECES)
    print(f"\n| {TOOL}, {n} attempts, detail {args.detail} | p50 ms | p90 ms |  ({args.calls} calls each)")
    print("|---|---|---|")
    for name, p50, p90 in rows:
        print(f"| {name} | {p50:.2f} | {p90:.2f} |")
    print(f"| pieces' sum (p50s) | {pieces:.2f} | |")
    floor = sum(p50 for name, p50, _ in rows if name in FLOOR)
    if floor:
        print(f"| floor pieces' sum (p50s): seed 002's fields only, typed | {floor:.2f} | |")


async def profile(client: Client, call: dict[str, Any], calls: int) -> None:
    """cProfile of `calls` SDK calls: everything the event loop's thread runs meanwhile (the
    transport's tasks too), top 25 functions by own time, then by cumulative time."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        await client.session.call_tool(TOOL, call)
    prof.disable()
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(order).print_stats(25)
        print(out.getvalue())


async def main(args: argparse.Namespace) -> None:
    capture = Capture()
    headers = {"authorization": f"Bearer {args.token}"} if args.token else None
    # What the SDK builds itself (create_mcp_http_client), its requests through the capture.
    http = httpx2.AsyncClient(headers=headers, transport=capture,
                              timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT))
    transport = streamable_http_client(args.url, http_client=http)
    async with http, Client(transport, mode=args.mode, read_timeout_seconds=30, cache=None) as client:
        ids = await oldest_attempts(client, args.count, args.wait)
        await client.list_tools()
        await measure(client, capture, ids, args)


def cli() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the daemon's MCP endpoint, e.g. http://127.0.0.1:18931/mcp")
    p.add_argument("--token", help="a bearer token, when the daemon asks for one")
    p.add_argument("--count", type=int, default=50, help="attempts per call (default 50)")
    p.add_argument("--calls", type=int, default=200, help="timed calls per measure (default 200)")
    p.add_argument("--detail", type=int, default=0, choices=(0, 1, 2), help="detail level (default 0)")
    p.add_argument("--mode", default="auto", help="the SDK's mode: auto (2026-07-28, default) or legacy")
    p.add_argument("--wait", type=float, default=600, help="seconds to wait for enough attempts")
    p.add_argument("--profile", type=int, default=0, help="cProfile this many more SDK calls")
    return p.parse_args()


def first_exit(e: BaseException) -> SystemExit | None:
    """The SystemExit inside the task groups' exception groups, if any."""
    if isinstance(e, SystemExit):
        return e
    for inner in getattr(e, "exceptions", ()):
        if (found := first_exit(inner)) is not None:
            return found
    return None


if __name__ == "__main__":
    try:
        asyncio.run(main(cli()))
    except BaseException as e:  # anyio wraps a SystemExit raised in the session in groups
        if (exit_ := first_exit(e)) is None:
            raise
        raise SystemExit(exit_.code) from None
