// vk-observer board: reads /board/api/*, follows /board/api/events (Server-Sent Events), and
// writes nothing to the page as HTML: every text (titles and log lines come from agents) goes
// in through textContent. No inline handlers or styles (the CSP forbids both).
'use strict';

const GROUPS = [
  ['approval', 'Waiting on approval'],
  ['failed', 'Failed'],
  ['running', 'Running'],
  ['completed', 'Completed'],
  ['idle', 'Idle'],
];

const S = {
  session: null, board: null, token: null, es: null,
  open: null, openView: null, lastIndex: null,
  boardBusy: false, boardAgain: false, attemptBusy: false, attemptAgain: false, down: false,
  tasks: new Map(),
  // Cards patched in from change events since the last board read began (by attempt id).
  patches: new Map(),
};

const $ = (id) => document.getElementById(id);

// An element with attributes and children (strings become text nodes, never HTML).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// "3 min ago", "in 40 s": relative to now, refreshed every few seconds.
function ago(iso) {
  if (!iso) return 'never';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  return span(Date.now() - t);
}
function span(ms) {
  const past = ms >= 0;
  const s = Math.round(Math.abs(ms) / 1000);
  let text;
  if (s < 5) return past ? 'just now' : 'now';
  if (s < 60) text = `${s} s`;
  else if (s < 3600) text = `${Math.round(s / 60)} min`;
  else if (s < 86400) text = `${Math.round(s / 3600)} h`;
  else text = `${Math.round(s / 86400)} d`;
  return past ? `${text} ago` : `in ${text}`;
}
function when(iso) {
  return el('time', { datetime: iso || '', 'data-at': iso || '', title: iso || '' }, ago(iso));
}
function refreshTimes() {
  for (const t of document.querySelectorAll('time[data-at]')) {
    if (t.dataset.at) t.textContent = ago(t.dataset.at);
  }
}

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(path, options) {
  let r;
  try {
    r = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' }, ...options });
  } catch (e) {
    throw new ApiError(0, 'unreachable', 'The daemon does not answer (stopped or restarting); retrying.');
  }
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (r.ok) return body;
  const code = (body && body.code) || 'error';
  const message = (body && body.message) || `The daemon answered ${r.status}.`;
  if (r.status === 401) showLogin(message);
  throw new ApiError(r.status, code, message);
}

function notice(text, kind) {
  const n = $('notice');
  n.textContent = text || '';
  n.hidden = !text;
  n.classList.toggle('error', kind === 'error');
}

function live(text, kind) {
  const l = $('live');
  l.textContent = text;
  l.className = `live live-${kind}`;
}

function showLogin(message) {
  if (S.es) { S.es.close(); S.es = null; }
  $('main').hidden = true;
  $('logout').hidden = true;
  $('login').hidden = false;
  $('login-message').textContent = message || '';
  live('signed out', 'off');
  $('token').focus();
}

// ---- the board ----

function hostChips(board) {
  const f = board.freshness || {};
  const chips = [];
  if (f.hosts) {
    for (const [name, h] of Object.entries(f.hosts)) {
      const word = h.stale ? 'stale' : h.connected ? 'connected' : 'disconnected';
      const beat = h.last_heartbeat_age_ms == null ? 'no heartbeat yet' : `heartbeat ${span(h.last_heartbeat_age_ms)}`;
      chips.push(el('span', { class: `host host-${word}` }, `${name}: `, el('span', { class: 'word' }, word),
        ` · lag ${h.lag} · ${beat}`));
    }
  } else {
    const change = f.last_event_age_ms == null ? 'no change yet' : `last change ${span(f.last_event_age_ms)}`;
    chips.push(el('span', { class: 'host' }, 'VK: ', el('span', { class: 'word' }, f.upstream || 'unknown'),
      ` · ${change}`, f.bootstrapped ? '' : ' · loading'));
  }
  if (board.truncated) chips.push(el('span', { class: 'host' }, 'Showing the newest 200 tasks per project.'));
  return chips;
}

