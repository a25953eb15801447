#!/usr/bin/env python3
"""End-to-end time per call of the official Python MCP SDK (`mcp`, see requirements.txt) against
a running `vk-observer demo`, at detail 0 (the default) and detail 2, with the answer's size.

usage:
  detail_timing.py <daemon-mcp-url> [calls]      e.g. http://127.0.0.1:18765/mcp 200

For each of get_attempt_status (one attempt), tail_attempt_logs (the newest 50 entries) and
list_tasks (the Demo project), the script makes `calls` calls (default 200) at detail 0 and as
many at detail 2, alternating (the demo keeps adding tasks: both levels see the same board),
after 10 warm-up calls, and prints the median and p90 of the time from `call_tool` to its
return — the SDK's whole path, including its validation of `structuredContent` against the
tool's output schema — and the median bytes of the answer's text. One line per (tool, level),
then a Markdown table.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

from mcp import Client


async def first_attempt(client: Client) -> tuple[str, str]:
    """(project_id, attempt_id) of a task of the Demo project with an attempt, waiting up to 60 s."""
    deadline = time.monotonic() + 60
    while True:
        projects = (await client.call_tool("list_projects", {})).structured_content["projects"]
        demo = [p["project_id"] for p in projects if p.get("project_name") == "Demo"]
        if demo:
            tasks = (await client.call_tool("list_tasks", {"project_id": demo[0]})).structured_content["tasks"]
            ids = [t["latest_attempt_id"] for t in tasks if t.get("latest_attempt_id")]
            if ids:
                return demo[0], ids[0]
        if time.monotonic() > deadline:
            raise SystemExit("no Demo task with an attempt after 60 s")
        await asyncio.sleep(1)


async def timed(client: Client, tool: str, args: dict[str, Any], calls: int) -> dict[int, tuple[float, float, int]]:
    """Per detail level (0, 2): (median ms, p90 ms, median answer bytes) of `calls` calls each,
    the levels alternating, after a warm-up."""
    for _ in range(10):
        await client.call_tool(tool, args)
    times: dict[int, list[float]] = {0: [], 2: []}
    sizes: dict[int, list[int]] = {0: [], 2: []}
    for _ in range(calls):
        for detail in (0, 2):
            t = time.perf_counter()
            r = await client.call_tool(tool, {**args, "detail": detail})
            times[detail].append((time.perf_counter() - t) * 1000)
            if r.is_error:
                raise SystemExit(f"{tool}({args}) failed: {r.content}")
            sizes[detail].append(len(r.content[0].text))
    out = {}
    for detail, ts in times.items():
        ts.sort()
        out[detail] = (statistics.median(ts), ts[int(len(ts) * 0.9) - 1], int(statistics.median(sizes[detail])))
    return out


async def main(url: str, calls: int) -> None:
    async with Client(url, read_timeout_seconds=30) as client:
        project, attempt = await first_attempt(client)
        cases = [
            ("get_attempt_status", {"attempt_id": attempt}),
            ("tail_attempt_logs", {"attempt_id": attempt}),
            ("list_tasks", {"project_id": project}),
        ]
        rows = []
        for tool, args in cases:
            for detail, (med, p90, size) in (await timed(client, tool, args, calls)).items():
                rows.append((tool, detail, med, p90, size))
                print(json.dumps({"tool": tool, "detail": detail, "median_ms": round(med, 3),
                                  "p90_ms": round(p90, 3), "bytes": size}))
        print(f"\n| tool | detail | median ms | p90 ms | answer bytes |  ({calls} calls each)")
        print("|---|---|---|---|---|")
        for tool, detail, med, p90, size in rows:
            print(f"| {tool} | {detail} | {med:.2f} | {p90:.2f} | {size} |")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 200))
