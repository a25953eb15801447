#!/usr/bin/env node
// Drive a running `vk-observer demo` with the TypeScript SDK v2 client and the tasks extension
// package (`@modelcontextprotocol/client`, `@modelcontextprotocol/ext-tasks`, pinned in
// package.json / package-lock.json beside this file). Run by .ci/run:
//
//   node tests/ts/check_tasks.mjs http://127.0.0.1:PORT/mcp
//
// The client pins protocol 2026-07-28, so the extension's V2 generation is used. It creates a
// task in project "Demo" whose text says ASK (the simulator's agent then asks before its Bash
// call, as VK's approvals do), starts an attempt through the extension (`start_task_attempt` run
// as a task), and requires, in order: `working`, `input_required` with the approval as a form
// elicitation (answered `approve` by the input handler the extension calls; its `tasks/update`
// reaches `respond_approval`), then `completed` with the attempt's status answer (outcome
// `success`) as the result. It then checks, with plain tool calls, that VK recorded the approval
// as approved. Prints one line `ts-tasks: ok (...)`; any other state exits 1 with the reason.

import { randomUUID } from "node:crypto";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
    createTaskSessionFromClient,
    resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

const PROTOCOL = "2026-07-28";
const CLIENT_INFO = { name: "vk-observer-ci-ts-tasks", version: "0" };
const OVERALL_TIMEOUT_MS = 90_000;
// The simulator's agent asks to run this (crates/sim ApprovalScript's default command).
const ASKED_COMMAND = "cargo build";
// The demo's project: "Demo"; on `demo --dialect workspaces` (VK 0.1.x) its repo's, "demo".
const DEMO_PROJECT = process.env.CHECK_MCP_PROJECT ?? "Demo";

function fail(reason) {
    console.error(`ts-tasks: FAILED: ${reason}`);
    process.exit(1);
}

function check(cond, reason) {
    if (!cond) fail(reason);
}

/**
 * The host request coordinator the extension's V2 generation asks for (`rawDispatch`): the
 * SDK Client's own codecs do not accept task-shaped answers, so task requests go through a
 * second SDK transport of ours, which owns their ids and matches the responses. The transport
 * derives the 2026-07-28 headers (MCP-Protocol-Version, Mcp-Method, Mcp-Name) from the body.
 */
class RequestCoordinator {
    #transport;
    #pending = new Map();
    #next = 0;

    constructor(url) {
        this.#transport = new StreamableHTTPClientTransport(url);
        this.#transport.onmessage = (message) => {
            const waiter = this.#pending.get(message.id);
            if (waiter === undefined) return; // a notification: nothing of ours waits on it
            this.#pending.delete(message.id);
            waiter(
                "error" in message
                    ? { kind: "error", error: message.error }
                    : { kind: "result", result: message.result },
            );
        };
        this.#transport.onerror = (error) => console.error(`ts-tasks: transport: ${error}`);
    }

    start() {
        return this.#transport.start();
    }

    close() {
        return this.#transport.close();
    }

    dispatch = async (request, options = {}) => {
        const id = `ci-${++this.#next}`;
        const answered = new Promise((resolve) => this.#pending.set(id, resolve));
        await this.#transport.send(
            { jsonrpc: "2.0", id, ...request },
            options.signal ? { requestSignal: options.signal } : undefined,
        );
        return answered;
    };
}

/** A tool's structured answer through the plain SDK client; a tool error fails the run. */
async function call(client, name, args) {
    const r = await client.callTool({ name, arguments: args });
    check(!r.isError, `${name}(${JSON.stringify(args)}) failed: ${JSON.stringify(r.content)}`);
    check(r.structuredContent, `${name}: no structuredContent`);
    return r.structuredContent;
}