function approvalBlock(a, card) {
  const expires = a.expires_in_ms == null ? null : `expires ${span(-a.expires_in_ms)}`;
  const buttons = S.session && S.session.can_approve ? el('div', { class: 'actions' },
    el('button', { class: 'approve', type: 'button', on: { click: (e) => respond(e, a, 'approve', card) } }, 'Approve'),
    el('button', { class: 'deny', type: 'button', on: { click: (e) => respond(e, a, 'deny', card) } }, 'Deny'),
  ) : null;
  return el('div', { class: 'ask' },
    el('div', null, el('strong', null, a.tool_name), ' asks: ', el('span', { class: 'what' }, a.summary)),
    el('div', { class: 'meta' }, 'asked ', when(a.requested_at), expires ? ` · ${expires}` : ''),
    buttons);
}

function cardOf(c, group) {
  const meta = [c.executor, c.branch, c.host, c.cost_usd == null ? null : `$${c.cost_usd.toFixed(2)}`]
    .filter(Boolean).join(' · ');
  const word = group === 'approval' ? 'waiting on approval' : c.state;
  const parts = [
    el('div', null, el('span', { class: `badge ${group}` }, word)),
    el('a', { class: 'title', href: `#attempt=${c.attempt_id}` }, c.task_title || c.attempt_id),
    meta ? el('div', { class: 'meta' }, meta) : null,
  ];
  if (group === 'failed') {
    parts.push(el('div', null, el('span', { class: 'error-code' }, c.last_error_code || c.failure_summary || 'failed')));
    parts.push(el('div', { class: 'meta' }, c.summary));
  }
  if (group === 'running' && c.last_line) parts.push(el('div', { class: 'line', title: c.last_line }, c.last_line));
  parts.push(el('div', { class: 'meta' }, 'last activity ', when(c.last_activity_at)));
  for (const a of c.approvals) parts.push(approvalBlock(a, c));
  if ((group === 'running' || group === 'approval') && S.session && S.session.can_stop) {
    parts.push(el('div', { class: 'actions' },
      el('button', { class: 'stop', type: 'button', on: { click: (e) => stop(e, c) } }, 'Stop')));
  }
  return el('li', { class: `card ${group}`, 'data-attempt': c.attempt_id }, parts);
}

function renderBoard() {
  const b = S.board;
  $('hosts').replaceChildren(...hostChips(b));
  renderChart(b.chart);
  S.tasks.clear();
  const projects = [];
  for (const p of b.projects) {
    const total = GROUPS.reduce((n, [g]) => n + p[g].length, 0);
    const sections = [];
    for (const [g, label] of GROUPS) {
      for (const c of p[g]) if (c.task_id) S.tasks.set(c.task_id, c.task_title);
      if (g === 'idle' && p[g].length === 0) continue;
      sections.push(el('section', { class: `group group-${g}`, 'aria-label': label },
        el('h3', null, el('span', { class: `badge ${g}` }, label), `${p[g].length}`),
        p[g].length ? el('ul', { class: 'cards' }, p[g].map((c) => cardOf(c, g)))
          : el('p', { class: 'group-empty' }, `Nothing ${label.toLowerCase()}.`)));
    }
    projects.push(el('article', { class: 'project', 'data-project': p.project_id },
      el('h2', null, p.name, ' ', el('span', { class: 'count' }, `${total} attempt${total === 1 ? '' : 's'}`)),
      sections));
  }
  if (!projects.length) projects.push(el('p', { class: 'group-empty' }, 'No project this token may read is cached yet.'));
  const focused = focusedControl();
  $('projects').replaceChildren(...projects);
  if (focused) refocus(focused);
}

// The card control that has the keyboard focus (its attempt, class and text), so a redraw
// (several a second on a busy board) hands the focus back to the same control of the new card.
function focusedControl() {
  const f = document.activeElement;
  const card = f && f.closest ? f.closest('#projects [data-attempt]') : null;
  if (!card) return null;
  return { attempt: card.dataset.attempt, tag: f.tagName, cls: f.className, text: f.textContent };
}

