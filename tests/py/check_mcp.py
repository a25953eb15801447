#!/usr/bin/env python3
"""Drive a running vk-observer daemon with the official Python MCP SDK (`mcp`, see requirements.txt).

usage:
  check_mcp.py http  <daemon-mcp-url> [MODE]                       e.g. http://127.0.0.1:18765/mcp
  check_mcp.py stdio <vk-observer-binary> <daemon-mcp-url> [MODE]  spawns `<binary> mcp --daemon <url>`

MODE is the SDK's `mode=`: `legacy` (protocol 2025-11-25) or `auto` (its default: 2026-07-28,
required here); without it both run, one after the other (.ci/run runs each as its own step).

The daemon must be `vk-observer demo` (the built-in VK simulator playing scripted attempts in a
project named "Demo"). For each connection mode the script lists the tools, checks their schemas
and descriptions, calls every read tool with arguments discovered by walking
projects → tasks → attempts, checks the error envelope, and prints one summary line:

  python-mcp http: 10 tools, 19 calls ok (mode=auto, protocol 2026-07-28)

Any failure prints `python-mcp <transport>: FAILED (...): <reason>` on stderr and exits 1.

Client modes: `auto` (the SDK's default: it probes `server/discover`; the daemon's rmcp 3.11
server answers it, so protocol 2026-07-28 is used, and anything else fails) and `legacy` (the
`initialize` handshake, protocol 2025-11-25), over HTTP and over stdio.

Activity across a daemon restart (run by .ci/run around a restart of the demo on its data dir):
  check_mcp.py activity-save   <daemon-mcp-url> <state.json>
  check_mcp.py activity-resume <daemon-mcp-url> <state.json>
`activity-save` walks the Demo project's activity (tail_project_activity) oldest first from the
store's first token, in small pages, and records the items and `next_since_token`; `activity-resume`
continues from that token after the restart (the restarted demo plays a new simulated VK, so the
old project's tasks are deleted from the cache) and checks: same store epoch, no item at or
below the saved token, every saved task then deleted exactly once, and saved + resumed items equal
a fresh walk of the whole feed (no gap, no duplicate); it also pages newest first by cursor.
Each mode also reads the attempt resources (`resources/templates/list`, `resources/read`);
it checks that a subscription receives `notifications/resources/updated` after
a change in the simulator (a `follow_up` on the completed attempt): through
`subscriptions/listen` in `auto` mode (2026-07-28), through `resources/subscribe` in `legacy` mode,
over HTTP and over stdio (the bridge follows resources through its daemon session).
The `auto` HTTP mode also holds one `wait_for_attempt_change` for 40 s with a progress callback
and a 30 s read timeout of its own, and requires at least 3 `notifications/progress` (every 10 s,
the daemon's default `[mcp] progress_every`) before the answer.

Set CHECK_MCP_BRIDGE_LOG=<file> to send the stdio bridge's stderr there instead of ours.

The SDK's own warnings are recorded (a handler on the `mcp` logger): a session close the SDK
reports as failed (`Session termination failed: <status>`, e.g. a DELETE answered 202) fails the
mode it happened in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
import uuid
import warnings
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

HTTP_MODES = ("auto", "legacy")
# The protocol each SDK mode must end up on against this daemon (`auto` falling back to the
# initialize handshake would be a failure of the new era, not a pass).
MODE_PROTOCOL = {"auto": "2026-07-28", "legacy": "2025-11-25"}
# The stdio bridge marks the results it forwards from its 2025-11-25 daemon leg as
# `resultType: "complete"`, so a 2026-07-28 client on stdio accepts them.
STDIO_MODES = ("auto", "legacy")
# The project the walk starts from: the demo's ("Demo"; "demo", its repo's, on `demo --dialect workspaces`).
DEMO_PROJECT = os.environ.get("CHECK_MCP_PROJECT", "Demo")
OVERALL_TIMEOUT_S = 200  # per mode; the completion wait below is at most 60 s of it, the progress wait 40 s
COMPLETION_WAIT_S = 60

READ_TOOLS = {
    "list_projects",
    "list_repos",
    "list_executors",
    "list_tasks",
    "get_task",
    "list_task_attempts",
    "get_attempt_status",
    "tail_attempt_logs",
    "get_attempt_changes",
    "tail_session_messages",
}
HEADINGS = ("Use when:", "Required:", "Optional:", "Next:", "Avoid:")
UPSTREAM_STATES = {"connected", "reconnecting", "down"}


class CheckFailed(Exception):
    pass


def check(cond: Any, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def short(v: Any, n: int = 600) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= n else s[:n] + "…"


# ---------------------------------------------------------------------------------------------
# Schema rules


def walk_properties(v: Any, path: str, out: list[tuple[str, Any]]) -> None:
    """Every property of every object schema under `v` (nested properties, items, $defs, if/then/
    else, combinators...), with its path. Mirrors tests/mcp_schema.rs."""
    if isinstance(v, dict):
        props = v.get("properties")
        if isinstance(props, dict):
            for name, schema in props.items():
                out.append((f"{path}.{name}", schema))
                walk_properties(schema, f"{path}.{name}", out)
        for k, child in v.items():
            # `if` conditions restate properties as constraints, not field definitions.
            if k not in ("properties", "if"):
                walk_properties(child, f"{path}/{k}", out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            walk_properties(x, f"{path}[{i}]", out)


def check_tool_schema(t: Any) -> int:
    """Check one tool's description and schemas; returns the number of properties checked."""
    desc = t.description or ""
    for h in HEADINGS:
        check(h in desc, f"{t.name}: description lacks the heading {h!r}: {desc!r}")
    schema = t.input_schema
    check(isinstance(schema, dict), f"{t.name}: input_schema is not an object: {schema!r}")
    check(schema.get("type") == "object", f"{t.name}: input_schema root type is {schema.get('type')!r}, not 'object'")
    for k in ("oneOf", "anyOf", "allOf"):
        check(k not in schema, f"{t.name}: input_schema has a root {k} (rejected by Claude clients)")
    check(t.output_schema is not None, f"{t.name}: no output_schema")
    n = 0
    for side, s in (("input", schema), ("output", t.output_schema)):
        props: list[tuple[str, Any]] = []
        walk_properties(s, f"{t.name}:{side}", props)
        for path, p in props:
            d = p.get("description") if isinstance(p, dict) else None
            check(isinstance(d, str) and d.strip(), f"{path} has no description: {short(p, 300)}")
            n += 1
    return n


