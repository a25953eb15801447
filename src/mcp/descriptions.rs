//! Tool descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
//! `Avoid:`), one constant per tool, kept short: agents pattern-match on them.

pub const LIST_PROJECTS: &str = "List Vibe Kanban projects (from the daemon's cache), by name, in pages.
Use when: you need a project_id to list or create tasks.
Required: nothing.
Optional: cursor (next_cursor of the previous page), limit (1-200, default 50), detail (0|1|2, default 0).
Next: list_tasks with a project_id, or list_repos to see its repositories; while has_more, call again with cursor = next_cursor.
Avoid: guessing project ids or names; always take project_id from this list.";

pub const LIST_REPOS: &str = "List the repositories of a project.
Use when: you need repo ids or names (for start_task_attempt repos, or to read repo-prefixed paths).
Required: project_id.
Optional: cursor (next_cursor of the previous page of this project), limit (1-200, default 50), detail (0|1|2, default 0).
Next: start_task_attempt with repos[].repo_id, or get_attempt_changes to see paths under these names; while has_more, call again with cursor = next_cursor.
Avoid: passing a task_id or attempt_id as project_id; reusing a cursor of another list or project.";

pub const LIST_EXECUTORS: &str =
    "List the coding-agent executors VK can run, with variants and capability flags.
Use when: choosing `executor` (and `variant`) for start_task_attempt.
Required: nothing.
Optional: include_variants (default true), capabilities_filter (e.g. [supports_mcp] or [SESSION_FORK]), detail (0|1|2, default 0).
Next: start_task_attempt with executor (and variant) taken verbatim from this list.
Avoid: hard-coding executor names or lower-casing them; use the `executor` strings as returned.";

pub const LIST_TASKS: &str = "List a project's tasks, newest first, each with its latest attempt summary (latest attempt and session ids, running/failed flags).
Use when: finding a task, or checking which tasks have running or failed attempts.
Required: project_id.
Optional: status, q (text search), updated_since (RFC 3339), cursor (previous next_cursor), limit (1-200, default 50), include_attempt_summary, detail (0|1|2).
Next: get_task or list_task_attempts with a task_id; get_attempt_status with latest_attempt_id.
Avoid: paging by re-sending the same call; pass next_cursor as cursor (same filters) while has_more.";

pub const GET_TASK: &str =
    "Get one task with its attempt summary, optionally with a page of its attempts.
Use when: you have a task_id and need its status, description or attempts.
Required: task_id.
Optional: include_attempts (default false); with it attempts_cursor (attempts_next_cursor of the previous answer) and attempts_limit (1-200, default 50), detail (0|1|2, default 0).
Next: get_attempt_status or tail_attempt_logs with an attempt_id.
Avoid: using an attempt_id here; attempts have their own tools.";

pub const LIST_TASK_ATTEMPTS: &str = "List a task's attempts (VK workspaces), newest first, with each attempt's latest session and state, plus top-level latest_attempt_id and latest_session_id.
Use when: you need an attempt_id or session_id for a task.
Required: task_id.
Optional: cursor (next_cursor of the previous page of this task), limit (1-200, default 50), detail (0|1|2, default 0).
Next: get_attempt_status, tail_attempt_logs or follow_up with the attempt_id; while has_more, call again with cursor = next_cursor.
Avoid: calling this in a polling loop; use wait_for_attempt_change or get_attempt_status with since_token.";

pub const GET_ATTEMPT_STATUS: &str = "State of attempts (idle | running | completed | failed; dev servers excluded), latest session/process, failure summary and a result to route on (last_error, recommended_next_action, next_tool). attempt_id: fields at the top level; attempt_ids: `attempts`.
Use when: checking if an agent run is going, done or failed.
Required: exactly one of attempt_id or attempt_ids (max 100).
Optional: since_token (changed since only), include_result, detail (0|1|2).
Next: result.next_tool (none at detail 0: wait).
Avoid: passing both ids; polling one attempt at a time (batch, or wait_for_attempt_change).";