function refocus(c) {
  const card = document.querySelector(`#projects [data-attempt="${CSS.escape(c.attempt)}"]`);
  const controls = card ? card.querySelectorAll(c.tag) : [];
  const same = [...controls].find((e) => e.className === c.cls && e.textContent === c.text);
  if (same) same.focus({ preventScroll: true });
}

// One board read at a time; a change meanwhile asks for one more after it.
async function loadBoard() {
  if (S.boardBusy) { S.boardAgain = true; return; }
  S.boardBusy = true;
  try {
    do {
      S.boardAgain = false;
      // The last change seen: a board the daemon read for another page since covers it.
      const seen = S.token ? `?seen=${encodeURIComponent(S.token)}` : '';
      const patched = S.patches;
      S.patches = new Map();
      const board = await api(`/board/api/board${seen}`);
      // A card an event brought while this read was on its way may be newer than the board's.
      for (const card of [...patched.values(), ...S.patches.values()]) placeCard(board, card);
      S.board = board;
      if (!S.token) S.token = S.board.token;
      renderBoard();
    } while (S.boardAgain);
  } catch (e) {
    if (e.status !== 401) notice(e.message, 'error');
  } finally {
    S.boardBusy = false;
  }
}

// The board after a change: at most one read a second (the open attempt's log is followed at
// once, by followAttempt; the cards can wait that long, and a busy daemon commits many times a
// second).
const BOARD_EVERY_MS = 1000;
let boardTimer = null;
let boardAt = 0;
function scheduleBoard() {
  if (boardTimer) return;
  const wait = Math.max(0, BOARD_EVERY_MS - (Date.now() - boardAt));
  boardTimer = setTimeout(() => { boardTimer = null; boardAt = Date.now(); loadBoard(); }, wait);
}

// The store token's sequence number (`<epoch>.<seq>`), to order cards of one attempt.
const seqOf = (token) => Number(String(token).split('.').pop()) || 0;

function groupOf(card) {
  return card.approvals.length ? 'approval' : card.state;
}

// Newest first everywhere but approvals, where the one waiting longest leads (as the daemon sorts).
function sortGroup(p, g) {
  if (g === 'approval') {
    const waited = (c) => Math.max(0, ...c.approvals.map((a) => a.age_ms || 0));
    p[g].sort((a, b) => waited(b) - waited(a));
  } else {
    const at = (c) => c.last_activity_at || '';
    p[g].sort((a, b) => (at(a) < at(b) ? 1 : at(a) > at(b) ? -1 : 0));
  }
}

// Where `board` shows attempt `id`: its project, group and place; null where it does not.
function findCard(board, id) {
  for (const p of board.projects) {
    for (const [g] of GROUPS) {
      const i = p[g].findIndex((c) => c.attempt_id === id);
      if (i >= 0) return { p, g, i };
    }
  }
  return null;
}

// Puts `card` in its group of `board` in place of its attempt's card, unless the card shown is
// newer (or the board does not show the attempt).
function placeCard(board, card) {
  const at = findCard(board, card.attempt_id);
  if (!at || seqOf(at.p[at.g][at.i].attempt_token) > seqOf(card.attempt_token)) return;
  at.p[at.g].splice(at.i, 1);
  const to = groupOf(card);
  at.p[to].push(card);
  sortGroup(at.p, to);
}

// A change's cards patched into the board the page holds; false when the event names an
// attempt the page does not show (or brings no card for one): then the board is read again.
function patchCards(c) {
  const b = S.board;
  const cards = c.cards || [];
  if (!b || cards.length !== c.attempts.length) return false;
  if (!cards.every((card) => findCard(b, card.attempt_id))) return false;
  for (const card of cards) {
    placeCard(b, card);
    S.patches.set(card.attempt_id, card);
  }
  if (c.freshness) b.freshness = c.freshness;
  renderBoard();
  return true;
}

// ---- activity ----

