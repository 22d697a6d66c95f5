/*
 * The console's core: the session, API calls, the router, and the DOM
 * helpers the pages (pages.js) draw with. Text from the API only ever
 * becomes text nodes (never HTML), and the session secret lives in
 * sessionStorage: gone with the tab, sent only as a bearer header.
 */
'use strict';

const Kiln = window.Kiln = { pages: {}, role: null, name: null, view: null };
const ROLES = ['viewer', 'user', 'operator', 'admin'];
const SESSION_KEY = 'kiln.session';

/* Whether the caller's role is at least role (the API decides anyway). */
Kiln.can = (role) => ROLES.indexOf(Kiln.role) >= ROLES.indexOf(role);

/* An element: attrs {class, text, on: {event: fn}, ...}, then children. */
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  append(e, kids);
  return e;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG_NS, tag);
  setAttrs(e, attrs);
  append(e, kids);
  return e;
}

function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') e.textContent = String(v);
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(e, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
}

Kiln.el = el;
Kiln.svg = svg;
/* Append children to e as el does: arrays flattened, null and false
   skipped (the DOM's own append would write "null"). */
Kiln.append = (e, ...kids) => append(e, kids);

Kiln.session = () => sessionStorage.getItem(SESSION_KEY);

function authHeaders(extra) {
  const h = Object.assign({}, extra);
  const s = Kiln.session();
  if (s) h.Authorization = 'Bearer ' + s;
  return h;
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/* A JSON API call; throws ApiError with the server's message. A string
   body goes as it is (a spec's YAML), anything else as JSON. */
Kiln.api = async (method, path, body) => {
  const init = { method, headers: authHeaders(), cache: 'no-store', credentials: 'omit' };
  if (typeof body === 'string') {
    init.headers['Content-Type'] = 'application/yaml';
    init.body = body;
  } else if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  if (Kiln.view) init.signal = Kiln.view.signal;
  const r = await fetch(path, init);
  const data = await r.json().catch(() => null);
  if (r.status === 401 && Kiln.session()) {
    sessionStorage.removeItem(SESSION_KEY);
    showLogin('Your session ended: log in again.');
  }
  if (!r.ok) {
    const msg = data && data.error ? data.error.message : r.status + ' ' + r.statusText;
    throw new ApiError(r.status, msg);
  }
  return data;
};

/*
 * Read a streamed answer (logs, events) piece by piece until the view
 * changes: onText gets each decoded piece.
 */
Kiln.stream = async (path, onText) => {
  const r = await fetch(path, {
    headers: authHeaders(), cache: 'no-store', credentials: 'omit',
    signal: Kiln.view ? Kiln.view.signal : undefined,
  });
  if (!r.ok) {
    const data = await r.json().catch(() => null);
    throw new ApiError(r.status, data && data.error ? data.error.message : String(r.status));
  }
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    onText(dec.decode(value, { stream: true }));
  }
};

/* Newline-delimited JSON from a stream, one object per call. */
Kiln.streamLines = (path, onObject) => {
  let rest = '';
  return Kiln.stream(path, (text) => {
    rest += text;
    const lines = rest.split('\n');
    rest = lines.pop();
    for (const line of lines) if (line.trim()) onObject(JSON.parse(line));
  });
};

/* A button for an action the role may take, or nothing for one it may not. */
Kiln.action = (role, label, fn) => {
  if (!Kiln.can(role)) return null;
  const b = el('button', { class: 'act', type: 'button', 'data-action': label, text: label });
  b.addEventListener('click', async () => {
    b.disabled = true;
    try {
      await fn();
      Kiln.toast(label + ': done');
      route();
    } catch (e) {
      Kiln.toast(label + ': ' + e.message, true);
    } finally {
      b.disabled = false;
    }
  });
  return b;
};

/* An action on something owner owns: an operator's on anything, a
   user's on its own (the API's rule for jobs, runs and deployments). */
Kiln.ownAction = (owner, label, fn) =>
  Kiln.action(owner === Kiln.name ? 'user' : 'operator', label, fn);

Kiln.toast = (text, bad) => {
  const t = el('p', { class: bad ? 'error toast' : 'muted toast', role: 'status', text });
  const view = document.getElementById('view');
  view.prepend(t);
  setTimeout(() => t.remove(), 6000);
};

Kiln.time = (ms) => (ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) : '');
Kiln.pill = (state) => el('span', { class: 'pill s-' + String(state), text: state });
Kiln.duration = (s) => {
  if (s === null || s === undefined) return '';
  if (s < 120) return s.toFixed(1) + ' s';
  if (s < 7200) return (s / 60).toFixed(1) + ' min';
  return (s / 3600).toFixed(1) + ' h';
};