pub const TAIL_ATTEMPT_LOGS: &str = "Read an attempt's log (latest coding agent, else its setup/cleanup script) in oldest-first pages.
Use when: seeing what the agent did or why it failed, or following new output.
Required: attempt_id.
Optional: channel (normalized|raw), limit (1-500), cursor (older page) OR after_entry_index (newer only), since_token (also returns entries replaced in place), execution_process_id, detail (0: compact entries; 2: VK's verbatim).
Next: call again with after_entry_index = last entry_index seen.
Avoid: re-reading the last N entries and de-duplicating; sending cursor and after_entry_index together.";

pub const GET_ATTEMPT_CHANGES: &str = "Get what an attempt changed: totals (file_count, added, deleted, total_bytes) and the changed files (repo-prefixed paths).
Use when: reviewing a completed run, or what a running agent changed so far (live: true).
Required: attempt_id.
Optional: force (list files past the diff guard; never past 5000), include_files (false: summary only), detail (0|1|2; 1 adds per-file counts).
Next: get_attempt_patch or get_attempt_file for contents of selected paths; follow_up to ask for fixes.
Avoid: retrying with force after blocked_reason=summary_failed (force does not help); expecting file contents here.";

pub const TAIL_SESSION_MESSAGES: &str = "A session's conversation as turns (prompt, final answer) or, by=message, message by message; newest page, oldest first.
Use when: restoring context about what was asked and answered in an attempt.
Required: exactly one of session_id or attempt_id (the attempt's latest session).
Optional: by (turn|message), cursor (next_cursor: older items), limit (turns 1-50, messages 1-100), detail (0|1|2).
Next: follow_up with the same attempt_id, or tail_attempt_logs for the full detail of a turn.
Avoid: both session_id and attempt_id; following live output (use tail_attempt_logs).";

pub const GET_CONTEXT: &str = "Get the project, task and attempt of the workspace this client runs in, with its repositories and target branches.
Use when: you are an agent working inside a VK attempt workspace and need your own ids.
Required: nothing.
Optional: detail (0|1|2, default 0).
Next: get_attempt_status or tail_session_messages with the returned attempt_id.
Avoid: calling it outside an attempt workspace; use list_projects there.";

pub const WAIT_FOR_ATTEMPT_CHANGE: &str = "Block until a watched attempt changes (status, processes, logs, changes); returns the changed attempts' statuses and a new token; free while waiting.
Use when: you would otherwise poll get_attempt_status or logs.
Required: one of attempt_ids (1-100) or project_id.
Optional: since_token (changes after it return at once), timeout_ms (default 25000, max 50000; 600000 with a progressToken), include_activity (project_id: new activity too).
Next: read what changed, then wait again with the returned token.
Avoid: looping without since_token (misses changes); treating changed=false as an error.";

pub const CREATE_TASK: &str = "Create a task in a project (it does not start an agent; use start_task_attempt for that).
Use when: you need a new unit of work on the board.
Required: project_id, title.
Optional: description (the agent's prompt), status, request_id (idempotency key: retries return the same task), detail (0|1|2, default 0).
Next: start_task_attempt with the returned task_id.
Avoid: retrying a timed-out call without request_id (it may create a duplicate).";

pub const UPDATE_TASK: &str = "Change a task's title, description or status.
Use when: editing a task or moving it on the board (e.g. to done).
Required: task_id and at least one of title, description, status.
Optional: title, description (empty string clears it), status, request_id (idempotency key: same key and arguments replay the first answer, no second write), detail (0|1|2, default 0).
Next: get_task to confirm, or list_tasks.
Avoid: using it to stop work (use stop_attempt) or to send instructions to the agent (use follow_up).";

pub const DELETE_TASK: &str = "Delete a task with its attempts and worktrees. Irreversible.
Use when: a task was created by mistake or is obsolete.
Required: task_id.
Optional: request_id (idempotency key: a retry answers the same deleted_task_id though the task is gone).
Next: list_tasks.
Avoid: deleting a task whose attempt is running (VK refuses: stop_attempt first); deleting to cancel (set status cancelled instead).";

pub const START_TASK_ATTEMPT: &str = "Start an attempt on a task: a branch and worktree per repo, then the coding agent runs the task description.
Use when: a task should be worked on by an agent.
Required: task_id, executor (from list_executors), repos [{repo_id (from list_repos), target_branch}].
Optional: variant, reuse_running_attempt (return the running attempt instead of starting another), request_id (idempotency key).
Next: wait_for_attempt_change with the returned attempt_id and token, then get_attempt_status.
Avoid: starting a second attempt while one runs (pass reuse_running_attempt: true); inventing executor names.";

pub const FOLLOW_UP: &str = "Send the attempt's agent a new message now (send), queue one for after the current run (queue), or drop the queued one (cancel).
Use when: the agent needs more instructions or fixes.
Required: action and exactly one of attempt_id or session_id; prompt for send and queue.
Optional: variant, request_id (idempotency key for send, queue and cancel: same key and arguments replay the first answer).
Next: wait_for_attempt_change, then tail_attempt_logs.
Avoid: calling before the attempt has a session (no_session_yet: check get_attempt_status); using cancel to stop a running agent (use stop_attempt).";

pub const STOP_ATTEMPT: &str = "Stop an attempt's agent/scripts (not dev servers) or one process (dev servers too). Returns once VK stopped them (interrupt, ~5 s, kill): what was stopped, final status, vk_ms.
Use when: an agent is stuck or unwanted; a dev server must go.
Required: exactly one of attempt_id or execution_process_id.
Optional: force (attempt only: also marks processes VK lost track of as killed; VK's process stop has none), request_id, detail (0|1|2).
Next: get_attempt_changes, or follow_up to continue differently.
Avoid: both ids; force with execution_process_id; follow_up cancel or delete_task to stop.";

pub const GET_ATTEMPT_FILE: &str = "Read part of one file in an attempt's workspace (bounded; UTF-8), by bytes or lines.
Use when: you need a file the agent changed, or lines around a line number.
Required: attempt_id, path (`<repo>/<path>` from get_attempt_changes).
Optional: start (bytes) or start_line/end_line (1-based, inclusive); max_bytes (default 65536, max 524288; caps whole lines).
Next: while truncated: start = start + bytes, or start_line = next_line; get_attempt_patch for diffs.
Avoid: absolute paths or `..` (path_outside_workspace); start with start_line/end_line; whole large files.";

pub const GET_ATTEMPT_PATCH: &str = "Get the unified diff of selected changed files of an attempt (bounded).
Use when: reviewing exactly what changed in some files.
Required: attempt_id, paths (1-100, `<repo>/<path>` from get_attempt_changes).
Optional: force (bypass the diff guard), max_bytes (default 204800, max 2097152).
Next: follow_up with review comments, or update_task to mark it done.
Avoid: asking for every path of a huge change at once (blocked: too_many_paths / size_exceeded); paths without the repo prefix.";

// ---- delivery (rebase / merge / push) ----

pub const GET_ATTEMPT_BRANCH_STATUS: &str = "Git state of an attempt per repo: target branch, ahead/behind, uncommitted, merged, conflicts, ready_to_merge, as_of (when VK was read).
Use when: deciding whether to rebase, merge or push.
Required: attempt_id.
Optional: refresh (read VK now; the cache is re-read when a process ends and after every git action here).
Next: rebase_attempt if commits_behind > 0; merge_attempt if ready_to_merge; abort_attempt_conflicts if conflicted_files.
Avoid: refresh=true in a loop; wait_for_attempt_change instead.";

pub const REBASE_ATTEMPT: &str = "Rebase an attempt branch onto its target (or new_base_branch). outcome `ok`, or `conflicts` with conflicted_files and op (left mid-rebase).
Use when: commits_behind > 0, or to move onto another base.
Required: attempt_id; repo_id if the attempt has several repos.
Optional: new_base_branch (becomes the target), old_base_branch, request_id.
Next: merge_attempt after ok; after conflicts follow_up (agent resolves) or abort_attempt_conflicts.
Avoid: rebasing while a process runs (process_running) or mid-rebase (rebase_in_progress).";

pub const ABORT_ATTEMPT_CONFLICTS: &str = "Abort a rebase stopped on conflicts: the branch back where it was, worktree clean (had_conflicts false: nothing to abort).
Use when: rebase_attempt answered `conflicts` and the agent should not resolve them.
Required: attempt_id; repo_id if the attempt has several repos.
Optional: request_id.
Next: get_attempt_branch_status; follow_up to adapt the change, then rebase_attempt.
Avoid: aborting while the agent resolves the conflicts.";

pub const MERGE_ATTEMPT: &str = "Squash-merge an attempt branch into its target branch; answers merge_commit. VK sets the task done and stops the attempt's dev servers.
Use when: ready_to_merge and the changes were reviewed.
Required: attempt_id; repo_id if the attempt has several repos.
Optional: request_id.
Next: push_attempt (force=true if pushed before the merge).
Avoid: merging while a process runs (process_running), when behind (branch_behind: rebase first) or with conflicts (conflicts_present).";

pub const PUSH_ATTEMPT: &str =
    "Push an attempt branch to its repo's remote (same name); answers remote_branch and head_oid.
Use when: publishing the branch, before or after merge_attempt.
Required: attempt_id; repo_id if the attempt has several repos.
Optional: force (overwrite the remote branch), request_id.
Next: on force_push_required decide, then push_attempt with force=true.
Avoid: force=true by default; pushing with uncommitted changes or conflicts.";
pub const TAIL_PROJECT_ACTIVITY: &str = "What happened in a project, in commit order: tasks created/updated/deleted, attempts, processes started/ended, follow-ups, change summaries; each with its commit token.
Use when: catching up on or following a project.
Required: project_id.
Optional: since_token (after it, oldest first) OR cursor (older, newest first; neither = newest), limit (1-200), detail (0|1|2, default 0).
Next: again with since_token = next_since_token (exact, across restarts); wait_for_attempt_change(project_id, include_activity).
Avoid: since_token with cursor; de-duplicating by hand; ignoring token_reset.";

pub const TAIL_TASK_ACTIVITY: &str = "What happened to one task (attempts, processes, follow-ups, change summaries), in commit order, each item with its commit token.
Use when: following one task closely, or reviewing its history.
Required: task_id.
Optional: since_token (after it, oldest first) OR cursor (older, newest first; neither = newest), limit (1-200), detail (0|1|2, default 0).
Next: again with since_token = next_since_token; get_attempt_status or tail_attempt_logs with an item's attempt_id.
Avoid: since_token with cursor; polling in a tight loop (use wait_for_attempt_change).";
pub const LIST_APPROVALS: &str = "List tool approvals a coding agent asked VK for, oldest first, in pages.
Use when: finding what blocks an agent (status waiting_for: approval) or reviewing decisions.
Required: exactly one of attempt_ids (1-100) or project_id.
Optional: status (pending default | approved | denied | timed_out | answered | all), cursor (next_cursor of the same call), limit (1-200, default 50).
Next: respond_approval with the approval_id of items with agent_waiting true.
Avoid: both attempt_ids and project_id; answering items whose agent_waiting is false (nothing waits).";

pub const RESPOND_APPROVAL: &str = "Approve or deny a tool call an agent is blocked on; VK unblocks it and the answer is cached on return.
Use when: get_attempt_status says waiting_for: approval, or list_approvals shows agent_waiting.
Required: approval_id (from pending_approvals or list_approvals), decision (approve | deny).
Optional: reason (deny only: told to the agent), request_id (a retry replays the first answer).
Next: wait_for_attempt_change with the returned token.
Avoid: an attempt or process id as approval_id; reason with approve; answering twice or after timeout_at.";