function activityItem(i) {
  const title = i.title || S.tasks.get(i.task_id) || '';
  const facts = [i.status, i.run_reason, i.tool, i.exit_code == null ? null : `exit ${i.exit_code}`]
    .filter(Boolean).join(' · ');
  return el('li', { 'data-token': i.token },
    el('span', { class: 'kind' }, i.kind.replaceAll('_', ' ')), ' ',
    i.attempt_id ? el('a', { href: `#attempt=${i.attempt_id}` }, title || i.attempt_id) : title,
    facts ? el('span', { class: 'meta' }, ` · ${facts}`) : null,
    i.at ? el('span', { class: 'meta' }, ' · ', when(i.at)) : null);
}

async function loadActivity() {
  try {
    const a = await api('/board/api/activity');
    const empty = el('li', { class: 'meta', 'data-empty': true }, 'No activity yet.');
    $('activity').replaceChildren(...(a.items.length ? a.items.map(activityItem) : [empty]));
  } catch (e) {
    if (e.status !== 401) notice(e.message, 'error');
  }
}

function addActivity(items) {
  const list = $('activity');
  for (const e of list.querySelectorAll('[data-empty]')) e.remove();
  for (const i of items) list.prepend(activityItem(i));
  while (list.children.length > 200) list.lastElementChild.remove();
}

// ---- one attempt ----