# ---------------------------------------------------------------------------------------------
# Calls


class Session:
    def __init__(self, client: Client) -> None:
        self.c = client
        self.calls = 0

    async def ok(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Call a tool that must succeed; returns its structured content."""
        r = await self.c.call_tool(name, args)
        self.calls += 1
        text = [getattr(x, "text", x) for x in (r.content or [])]
        check(r.is_error is False, f"{name}({short(args)}) returned is_error={r.is_error}: {short(text)}")
        sc = r.structured_content
        check(isinstance(sc, dict), f"{name}({short(args)}): structured_content is not a dict: {short(sc)}")
        # Detail 0 (the default) leaves freshness out while the cache is current; levels 1
        # and 2 always carry it.
        fr = sc.get("freshness")
        if fr is not None or args.get("detail", 0) != 0:
            check(isinstance(fr, dict), f"{name}({short(args)}): no freshness object: {short(sc)}")
            check(
                fr.get("upstream") in UPSTREAM_STATES,
                f"{name}({short(args)}): freshness.upstream={fr.get('upstream')!r} not in {sorted(UPSTREAM_STATES)}",
            )
        return sc

    async def err(self, name: str, args: dict[str, Any], code: str) -> dict[str, Any]:
        """Call a tool that must fail with the error envelope carrying `code`."""
        r = await self.c.call_tool(name, args)
        self.calls += 1
        check(r.is_error is True, f"{name}({short(args)}): expected is_error=True (code {code}), got {short(r.structured_content)}")
        check(r.content and hasattr(r.content[0], "text"), f"{name}({short(args)}): error without text content: {r.content!r}")
        raw = r.content[0].text
        try:
            env = json.loads(raw)
        except ValueError:
            raise CheckFailed(f"{name}({short(args)}): error text is not JSON: {raw!r}")
        check(isinstance(env, dict), f"{name}({short(args)}): error envelope is not an object: {raw!r}")
        check(env.get("code") == code, f"{name}({short(args)}): expected code {code!r}, got {raw}")
        for k in ("retryable", "hint", "details"):
            check(k in env, f"{name}({short(args)}): error envelope lacks {k!r}: {raw}")
        check(isinstance(env["retryable"], bool), f"{name}: retryable is not a bool: {raw}")
        check(isinstance(env["hint"], str) and env["hint"].strip(), f"{name}: empty hint: {raw}")
        return env


async def wait_for_completed_attempt(s: Session, project_id: str) -> tuple[dict[str, Any], str]:
    """Poll (up to COMPLETION_WAIT_S, 1 s apart) until a task's latest attempt is `completed`."""
    deadline = time.monotonic() + COMPLETION_WAIT_S
    last = "no tasks yet"
    while True:
        tasks = (await s.ok("list_tasks", {"project_id": project_id}))["tasks"]
        with_attempt = [t for t in tasks if t.get("latest_attempt_id")]
        if with_attempt:
            ids = [t["latest_attempt_id"] for t in with_attempt][:100]
            st = await s.ok("get_attempt_status", {"attempt_ids": ids, "detail": 2})
            # "completed" also shows for a moment between the agent and its cleanup script;
            # a finished demo attempt is completed with the cleanup script as its latest process.
            states = {
                a["attempt_id"]: (a["state"], (a.get("latest_process") or {}).get("run_reason"))
                for a in st["attempts"]
            }
            for t in with_attempt:
                if states.get(t["latest_attempt_id"]) == ("completed", "cleanupscript"):
                    return t, t["latest_attempt_id"]
            last = f"attempt states: {states}"
        if time.monotonic() > deadline:
            raise CheckFailed(f"no task with a completed latest attempt after {COMPLETION_WAIT_S} s ({last})")
        await asyncio.sleep(1)


async def run_checks(client: Client) -> tuple[int, int]:
    s = Session(client)

    # -- tools/list and schema rules
    tools = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    names = {t.name for t in tools}
    missing = READ_TOOLS - names
    check(not missing, f"tools/list lacks {sorted(missing)} (got {sorted(names)})")
    check("get_context" not in names, "get_context is listed to a client outside an attempt workspace")
    described = sum(check_tool_schema(t) for t in tools)
    check(described > 100, f"only {described} schema properties walked; schemas look truncated")

    # -- discovery walk
    projects = (await s.ok("list_projects", {}))["projects"]
    demo = [p for p in projects if p.get("project_name") == DEMO_PROJECT]
    check(demo, f"no project named {DEMO_PROJECT!r} in {short(projects)}")
    project_id = demo[0]["project_id"]

    repos = await s.ok("list_repos", {"project_id": project_id})
    check(repos.get("project_id") == project_id, f"list_repos answered for {repos.get('project_id')!r}")
    check(repos["repos"], f"list_repos: the Demo project has no repositories: {short(repos)}")

    executors = (await s.ok("list_executors", {}))["executors"]
    check(executors and all(e.get("executor") for e in executors), f"list_executors: {short(executors)}")

    task, attempt_id = await wait_for_completed_attempt(s, project_id)
    task_id = task["task_id"]

    detail = await s.ok("get_task", {"task_id": task_id, "include_attempts": True})
    check(detail["task"]["task_id"] == task_id, f"get_task returned task {detail['task'].get('task_id')!r}")
    attempts = detail.get("attempts") or []
    check(attempts, f"get_task(include_attempts=true) returned no attempts: {short(detail)}")
    check(
        detail["task"]["latest_attempt_id"] == attempts[0]["attempt_id"],
        f"get_task: task.latest_attempt_id {detail['task']['latest_attempt_id']} != attempts[0] {attempts[0]['attempt_id']}",
    )

    al = await s.ok("list_task_attempts", {"task_id": task_id})
    check(al["attempts"], f"list_task_attempts returned no attempts: {short(al)}")
    check(
        al["latest_attempt_id"] == al["attempts"][0]["attempt_id"],
        f"list_task_attempts: latest_attempt_id {al['latest_attempt_id']} != attempts[0].attempt_id {al['attempts'][0]['attempt_id']}",
    )
    check(al["latest_attempt_id"] == attempt_id, f"list_task_attempts: latest_attempt_id {al['latest_attempt_id']} != {attempt_id}")
    session_id = al["attempts"][0].get("latest_session_id")

    # A single call answers the status fields at the top level (seed 002); only a batch has `attempts`.
    a0 = await s.ok("get_attempt_status", {"attempt_id": attempt_id, "detail": 2})
    check("attempts" not in a0, f"get_attempt_status(attempt_id) answered a batch: {short(a0)}")
    check(a0.get("attempt_id") == attempt_id and a0.get("state") == "completed", f"get_attempt_status: {short(a0)}")
    check(a0.get("task_id") == task_id, f"get_attempt_status: task_id {a0.get('task_id')!r} != {task_id}")
    check(isinstance(a0.get("token"), str) and "freshness" in a0, f"get_attempt_status: no token/freshness: {short(a0)}")
    result = a0.get("result") or {}
    check(
        result.get("next_tool") and "finalized_at" in result and "last_error" in result,
        f"get_attempt_status: result lacks seed-003 fields: {short(result)}",
    )

    unknown = str(uuid.uuid4())
    batch = await s.ok("get_attempt_status", {"attempt_ids": [attempt_id, unknown]})
    check([a["attempt_id"] for a in batch["attempts"]] == [attempt_id], f"batch status attempts: {short(batch['attempts'])}")
    check(batch.get("not_found") == [unknown], f"batch status not_found {batch.get('not_found')!r}, expected [{unknown}]")

    logs = await s.ok("tail_attempt_logs", {"attempt_id": attempt_id})
    entries = logs["entries"]
    check(entries, f"tail_attempt_logs: no entries for a completed attempt: {short(logs)}")
    idx = [e["entry_index"] for e in entries]
    check(idx == sorted(idx) and len(set(idx)) == len(idx), f"tail_attempt_logs: entry_index not strictly ascending: {idx}")
    check(logs.get("latest_entry_index") == idx[-1], f"tail_attempt_logs: latest_entry_index {logs.get('latest_entry_index')} != last entry {idx[-1]}")
    newer = await s.ok("tail_attempt_logs", {"attempt_id": attempt_id, "after_entry_index": idx[-1], "detail": 2})
    check(
        all(e["entry_index"] > idx[-1] for e in newer["entries"]),
        f"tail_attempt_logs(after_entry_index={idx[-1]}) returned old entries: {[e['entry_index'] for e in newer['entries']]}",
    )
    check(not newer["entries"], f"tail_attempt_logs(after_entry_index={idx[-1]}) of a completed attempt returned new entries")

    changes = await s.ok("get_attempt_changes", {"attempt_id": attempt_id, "detail": 2})
    check(changes.get("attempt_id") == attempt_id, f"get_attempt_changes answered for {changes.get('attempt_id')!r}")
    # VK 0.1.x gives the daemon no change summary (docs/agent-guide.md "Which VK"): not ready there.
    if not changes.get("blocked") and changes.get("ready", True):
        check(
            changes["summary"]["file_count"] == len(changes["files"]),
            f"get_attempt_changes: summary.file_count {changes['summary']['file_count']} != {len(changes['files'])} files",
        )

    msgs = await s.ok("tail_session_messages", {"attempt_id": attempt_id})
    check(msgs["turns"], f"tail_session_messages: no turns for a completed attempt: {short(msgs)}")
    if session_id:
        check(msgs.get("session_id") == session_id, f"tail_session_messages: session {msgs.get('session_id')} != attempt's latest {session_id}")
    turns = [t["turn_index"] for t in msgs["turns"]]
    check(turns == sorted(turns), f"tail_session_messages: turns not oldest first: {turns}")

    # -- error envelope
    await s.err("tail_attempt_logs", {"attempt_id": attempt_id, "cursor": 1, "after_entry_index": 0}, "invalid_argument")
    await s.err("get_attempt_status", {"attempt_id": attempt_id, "attempt_ids": [attempt_id]}, "invalid_argument")
    await s.err("get_task", {"task_id": str(uuid.uuid4())}, "not_found")
    await s.err("list_tasks", {"project_id": "not-a-uuid"}, "invalid_argument")

    await check_resource_reads(client, attempt_id)
    if CHECK_PUSH[0]:
        await check_progress_wait(s, attempt_id, client.protocol_version)
    # Over stdio the bridge serves both ways of following a resource from its daemon session.
    await check_subscription(s, attempt_id, session_id, client.protocol_version)

    return len(tools), s.calls


# ---------------------------------------------------------------------------------------------
# Activity across a restart

ACTIVITY_WAIT_S = 40


def item_key(i: dict[str, Any]) -> str:
    return f"{i['token']}|{i['kind']}|{i['task_id']}|{i.get('attempt_id')}|{i.get('execution_process_id')}"


def token_seq(t: str) -> int:
    return int(t.split(".")[1])


async def walk_activity(s: Session, project_id: str, since: str, limit: int = 4) -> tuple[list[dict[str, Any]], str]:
    """Every item after `since`, oldest first, following next_since_token until caught up."""
    items: list[dict[str, Any]] = []
    while True:
        page = await s.ok("tail_project_activity", {"project_id": project_id, "since_token": since, "limit": limit})
        check(page["order"] == "oldest_first", f"tail_project_activity order {page['order']!r}")
        check(page["token_reset"] is False, f"tail_project_activity reset from {since}: {short(page)}")
        items.extend(page["items"])
        since = page["next_since_token"]
        if not page["has_more"]:
            return items, since


async def activity_save(client: Client, path: str) -> str:
    s = Session(client)
    projects = (await s.ok("list_projects", {}))["projects"]
    demo = [p for p in projects if p.get("project_name") == "Demo"]
    check(demo, f"no project named 'Demo' in {short(projects)}")
    project_id = demo[0]["project_id"]
    deadline = time.monotonic() + ACTIVITY_WAIT_S
    while True:
        first = await s.ok("tail_project_activity", {"project_id": project_id})
        start = first["token"].split(".")[0] + ".0"
        items, since = await walk_activity(s, project_id, start)
        kinds = {i["kind"] for i in items}
        if {"task_created", "process_ended"} <= kinds:
            break
        check(time.monotonic() < deadline, f"no task_created and process_ended in the Demo feed after {ACTIVITY_WAIT_S} s: {sorted(kinds)}")
        await asyncio.sleep(1)
    # Newest first by cursor: the same items, reversed (nothing newer than the walk's token).
    back: list[dict[str, Any]] = []
    cursor = None
    while True:
        args: dict[str, Any] = {"project_id": project_id, "limit": 3}
        if cursor:
            args["cursor"] = cursor
        page = await s.ok("tail_project_activity", args)
        check(page["order"] == "newest_first", f"cursor page order {page['order']!r}")
        back.extend(i for i in page["items"] if token_seq(i["token"]) <= token_seq(since))
        cursor = page["next_cursor"]
        if not cursor:
            break
    check(
        [item_key(i) for i in reversed(back)] == [item_key(i) for i in items],
        "the newest-first cursor walk differs from the oldest-first walk",
    )
    await s.err("tail_project_activity", {"project_id": project_id, "since_token": since, "cursor": "00"}, "invalid_argument")
    with open(path, "w") as f:
        json.dump({"project_id": project_id, "start": start, "since": since, "items": items}, f)
    return f"python-mcp activity: {len(items)} items saved at {since} ({s.calls} calls)"


async def activity_resume(client: Client, path: str) -> str:
    s = Session(client)
    with open(path) as f:
        saved = json.load(f)
    project_id, since, before = saved["project_id"], saved["since"], saved["items"]
    created = {i["task_id"] for i in before if i["kind"] == "task_created"}
    deadline = time.monotonic() + ACTIVITY_WAIT_S
    after: list[dict[str, Any]] = []
    cont = since
    while True:
        more, cont = await walk_activity(s, project_id, cont)
        after.extend(more)
        deleted = [i["task_id"] for i in after if i["kind"] == "task_deleted"]
        if created <= set(deleted):
            break
        check(time.monotonic() < deadline, f"the old Demo tasks were not all deleted after the restart within {ACTIVITY_WAIT_S} s")
        await asyncio.sleep(0.5)
    check(since.split(".")[0] == cont.split(".")[0], f"the store epoch changed across the restart: {since} -> {cont}")
    check(all(token_seq(i["token"]) > token_seq(since) for i in after), "an item at or below the saved token came back")
    for t in created:
        n = sum(1 for i in after if i["kind"] == "task_deleted" and i["task_id"] == t)
        check(n == 1, f"task {t} deleted {n} times in the feed")
    full, _ = await walk_activity(s, project_id, saved["start"], limit=50)
    seen = [item_key(i) for i in before + after]
    check([item_key(i) for i in full[: len(seen)]] == seen, "saved + resumed items differ from a fresh walk (gap or duplicate)")
    return f"python-mcp activity: {len(after)} items after the restart continue {since} exactly ({s.calls} calls)"
# Pushed notifications: progress keep-alives and resource subscriptions (HTTP only)

# Set by main(): [checks enabled for this run, the legacy-mode notification queue].
CHECK_PUSH: list[Any] = [False, None]
PROGRESS_WAIT_S = 40
MIN_PROGRESS = 3
UPDATE_WAIT_S = 20


async def check_progress_wait(s: Session, attempt_id: str, protocol: str) -> None:
    """A 40 s wait on a quiet attempt: progress keeps coming although the client's own read
    timeout (30 s) is shorter; only in `auto` mode (one 40 s wait per CI run)."""
    if protocol < "2026-07-28":
        return
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    started = time.monotonic()
    r = await s.c.call_tool(
        "wait_for_attempt_change",
        {"attempt_ids": [attempt_id], "timeout_ms": PROGRESS_WAIT_S * 1000},
        read_timeout_seconds=PROGRESS_WAIT_S + 20,
        progress_callback=on_progress,
    )
    s.calls += 1
    waited = time.monotonic() - started
    sc = r.structured_content or {}
    check(r.is_error is False, f"wait_for_attempt_change (40 s) failed: {short(r.content)}")
    # Detail 0 (the default) leaves `false` out: absent `changed` means unchanged.
    check(sc.get("changed", False) is False, f"the quiet attempt changed during the 40 s wait: {short(sc)}")
    check(
        len(seen) >= MIN_PROGRESS and seen == sorted(seen),
        f"{len(seen)} progress notifications in a {waited:.0f} s wait (want >= {MIN_PROGRESS}, growing): {seen}",
    )
    print(f"python-mcp: {len(seen)} progress notifications during a {waited:.0f} s wait", flush=True)


async def check_resource_reads(c: Client, attempt_id: str) -> None:
    """The resource templates, and each resource read for the completed attempt."""
    templates = sorted(t.uri_template for t in (await c.list_resource_templates()).resource_templates)
    check(
        templates
        == [
            "vk-observer://attempts/{id}",
            "vk-observer://attempts/{id}/logs",
            "vk-observer://projects/{id}/activity",
            # A task handle's resource (tasks extension): listed to every client, since a
            # 2026-07-28 client may cache this listing publicly (cache_hints).
            "vk-observer://tasks/{id}",
        ],
        f"resources/templates/list: {templates}",
    )
    uri = f"vk-observer://attempts/{attempt_id}"
    read = await c.read_resource(uri)
    status = json.loads(read.contents[0].text)
    check(status.get("attempt_id") == attempt_id, f"resources/read {uri}: {short(status)}")
    if c.protocol_version >= "2026-07-28":
        # Live data: the SDK's default cache must never serve it again.
        hints = (read.ttl_ms, read.cache_scope)
        check(hints == (0, "private"), f"resources/read {uri}: cache hints {hints}, want (0, 'private')")
    logs = json.loads((await c.read_resource(uri + "/logs")).contents[0].text)
    check(logs.get("entries"), f"resources/read {uri}/logs: no entries: {short(logs)}")


async def check_subscription(s: Session, attempt_id: str, session_id: str | None, protocol: str) -> None:
    """An update after a change in the simulator (a follow-up on the attempt)."""
    c = s.c
    uri = f"vk-observer://attempts/{attempt_id}"
    check(session_id, "the completed attempt has no session to follow up")
    follow_up = {"action": "send", "attempt_id": attempt_id, "prompt": "One more thing (check_mcp subscription).", "request_id": str(uuid.uuid4())}
    started = time.monotonic()
    if protocol >= "2026-07-28":
        async with c.listen(resource_subscriptions=[uri]) as sub:
            honored = list(sub.honored.resource_subscriptions or [])
            check(honored == [uri], f"subscriptions/listen honored {honored}, asked [{uri}]")
            await s.ok("follow_up", follow_up)
            with anyio_fail_after(UPDATE_WAIT_S):
                event = await sub.__anext__()
            check(getattr(event, "uri", None) == uri, f"subscriptions/listen: unexpected event {event!r}")
        how = "subscriptions/listen"
    else:
        queue = CHECK_PUSH[1]
        while not queue.empty():
            queue.get_nowait()
        with warnings.catch_warnings():
            # The SDK flags the legacy methods as deprecated; legacy mode is what is checked here.
            warnings.simplefilter("ignore")
            await c.subscribe_resource(uri)
            await s.ok("follow_up", follow_up)
            with anyio_fail_after(UPDATE_WAIT_S):
                while await queue.get() != uri:
                    pass
            await c.unsubscribe_resource(uri)
        how = "resources/subscribe"
    print(f"python-mcp: {how} update {time.monotonic() - started:.2f} s after the follow-up call", flush=True)


def anyio_fail_after(seconds: float) -> Any:
    import anyio

    return anyio.fail_after(seconds)


def make_update_handler(queue: asyncio.Queue[str]) -> Any:
    """A message handler that queues the URIs of `notifications/resources/updated`."""

    async def handler(message: Any) -> None:
        m = getattr(message, "root", message)
        if getattr(m, "method", None) == "notifications/resources/updated":
            queue.put_nowait(m.params.uri)

    return handler


class SdkWarnings(logging.Handler):
    """Records the SDK's warnings and errors; the SDK reports a failed session close this way
    only (it does not raise)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")

    def take(self) -> list[str]:
        out, self.messages = self.messages, []
        return out


SDK_WARNINGS = SdkWarnings()
logging.getLogger("mcp").addHandler(SDK_WARNINGS)


def check_sdk_warnings(transport: str, mode: str) -> None:
    """Fail on a session close the SDK reports as failed; show any other warning."""
    seen = SDK_WARNINGS.take()
    for m in seen:
        print(f"python-mcp {transport} (mode={mode}): SDK warning: {m}", file=sys.stderr)
    failed = [m for m in seen if "Session termination failed" in m]
    check(not failed, f"the SDK reported a failed session close: {failed}")


def leaf_exceptions(e: BaseException) -> list[BaseException]:
    """anyio task groups wrap errors raised inside `async with Client(...)` in ExceptionGroups."""
    if isinstance(e, BaseExceptionGroup):
        return [x for sub in e.exceptions for x in leaf_exceptions(sub)]
    return [e]


async def run_mode(transport: str, target: Any, mode: str) -> str:
    queue: asyncio.Queue[str] = asyncio.Queue()
    CHECK_PUSH[:] = [transport == "http", queue]
    async with Client(target, mode=mode, read_timeout_seconds=30, message_handler=make_update_handler(queue)) as client:
        want = MODE_PROTOCOL[mode]
        check(client.protocol_version == want, f"mode={mode} negotiated protocol {client.protocol_version}, not {want}")
        n_tools, n_calls = await run_checks(client)
        return f"python-mcp {transport}: {n_tools} tools, {n_calls} calls ok (mode={mode}, protocol {client.protocol_version})"


def run_activity(step: str, url: str, path: str) -> int:
    async def go() -> str:
        async with Client(url, read_timeout_seconds=30) as client:
            if step == "activity-save":
                return await activity_save(client, path)
            return await activity_resume(client, path)

    try:
        line = asyncio.run(asyncio.wait_for(go(), OVERALL_TIMEOUT_S))
        check_sdk_warnings("http", step)
    except BaseException as e:  # noqa: BLE001 - report anything, including groups
        if isinstance(e, KeyboardInterrupt):
            raise
        reasons = "; ".join(str(x) if isinstance(x, CheckFailed) else f"{type(x).__name__}: {x}" for x in leaf_exceptions(e))
        print(f"python-mcp {step}: FAILED: {reasons}", file=sys.stderr)
        return 1
    print(line, flush=True)
    return 0


def main(argv: list[str]) -> int:
    bridge_log = os.environ.get("CHECK_MCP_BRIDGE_LOG")
    if len(argv) == 4 and argv[1] in ("activity-save", "activity-resume"):
        return run_activity(argv[1], argv[2], argv[3])
    mode_arg = argv[-1] if argv[-1] in MODE_PROTOCOL else None
    if mode_arg:
        argv = argv[:-1]
    if len(argv) == 3 and argv[1] == "http":
        transport, modes = "http", HTTP_MODES
        make_target: Any = lambda: argv[2]  # noqa: E731
    elif len(argv) == 4 and argv[1] == "stdio":
        transport, modes = "stdio", STDIO_MODES
        params = StdioServerParameters(command=argv[2], args=["mcp", "--daemon", argv[3]])
        if bridge_log:
            # Client(params) would wire the bridge's stderr to ours; same transport, other errlog.
            make_target = lambda: stdio_client(params, errlog=open(bridge_log, "a"))  # noqa: E731
        else:
            make_target = lambda: params  # noqa: E731
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if mode_arg:
        modes = (mode_arg,)
    for mode in modes:
        try:
            line = asyncio.run(asyncio.wait_for(run_mode(transport, make_target(), mode), OVERALL_TIMEOUT_S))
            # The session is closed (DELETE sent) when `Client` exits, after the checks.
            check_sdk_warnings(transport, mode)
        except BaseException as e:  # noqa: BLE001 - report anything, including groups
            if isinstance(e, KeyboardInterrupt):
                raise
            leaves = leaf_exceptions(e)
            reasons = "; ".join(
                str(x) if isinstance(x, CheckFailed)
                else "timed out" if isinstance(x, (TimeoutError, asyncio.TimeoutError))
                else f"{type(x).__name__}: {x}"
                for x in leaves
            )
            print(f"python-mcp {transport}: FAILED (mode={mode}): {reasons}", file=sys.stderr)
            if transport == "stdio" and bridge_log:
                print(f"  (the bridge's stderr is in {bridge_log})", file=sys.stderr)
            if not all(isinstance(x, CheckFailed) for x in leaves):
                import traceback

                traceback.print_exception(e)
            return 1
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