Kiln.table = (headers, rows) =>
  el('div', { class: 'scroll' },
    el('table', {},
      el('thead', {}, el('tr', {}, headers.map((h) => el('th', { text: h })))),
      el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) =>
        el('td', {}, c === null || c === undefined ? '' : c)))))));

Kiln.kv = (pairs) => el('dl', { class: 'kv' },
  pairs.filter((p) => p[1] !== undefined).map(([k, v]) =>
    [el('dt', { text: k }), el('dd', {}, v === null ? '' : v)]));

function showLogin(message) {
  document.getElementById('nav').hidden = true;
  document.getElementById('logout').hidden = true;
  document.getElementById('who').textContent = '';
  document.getElementById('view').replaceChildren();
  document.getElementById('login').hidden = false;
  document.getElementById('login-error').textContent = message || '';
}

async function startSession(answer) {
  sessionStorage.setItem(SESSION_KEY, answer.session);
  await enter();
}

/* Log in with the pasted API token: it is sent once, never kept. */
async function loginWithToken(ev) {
  ev.preventDefault();
  const input = document.getElementById('token');
  const token = input.value.trim();
  input.value = '';
  const r = await fetch('/v1/console/sessions', {
    method: 'POST', cache: 'no-store', credentials: 'omit',
    headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' },
    body: '{}',
  });
  const data = await r.json().catch(() => null);
  if (!r.ok) {
    showLogin(data && data.error ? data.error.message : 'login failed');
    return;
  }
  await startSession(data);
}

/* A `kiln ui` link: #code=... in the fragment, which no request carries. */
async function loginWithCode(code) {
  history.replaceState(null, '', location.pathname + '#/overview');
  const r = await fetch('/v1/console/sessions', {
    method: 'POST', cache: 'no-store', credentials: 'omit',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ code }),
  });
  const data = await r.json().catch(() => null);
  if (!r.ok) {
    showLogin(data && data.error ? data.error.message : 'login failed');
    return;
  }
  await startSession(data);
}

/* The tab forgets the session first, so leaving mid-logout leaves none. */
async function logout() {
  const headers = authHeaders();
  sessionStorage.removeItem(SESSION_KEY);
  if (Kiln.view) Kiln.view.abort();
  showLogin('Logged out.');
  await fetch('/v1/console/sessions', { method: 'DELETE', headers, credentials: 'omit', keepalive: true })
    .catch(() => null);
}

async function enter() {
  let me;
  try {
    me = await Kiln.api('GET', '/v1/whoami');
  } catch (e) {
    showLogin(e.message);
    return;
  }
  Kiln.role = me.role;
  Kiln.name = me.name;
  document.getElementById('login').hidden = true;
  document.getElementById('nav').hidden = false;
  document.getElementById('logout').hidden = false;
  document.getElementById('who').textContent = me.name + ' (' + me.role + ')';
  document.body.dataset.role = me.role;
  if (!location.hash || location.hash === '#') location.hash = '#/overview';
  else route();
}

/* #/PAGE/ARG?key=value: the page's function draws into #view. */
async function route() {
  if (!Kiln.session()) return;
  const m = /^#\/([a-z]+)(?:\/([^?]*))?(?:\?(.*))?$/.exec(location.hash) || [];
  const page = Kiln.pages[m[1]] ? m[1] : 'overview';
  const arg = m[2] ? decodeURIComponent(m[2]) : null;
  const params = new URLSearchParams(m[3] || '');
  if (Kiln.view) Kiln.view.abort();
  Kiln.view = new AbortController();
  const mine = Kiln.view;
  for (const a of document.querySelectorAll('nav a'))
    a.classList.toggle('on', a.dataset.page === page.replace(/^(job|deployment|model|workflow)$/, '$1s'));
  const view = document.getElementById('view');
  const box = el('div', { id: 'page-' + page });
  try {
    await Kiln.pages[page](box, arg, params);
  } catch (e) {
    if (e.name === 'AbortError') return;
    box.append(el('p', { class: 'error', text: e.message }));
  }
  if (mine === Kiln.view) view.replaceChildren(box);
}
Kiln.route = route;

/* A login link opened in a tab already on the console changes only the
   fragment: it is taken here as on a fresh load. */
function start() {
  const code = /^#code=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (code) loginWithCode(code[1]);
  else if (Kiln.session()) route();
  else showLogin();
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('login').addEventListener('submit', loginWithToken);
  document.getElementById('logout').addEventListener('click', logout);
  window.addEventListener('hashchange', start);
  const code = /^#code=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (code) loginWithCode(code[1]);
  else if (Kiln.session()) enter();
  else showLogin();
});