function attemptFromHash() {
  const m = /^#attempt=(.*)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

function closeAttempt() {
  S.open = null;
  S.openView = null;
  $('attempt').hidden = true;
  if (location.hash) history.replaceState(null, '', location.pathname + location.search);
}

function logLine(e) {
  return el('li', { 'data-index': e.entry_index },
    el('span', { class: 'idx' }, e.entry_index), el('span', { class: 'kind' }, e.kind),
    e.tool || e.text || '');
}

// What git says of one repository's branch, in words (VK's numbers can be unknown: null).
function repoFacts(r) {
  const n = (x, word) => (x == null ? `${word} unknown` : `${x} ${word}`);
  const facts = [`${n(r.commits_ahead, 'ahead')}, ${n(r.commits_behind, 'behind')}`];
  if (r.merged) facts.push(`merged${r.merged_at ? ` ${ago(r.merged_at)}` : ''}`);
  else if (r.ready_to_merge) facts.push('ready to merge');
  if (r.uncommitted_count) facts.push(`${r.uncommitted_count} uncommitted`);
  if (r.untracked_count) facts.push(`${r.untracked_count} untracked`);
  if (r.remote_commits_ahead != null || r.remote_commits_behind != null) {
    facts.push(`remote: ${n(r.remote_commits_ahead, 'to push')}, ${n(r.remote_commits_behind, 'to pull')}`);
  }
  return facts.join(' · ');
}

function branchBlock(b, name) {
  if (!b) {
    return el('div', { class: 'meta', id: 'branch' },
      'Not read from VK yet (get_attempt_branch_status reads it; the board shows it from then on).');
  }
  const repos = b.repos.map((r) => {
    const conflicts = r.conflicted_files.length || r.rebase_in_progress;
    return el('li', { 'data-repo': r.repo_id },
      el('strong', null, r.repo_name), ` ${name || 'branch'} → ${r.target_branch}: `, repoFacts(r),
      conflicts ? el('div', { class: 'error-code' },
        `${r.conflict_op || 'rebase'} stopped on conflicts`, r.conflicted_files.length ? `: ${r.conflicted_files.join(', ')}` : '') : null);
  });
  return el('div', { id: 'branch' },
    repos.length ? el('ul', { class: 'files' }, repos) : el('div', { class: 'meta' }, 'VK lists no repository.'),
    el('div', { class: 'meta' }, 'as VK said ', when(b.as_of)));
}

function renderAttempt(v) {
  const s = v.status;
  const group = s.pending_approvals.length ? 'approval' : s.state;
  const card = { attempt_id: s.attempt_id, task_title: v.task_title };
  const c = v.changes;
  const changed = c.ready
    ? `${c.summary.file_count} file(s), +${c.summary.added} −${c.summary.deleted}${c.blocked_reason ? ` (list withheld: ${c.blocked_reason})` : ''}`
    : 'not read yet';
  const log = el('ol', { class: 'log', id: 'log', 'aria-label': 'Log' }, v.log.entries.map(logLine));
  const parts = [
    el('div', { class: 'attempt-head' },
      el('h2', null, v.task_title || 'Attempt'),
      el('button', { type: 'button', class: 'quiet', on: { click: closeAttempt } }, 'Close')),
    el('div', null, el('span', { class: `badge ${group}` }, group === 'approval' ? 'waiting on approval' : s.state),
      ' ', s.result.summary),
    el('div', { class: 'meta' }, [s.workspace_branch, `attempt ${s.attempt_id}`].filter(Boolean).join(' · ')),
    el('div', { class: 'meta' }, 'last activity ', when(s.last_activity_at)),
    s.result.last_error_code ? el('div', { class: 'error-code' }, s.result.last_error_code) : null,
    s.pending_approvals.map((a) => approvalBlock(a, card)),
    el('h3', null, 'Log', v.log.process_status ? ` (${v.log.run_reason}, ${v.log.process_status})` : ''),
    v.log.entries.length ? log : el('p', { class: 'group-empty' }, 'No log entries yet.'),
    el('h3', null, 'Changes'),
    el('div', { class: 'meta' }, changed),
    c.files.length ? el('ul', { class: 'files' }, c.files.map((f) => el('li', null, f))) : null,
    el('h3', null, 'Branch'),
    branchBlock(v.branch, s.workspace_branch),
  ];
  $('attempt').replaceChildren(...parts.flat().filter((p) => p !== null && p !== undefined));
  log.scrollTop = log.scrollHeight;
}

function attemptError(message) {
  $('attempt').hidden = false;
  $('attempt').replaceChildren(
    el('div', { class: 'attempt-head' }, el('h2', null, 'Attempt not shown'),
      el('button', { type: 'button', class: 'quiet', on: { click: closeAttempt } }, 'Close')),
    el('p', { class: 'login-message', role: 'alert' }, message));
}

async function openAttempt(id) {
  S.open = id;
  S.lastIndex = null;
  try {
    const v = await api(`/board/api/attempts/${encodeURIComponent(id)}`);
    if (S.open !== id) return;
    S.openView = v;
    S.lastIndex = v.log.latest_entry_index;
    $('attempt').hidden = false;
    renderAttempt(v);
    $('attempt').focus();
  } catch (e) {
    if (S.open === id && e.status !== 401) attemptError(e.message);
  }
}

// The open attempt changed: its status again, and only the log entries after the last shown.
async function followAttempt() {
  if (!S.open || !S.openView) return;
  if (S.attemptBusy) { S.attemptAgain = true; return; }
  S.attemptBusy = true;
  try {
    do {
      S.attemptAgain = false;
      const id = S.open;
      const after = S.lastIndex == null ? '' : `?after=${S.lastIndex}`;
      const v = await api(`/board/api/attempts/${encodeURIComponent(id)}${after}`);
      if (S.open !== id) return;
      const switched = v.log.execution_process_id !== S.openView.log.execution_process_id;
      if (S.lastIndex == null || switched) {
        if (switched) { S.lastIndex = null; S.attemptAgain = true; }
        else S.lastIndex = v.log.latest_entry_index;
        S.openView = v;
        renderAttempt(v);
        continue;
      }
      v.log.entries = S.openView.log.entries.concat(v.log.entries).slice(-500);
      if (v.log.entries.length) S.lastIndex = v.log.entries[v.log.entries.length - 1].entry_index;
      S.openView = v;
      renderAttempt(v);
    } while (S.attemptAgain);
  } catch (e) {
    if (e.status !== 401) notice(e.message, 'error');
  } finally {
    S.attemptBusy = false;
  }
}

// ---- actions ----

function requestId() {
  return (crypto.randomUUID && crypto.randomUUID()) || `${Date.now()}-${Math.random()}`;
}

async function act(button, path, body, done) {
  button.disabled = true;
  try {
    await api(path, {
      method: 'POST',
      headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...body, request_id: requestId() }),
    });
    notice(done);
    loadBoard();
    followAttempt();
  } catch (e) {
    notice(e.message, 'error');
  } finally {
    button.disabled = false;
  }
}