async function main(url) {
    const client = new Client(CLIENT_INFO, {
        capabilities: {},
        versionNegotiation: { mode: { pin: PROTOCOL } },
    });
    await client.connect(new StreamableHTTPClientTransport(url));
    check(client.getProtocolEra() === "modern", `era ${client.getProtocolEra()}, not modern`);
    const declared = client.getServerCapabilities()?.extensions?.["io.modelcontextprotocol/tasks"];
    check(declared !== undefined, "the daemon does not declare io.modelcontextprotocol/tasks");

    // Project Demo, its repo, and a task whose text says ASK.
    const projects = (await call(client, "list_projects", {})).projects;
    const demo = projects.find((p) => p.project_name === DEMO_PROJECT);
    check(demo, `no project "${DEMO_PROJECT}" in ${JSON.stringify(projects)}`);
    const repo = (await call(client, "list_repos", { project_id: demo.project_id })).repos[0];
    check(repo, "project Demo has no repo");
    const created = await call(client, "create_task", {
        project_id: demo.project_id,
        title: "CI: a task client approves (ASK before the build)",
        request_id: randomUUID(),
    });
    const taskId = created.task_id ?? created.task?.task_id;
    check(taskId, `create_task answered no task id: ${JSON.stringify(created)}`);

    const coordinator = new RequestCoordinator(url);
    await coordinator.start();
    const asked = [];
    const session = createTaskSessionFromClient(client, {
        endpointId: url,
        rawDispatch: coordinator.dispatch,
        v2RequestFraming: {
            protocolVersion: PROTOCOL,
            clientInfo: CLIENT_INFO,
            clientCapabilities: {},
        },
        // The extension calls this for each input request of an input_required task and sends
        // the answer back with tasks/update.
        onInputRequest: async (request, context) => {
            asked.push({ request, context });
            check(request.kind === "elicitation", `input request of kind ${request.kind}`);
            check(request.params.mode === "form", `elicitation mode ${request.params.mode}`);
            const message = String(request.params.message);
            check(message.includes(ASKED_COMMAND), `the question does not name the command: ${message}`);
            const decision = request.params.requestedSchema?.properties?.decision?.enum;
            check(
                JSON.stringify(decision) === '["approve","deny"]',
                `decision choices ${JSON.stringify(decision)}`,
            );
            return { action: "accept", content: { decision: "approve" } };
        },
        onError: (error) => fail(`ext-tasks reported: ${error?.stack ?? error}`),
    });
    check(session.capabilities.execution, "ext-tasks sees no task execution on this server");

    const seen = [];
    const execution = await session.callTool(
        "start_task_attempt",
        {
            task_id: taskId,
            executor: "CLAUDE_CODE",
            repos: [{ repo_id: repo.repo_id, target_branch: "main" }],
            request_id: randomUUID(),
        },
        { task: { preference: "require" } },
    );
    check(execution.kind === "task", `start_task_attempt answered ${execution.kind}, not a task`);
    const { outcome, lastTask } = await execution.settle({
        onEvent: (event) => {
            if (event.type !== "task") return;
            const status = event.task.status;
            if (seen.at(-1) !== status) seen.push(status);
        },
    });
    check(outcome.status === "completed", `the task ended ${outcome.status}: ${outcome.error ?? ""}`);
    if (seen.at(-1) !== "completed") seen.push("completed");
    const want = ["working", "input_required", "working", "completed"];
    const path = seen.join(" → ");
    // `working` after the answer may pass between two polls unseen, and a fast agent may
    // already ask before the handle is answered (the handle then starts `input_required`).
    const expected = [
        want.join(" → "),
        "working → input_required → completed",
        "input_required → working → completed",
        "input_required → completed",
    ];
    check(expected.includes(path), `statuses ${path}; wanted ${expected.join(" or ")}`);
    check(asked.length === 1, `the input handler was called ${asked.length} times`);
    const inputId = asked[0].context.inputId;
    check(inputId?.startsWith("approval:"), `input key ${inputId}`);

    const result = resultFromTaskOutcome(outcome);
    const status = result.structuredContent;
    check(status?.result?.outcome === "success", `result ${JSON.stringify(status?.result)}`);
    const approvals = await call(client, "list_approvals", {
        attempt_ids: [status.attempt_id],
        status: "all",
    });
    const approval = approvals.approvals?.find((a) => `approval:${a.approval_id}` === inputId);
    check(approval?.status === "approved", `VK recorded ${JSON.stringify(approval)}`);

    await session.close();
    await coordinator.close();
    await client.close();
    console.log(
        `ts-tasks: ok (task ${lastTask?.taskId ?? execution.handle.taskId}: ${path}; ` +
            `${inputId} approved; outcome ${status.result.outcome}; protocol ${PROTOCOL})`,
    );
}

const url = process.argv[2];
if (!url) fail("usage: check_tasks.mjs <daemon-mcp-url>");
const timer = setTimeout(() => fail(`not done within ${OVERALL_TIMEOUT_MS / 1000} s`), OVERALL_TIMEOUT_MS);
main(new URL(url))
    .then(() => clearTimeout(timer))
    .catch((error) => fail(error?.stack ?? String(error)));