function respond(event, a, decision, card) {
  const body = { decision };
  if (decision === 'deny') {
    const reason = window.prompt(`Deny ${a.tool_name}? Optionally tell the agent why:`, '');
    if (reason === null) return;
    if (reason.trim()) body.reason = reason.trim();
  }
  const what = decision === 'approve' ? 'Approved' : 'Denied';
  act(event.currentTarget, `/board/api/approvals/${encodeURIComponent(a.approval_id)}`, body,
    `${what} ${a.tool_name} for “${card.task_title || card.attempt_id}”.`);
}

function stop(event, c) {
  if (!window.confirm(`Stop the agent of “${c.task_title}”?`)) return;
  act(event.currentTarget, `/board/api/attempts/${encodeURIComponent(c.attempt_id)}/stop`, {},
    `Stopped “${c.task_title}”.`);
}

// ---- live ----

function onChange(ev) {
  const c = JSON.parse(ev.data);
  S.token = c.token;
  if (c.reset) {
    loadBoard();
    loadActivity();
    if (S.open) openAttempt(S.open);
    return;
  }
  if (c.activity.length) addActivity(c.activity);
  // New activity moves the chart and what is in each group: the board is read again (at most
  // once a second); the cards the event brings show at once either way.
  const patched = c.attempts.length === 0 || patchCards(c);
  if (c.projects.length || !patched) scheduleBoard();
  if (S.open && c.attempts.includes(S.open)) followAttempt();
}

function connect() {
  if (S.es) S.es.close();
  const since = S.token ? `?since=${encodeURIComponent(S.token)}` : '';
  const es = new EventSource(`/board/api/events${since}`);
  S.es = es;
  es.addEventListener('open', () => {
    live('live', 'on');
    notice('');
    // Back after a drop: the hosts line (and anything a reset would miss) read again.
    if (S.down) { S.down = false; loadBoard(); }
  });
  es.addEventListener('hello', (ev) => { S.token = JSON.parse(ev.data).token; });
  es.addEventListener('change', onChange);
  es.addEventListener('auth', (ev) => { es.close(); showLogin(JSON.parse(ev.data).message); });
  es.addEventListener('error', () => {
    if (es.readyState === EventSource.CONNECTING) {
      live('reconnecting…', 'connecting');
      if (!S.down) {
        S.down = true;
        $('hosts').replaceChildren(el('span', { class: 'host' }, 'Daemon: ',
          el('span', { class: 'word' }, 'unreachable'), ' · showing the board as last read'));
      }
      return;
    }
    // Closed for good (the daemon refused the stream): ask why, then try again.
    live('disconnected', 'off');
    setTimeout(async () => {
      if (S.es !== es) return;
      try { await api('/board/api/session'); connect(); } catch (e) {
        if (e.status !== 401) setTimeout(connect, 2000);
      }
    }, 1000);
  });
}

async function start() {
  const params = new URLSearchParams(location.search);
  const login = params.get('login');
  let session;
  try {
    session = await api('/board/api/session');
  } catch (e) {
    if (e.status === 401) {
      if (login === 'refused') showLogin('That token was not accepted: check it (no spaces) or create one with `vk-observer token create`.');
      else if (login === 'out') showLogin('Signed out.');
      return;
    }
    // A token that may not read: the form again, saying why; the daemon away: try again.
    if (e.status === 403) { showLogin(e.message); return; }
    notice(e.message, 'error');
    setTimeout(start, 3000);
    return;
  }
  S.session = session;
  $('login').hidden = true;
  $('main').hidden = false;
  $('logout').hidden = !session.login_required;
  $('who').textContent = session.login_required ? `${session.caller} (${session.scopes})` : '';
  await loadBoard();
  await loadActivity();
  connect();
  const id = attemptFromHash();
  if (id) openAttempt(id);
}

window.addEventListener('hashchange', () => {
  const id = attemptFromHash();
  if (id) openAttempt(id); else if (S.open) closeAttempt();
});
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && S.open) closeAttempt();
});
setInterval(refreshTimes, 5000);
document.addEventListener('DOMContentLoaded', start);
