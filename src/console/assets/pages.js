/*
 * The console's pages: each draws into the box it is given from the
 * API's answers, with the actions the caller's role may take (the API
 * refuses the rest anyway). Graphs are SVG drawn here.
 */
'use strict';
(() => {
  const K = window.Kiln;
  const { el, svg } = K;
  const enc = encodeURIComponent;
  const PAGE = 50;
  const LIVE_RANKS = 8;

  /* ---- overview ---- */

  function gpuClass(d, node) {
    if (d.mig) return 'gpu mig';
    if (d.allocated_milli >= 1000) return 'gpu alloc';
    if (d.allocated_milli > 0) return 'gpu shared';
    if (node.state !== 'ready') return 'gpu off';
    return 'gpu';
  }

  function gpuLabel(d) {
    if (d.mig) return 'MIG ' + (d.mig_slices_used || 0) + '/' + (d.mig_slices || 0);
    if (d.allocated_milli > 0 && d.allocated_milli < 1000) return (d.allocated_milli / 10) + '%';
    return String(d.index);
  }

  function nodeCard(n) {
    const frag = n.fragmentation;
    return el('div', { class: 'card node', 'data-node': n.name },
      el('h2', {}, n.name, ' ', K.pill(n.state)),
      n.reason ? el('p', { class: 'muted', text: n.reason }) : null,
      el('div', { class: 'gpus' }, n.devices.map((d) =>
        el('div', {
          class: gpuClass(d, n),
          title: `GPU ${d.index} ${d.model}: ` + (d.allocations.length
            ? d.allocations.map((a) => 'job ' + (a.job || a.job_id || '?')).join(', ') : 'free'),
        }, gpuLabel(d)))),
      K.kv([
        ['GPUs', n.devices.length + ' × ' + (n.devices[0] ? n.devices[0].model : '-')],
        ['CPUs', n.cpus_allocated + ' / ' + n.cpus],
        ['Memory', gib(n.memory_allocated_bytes) + ' / ' + gib(n.memory_bytes) + ' GiB'],
        ['Fragmentation', frag ? frag.percent.toFixed(1) + '% (' + frag.milli.toFixed(0) +
          ' milli-GPUs unusable by typical jobs)' : 'no GPU jobs to measure against'],
        ['Labels', Object.entries(n.labels).map(([k, v]) => k + '=' + v).join(' ') || '-'],
      ]),
      el('p', {},
        n.state === 'ready' ? [
          K.action('operator', 'cordon', () => K.api('POST', `/v1/nodes/${enc(n.name)}/cordon`)),
          K.action('operator', 'drain', () => K.api('POST', `/v1/nodes/${enc(n.name)}/drain`)),
        ] : K.action('operator', 'uncordon', () => K.api('POST', `/v1/nodes/${enc(n.name)}/uncordon`))));
  }

  const gib = (b) => (b / 1073741824).toFixed(1);

  K.pages.overview = async (box) => {
    const [nodes, queued] = await Promise.all([
      K.api('GET', '/v1/nodes'),
      K.api('GET', `/v1/jobs?state=queued&limit=${PAGE}`),
    ]);
    const devs = nodes.nodes.flatMap((n) => n.devices);
    const used = devs.filter((d) => d.allocated_milli > 0 || d.mig_slices_used > 0).length;
    K.append(box, el('h1', { text: 'Overview' }),
      el('p', {}, `${nodes.nodes.length} nodes, ${devs.length} GPUs, ${used} in use, ` +
        `${queued.jobs.length} jobs queued`),
      el('div', { class: 'legend' }, el('span', { class: 'alloc', text: 'allocated' }),
        el('span', { class: 'shared', text: 'shared' }), el('span', { class: 'mig', text: 'MIG' }),
        el('span', { text: 'free' }), el('span', { class: 'off', text: 'cordoned or unhealthy' })),
      el('div', { class: 'grid' }, nodes.nodes.map(nodeCard)),
      el('h2', { text: 'Queue' }),
      queued.jobs.length ? K.table(['Job', 'Name', 'Owner', 'Priority', 'GPUs', 'Waiting because'],
        queued.jobs.map((j) => [jobLink(j), j.name, j.owner, j.priority,
          j.resources ? j.resources.gpus : 0, el('span', { class: 'wrap', text: j.reason || '' })]))
        : el('p', { class: 'muted', text: 'Nothing is queued.' }));
  };

  /* ---- jobs ---- */

  const jobLink = (j) => el('a', { href: '#/job/' + j.id, text: '#' + j.id });
  const STATES = ['', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'preempted'];

  K.pages.jobs = async (box, arg, params) => {
    const q = new URLSearchParams({ limit: PAGE, order: 'desc' });
    for (const k of ['state', 'owner', 'name', 'before']) if (params.get(k)) q.set(k, params.get(k));
    const data = await K.api('GET', '/v1/jobs?' + q);
    const form = el('form', { class: 'filters' },
      el('select', { name: 'state', 'aria-label': 'state' }, STATES.map((s) =>
        el('option', { value: s, text: s || 'any state', selected: s === (params.get('state') || '') }))),
      el('input', { name: 'owner', placeholder: 'owner', value: params.get('owner') || '' }),
      el('input', { name: 'name', placeholder: 'name', value: params.get('name') || '' }),
      el('button', { type: 'submit', text: 'Filter' }));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const f = new URLSearchParams();
      for (const [k, v] of new FormData(form)) if (v) f.set(k, v);
      location.hash = '#/jobs?' + f;
    });
    const jobs = data.jobs;
    const next = new URLSearchParams(params);
    if (jobs.length) next.set('before', jobs[jobs.length - 1].id);
    K.append(box, el('h1', { text: 'Jobs' }), form,
      K.table(['Job', 'Name', 'Owner', 'State', 'Tasks', 'GPUs', 'Attempts', 'Submitted', 'Reason', ''],
        jobs.map((j) => [jobLink(j), j.name, j.owner, K.pill(j.state), j.tasks,
          j.resources ? j.resources.gpus : 0, j.attempts, K.time(j.submitted_at_ms),
          el('span', { text: j.reason || '' }), jobActions(j)])),
      el('div', { class: 'pager' },
        params.get('before') ? el('a', { href: '#/jobs', text: 'newest' }) : null,
        jobs.length === PAGE ? el('a', { href: '#/jobs?' + next, class: 'next', text: 'older →' }) : null,
        el('span', { class: 'muted', text: jobs.length + ' shown' })));
  };

  function jobActions(j) {
    const live = j.state === 'queued' || j.state === 'running';
    return [
      live ? K.ownAction(j.owner, 'cancel', () => K.api('POST', `/v1/jobs/${j.id}/cancel`)) : null,
      j.state === 'running' && j.preemptible
        ? K.ownAction(j.owner, 'evict', () => K.api('POST', `/v1/jobs/${j.id}/evict`)) : null,
      (j.state === 'failed' || j.state === 'cancelled') && !j.array
        ? K.ownAction(j.owner, 'retry', () => retryJob(j.id)) : null,
    ];
  }

  /* A retry is a new job, the caller's, from the same spec text resolved
     against the same spec file (its workdir and relative inputs), as
     `kiln submit` of that file would make; then its page. */
  async function retryJob(id) {
    const { job } = await K.api('GET', `/v1/jobs/${id}`);
    const q = new URLSearchParams();
    const f = job.filename || '';
    if (f.startsWith('/')) {
      q.set('path', f);
      q.set('file', f.slice(f.lastIndexOf('/') + 1));
    } else if (f) {
      q.set('file', f);
    }
    const made = await K.api('POST', '/v1/jobs?' + q, job.spec_yaml);
    location.hash = '#/job/' + made.job.id;
  }

  /* A task's log, following as it is written until the page changes. */
  function followLog(pre, job, rank, attempt) {
    const path = `/v1/jobs/${job}/logs?task=${rank}&attempt=${attempt}&follow=1`;
    K.stream(path, (text) => {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(text);
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }).catch((e) => { if (e.name !== 'AbortError') pre.append('\n[' + e.message + ']'); });
  }

  K.pages.job = async (box, id) => {
    const { job: j } = await K.api('GET', `/v1/jobs/${enc(id)}`);
    const g = j.goodput || {};
    K.append(box, el('h1', {}, `Job #${j.id} ${j.name} `, K.pill(j.state)),
      el('p', {}, jobActions(j)),
      K.kv([
        ['Owner', j.owner], ['Priority', j.priority], ['Tasks', j.tasks],
        ['Resources', j.resources ? `${j.resources.gpus} GPU, ${j.resources.cpus} CPU` : '-'],
        ['Preemptible', String(j.preemptible)], ['Submitted', K.time(j.submitted_at_ms)],
        ['Started', K.time(j.started_at_ms)], ['Ended', K.time(j.ended_at_ms)],
        ['Reason', j.reason || ''], ['Retries', `${j.retries_used} of ${j.retries}`],
        ['Goodput', g.percent === null || g.percent === undefined ? 'not measured yet'
          : `${g.percent.toFixed(1)}% (useful ${K.duration(g.useful_task_seconds)}, lost ${K.duration(g.lost_task_seconds)})`],
      ]),
      el('h2', { text: 'Attempts' }),
      K.table(['#', 'State', 'Started', 'Ended', 'Exit', 'Reason', 'Checkpoint', 'Restore', 'Lost'],
        j.attempts_detail.map((a) => [a.number, K.pill(a.state), K.time(a.started_at_ms),
          K.time(a.ended_at_ms), a.exit_code, a.reason || '',
          a.checkpoint ? a.checkpoint + ' @ ' + K.time(a.checkpoint_at_ms) : '',
          a.restore_ms ? K.duration(a.restore_ms / 1000) : '',
          el('span', { class: a.lost_task_ms ? 'error' : 'muted', text: K.duration(a.lost_task_ms / 1000) })])),
      el('h2', { text: 'Outputs' }),
      j.outputs.length ? K.table(['Name', 'Size', 'sha256'], j.outputs.map((o) =>
        [o.name, o.size, o.sha256.slice(0, 16)])) : el('p', { class: 'muted', text: 'none' }),
      el('h2', { text: 'Inputs' }),
      j.inputs && j.inputs.length ? K.table(['Name', 'URL', 'sha256'], j.inputs.map((i) =>
        [i.name, i.url, (i.sha256 || '').slice(0, 16)])) : el('p', { class: 'muted', text: 'none' }));
    const last = j.attempts_detail[j.attempts_detail.length - 1];
    K.append(box, el('h2', { text: 'Logs' }));
    if (!last) {
      K.append(box, el('p', { class: 'muted', text: 'No attempt has started yet.' }));
      return;
    }
    K.append(box, K.table(['Rank', 'Node', 'GPUs', 'State', 'Exit'], last.tasks.map((t) =>
      [t.rank, t.node, t.devices.join(','), K.pill(t.state), t.exit_code])));
    /* Each follow is a stream the token's cap counts (32 by default):
       the first ranks follow at once, the rest when asked. */
    last.tasks.forEach((t, i) => {
      const pre = el('pre', { class: 'log', 'data-rank': t.rank });
      const follow = () => followLog(pre, j.id, t.rank, last.number);
      K.append(box, el('h2', { text: `rank ${t.rank} (attempt ${last.number})` }), pre);
      if (i < LIVE_RANKS) {
        follow();
      } else {
        const b = el('button', { type: 'button', text: 'follow this log' });
        b.addEventListener('click', () => { b.remove(); follow(); });
        pre.before(b);
      }
    });
  };

  /* ---- deployments ---- */

  K.pages.deployments = async (box) => {
    const { deployments } = await K.api('GET', '/v1/deployments');
    K.append(box, el('h1', { text: 'Deployments' }),
      deployments.length ? K.table(['Name', 'Model', 'Owner', 'Ready', 'Zones', 'Requests/s', 'p50 / p99',
        'Errors', '429s', 'Fallbacks', 'Rollout'],
      deployments.map((d) => {
        const t = d.traffic;
        return [el('a', { href: '#/deployment/' + enc(d.name), text: d.name }),
          d.model, d.owner, `${d.replicas_ready} / ${d.replicas_wanted}`, zones(d.replicas),
          t ? t.requests_per_s.toFixed(2) : '-', t ? `${ms(t.latency_p50_ms)} / ${ms(t.latency_p99_ms)}` : '-',
          t ? t.errors : '-', t ? t.rate_limited : '-', t ? t.fallbacks : '-',
          d.rollout ? JSON.stringify(d.rollout) : ''];
      }))
        : el('p', { class: 'muted', text: 'No deployments.' }));
  };

  const ms = (v) => (v === null || v === undefined ? '-' : v < 10 ? v.toFixed(1) + ' ms' : v.toFixed(0) + ' ms');

  /* What the gateways reported of the deployment over the server's window. */
  function traffic(t) {
    if (!t) return el('p', { class: 'muted traffic', text: 'No gateway has reported traffic for it in the last 5 minutes.' });
    return el('div', { class: 'traffic' }, K.kv([
      ['Requests', `${t.requests} in ${K.duration(t.window_s)} (${t.requests_per_s.toFixed(2)}/s)`],
      ['Latency p50 / p99', `${ms(t.latency_p50_ms)} / ${ms(t.latency_p99_ms)}`],
      ['Errors (5xx)', `${t.errors}` + (t.upstream_errors ? ` (${t.upstream_errors} upstream failures)` : '')],
      ['Rate limited (429)', String(t.rate_limited)],
      ['Fallbacks', String(t.fallbacks)],
      ['Tokens', String(t.tokens)],
      ['Gateways', `${t.gateways}, last report ${K.time(t.reported_at_ms)}`],
    ]));
  }

  function zones(replicas) {
    const by = {};
    for (const r of replicas) {
      const z = r.zone || 'no zone';
      by[z] = by[z] || { ready: 0, all: 0 };
      by[z].all++;
      if (r.ready) by[z].ready++;
    }
    return Object.entries(by).map(([z, c]) => `${z}: ${c.ready}/${c.all}`).join(', ');
  }

  K.pages.deployment = async (box, name) => {
    const { deployment: d } = await K.api('GET', `/v1/deployments/${enc(name)}`);
    const scale = el('input', { type: 'number', min: 0, value: d.replicas_wanted, 'aria-label': 'replicas', class: 'replicas' });
    const limits = Object.entries(d.limits || {}).map(([k, v]) => k + '=' + JSON.stringify(v)).join(' ');
    K.append(box, el('h1', {}, `Deployment ${d.name}`),
      K.can('operator') || (K.can('user') && d.owner === K.name) ? el('p', {}, scale,
        K.ownAction(d.owner, 'scale', () => K.api('POST', `/v1/deployments/${enc(d.name)}/scale`,
          { replicas: Number(scale.value) })),
        K.ownAction(d.owner, 'rollout restart', () => K.api('POST', `/v1/deployments/${enc(d.name)}/restart`))) : null,
      K.kv([
        ['Model', d.model + (d.model_version ? '@' + d.model_version : '')],
        ['Follows', d.follows || '-'], ['Owner', d.owner],
        ['Ready', `${d.replicas_ready} of ${d.replicas_wanted}`], ['Zones', zones(d.replicas)],
        ['Generation', d.generation], ['Fallback', d.fallback || '-'], ['Limits', limits || '-'],
        ['Rollout', d.rollout ? JSON.stringify(d.rollout) : '-'], ['Updated', K.time(d.updated_at_ms)],
      ]),
      el('h2', { text: 'Traffic' }), traffic(d.traffic),
      el('h2', { text: 'Replicas' }),
      K.table(['Replica', 'Job', 'State', 'Ready', 'Zone', 'Node', 'Address', 'Restarts'],
        d.replicas.map((r) => [r.replica, r.job ? el('a', { href: '#/job/' + r.job, text: '#' + r.job }) : '',
          K.pill(r.state), r.ready ? 'yes' : 'no', r.zone || '', r.node || '', r.address || '', r.restarts || 0])),
      el('h2', { text: 'Gateway alerts' }), gatewayAlerts(d.name),
      K.can('operator') ? el('div', {}, el('h2', { text: 'Gateway keys' }), gatewayKeys(d.name)) : null);
  };

  /* The keys that reach this deployment, with their limits (operators). */
  function gatewayKeys(name) {
    const box = el('div', {}, el('p', { class: 'muted', text: 'loading' }));
    K.api('GET', '/v1/keys').then((a) => {
      const rows = a.keys.filter((k) => k.deployments.includes(name));
      box.replaceChildren(rows.length ? K.table(['Key', 'Requests/min', 'Tokens/min', 'Tokens/day', 'Tokens/month'],
        rows.map((k) => [k.name, k.rpm || '-', k.tpm || '-', k.quota_day || '-', k.quota_month || '-']))
        : el('p', { class: 'muted', text: 'none' }));
    }).catch((e) => box.replaceChildren(el('p', { class: 'muted', text: e.message })));
    return box;
  }

  /* The gateway's anomaly alerts for this deployment, as /v1/alerts has them. */
  function gatewayAlerts(name) {
    const box = el('div', {}, el('p', { class: 'muted', text: 'loading' }));
    K.api('GET', '/v1/alerts?all=1').then((a) => {
      const rows = a.alerts.filter((x) => x.labels && x.labels.deployment === name);
      box.replaceChildren(rows.length ? K.table(['Rule', 'State', 'Value', 'Summary', 'Fired'],
        rows.map((x) => [x.rule, K.pill(x.state), x.value, el('span', { text: x.summary || '' }), K.time(x.fired_at_ms)]))
        : el('p', { class: 'muted', text: 'none' }));
    }).catch((e) => box.replaceChildren(el('p', { class: 'muted', text: e.message })));
    return box;
  }

  /* ---- models ---- */

  K.pages.models = async (box) => {
    const { models } = await K.api('GET', '/v1/models');
    K.append(box, el('h1', { text: 'Models' }),
      models.length ? K.table(['Name', 'Versions', 'Latest', 'Aliases', 'Updated'], models.map((m) =>
        [el('a', { href: '#/model/' + enc(m.name), text: m.name }), m.versions, m.latest,
          Object.entries(m.aliases || {}).map(([a, v]) => `${a}→${v}`).join(', '), K.time(m.updated_at_ms)]))
        : el('p', { class: 'muted', text: 'No models.' }));
  };

  /* NAME: its versions, aliases and history, then its newest version;
     NAME@V: that version. */
  K.pages.model = async (box, ref) => {
    const name = ref.split('@')[0];
    const m = await K.api('GET', `/v1/models/${enc(name)}`);
    const wanted = ref.includes('@') ? ref : m.versions.length
      ? name + '@' + m.versions[m.versions.length - 1].version : null;
    const aliasInput = el('input', { placeholder: 'alias', value: m.aliases[0] ? m.aliases[0].alias : 'prod',
      'aria-label': 'alias', class: 'alias' });
    K.append(box, el('h1', { text: 'Model ' + m.name }),
      el('h2', { text: 'Aliases' }),
      m.aliases.length ? K.table(['Alias', 'Version', 'Moved by', 'At', ''], m.aliases.map((a) =>
        [a.alias, a.version, a.by, K.time(a.time_ms),
          K.action('operator', 'roll back ' + a.alias, () =>
            K.api('POST', `/v1/models/${enc(m.name)}/rollback`, { alias: a.alias }))]))
        : el('p', { class: 'muted', text: 'No aliases.' }),
      el('h2', { text: 'Alias history' }),
      K.table(['At', 'Alias', 'Action', 'From', 'To', 'By'], m.alias_history.slice().reverse().map((h) =>
        [K.time(h.time_ms), h.alias, h.action, h.from === null ? '-' : h.from, h.version, h.by])),
      el('h2', { text: 'Versions' }),
      K.can('operator') ? el('p', {}, 'promote to ', aliasInput) : null,
      K.table(['Version', 'Files', 'Bytes', 'Created by', 'Created', ''], m.versions.map((v) => [
        el('a', { href: `#/model/${enc(m.name + '@' + v.version)}`, text: String(v.version) }),
        v.files, v.bytes, v.created_by, K.time(v.created_at_ms),
        K.action('operator', 'promote ' + v.version, () =>
          K.api('POST', `/v1/models/${enc(m.name + '@' + v.version)}/promote`, { alias: aliasInput.value }))])));
    if (wanted) await modelVersion(box, wanted);
  };

  async function modelVersion(box, ref) {
    const [v, lin] = await Promise.all([
      K.api('GET', `/v1/models/${enc(ref)}`),
      K.api('GET', `/v1/models/${enc(ref)}/lineage`),
    ]);
    K.append(box, el('h2', { text: `Version ${v.name}@${v.version}` }),
      K.kv([['Aliases', v.aliases.join(', ') || '-'], ['Trusted', v.trusted ? 'yes: signed by a trusted key' : 'no'],
        ['Created by', v.created_by], ['Store', v.store || ''],
        ['Metrics', lin.metrics ? Object.entries(lin.metrics).map(([k, x]) => k + '=' + x).join(' ') : '-']]),
      el('h3', { text: 'Signatures' }),
      v.signatures.length ? K.table(['Signed by', 'Key', 'Trusted', 'At'], v.signatures.map((sg) =>
        [el('span', { class: 'signer', text: sg.signed_by }), sg.key_id.slice(0, 16), sg.trusted ? 'yes' : 'no',
          K.time(sg.signed_at_ms)])) : el('p', { class: 'muted', text: 'unsigned' }),
      el('h3', { text: 'Lineage' }),
      lin.lineage ? lineageGraph(`${v.name}@${v.version}`, lin.lineage)
        : el('p', { class: 'muted', text: 'pushed from a directory: no lineage' }));
  }

  /* The lineage tree as a left-to-right graph: version ← job ← its
     checkpoint and inputs ← the jobs that produced them (produced_by),
     back to the first. */
  function lineageGraph(root, lineage) {
    const nodes = [], edges = [];
    const add = (label, kind, depth) => { nodes.push({ label, kind, depth }); return nodes.length - 1; };
    const walk = (lin, parent, depth) => {
      const job = add(`job #${lin.job} ${lin.job_name || ''}`, 'job', depth);
      edges.push([job, parent]);
      if (lin.checkpoint) edges.push([add('checkpoint ' + lin.checkpoint.name, 'ckpt', depth + 1), job]);
      for (const i of lin.inputs || []) {
        const input = add('input ' + i.name, 'input', depth + 1);
        edges.push([input, job]);
        if (i.produced_by) walk(i.produced_by, input, depth + 2);
      }
    };
    walk(lineage, add(root, 'model', 0), 1);
    return drawGraph(nodes.map((n, i) => ({ id: i, label: n.label, level: n.depth, cls: 's-' + n.kind })),
      edges, true);
  }

  /* ---- workflows ---- */

  K.pages.workflows = async (box) => {
    const { workflows } = await K.api('GET', '/v1/workflows');
    K.append(box, el('h1', { text: 'Workflows' }),
      workflows.length ? K.table(['Run', 'Name', 'Owner', 'State', 'Steps', 'Submitted'],
        workflows.slice().reverse().map((w) => [el('a', { href: '#/workflow/' + w.id, text: '#' + w.id }),
          w.name, w.owner, K.pill(w.state),
          Object.entries(w.steps_by_state || {}).map(([s, n]) => `${n} ${s}`).join(', '),
          K.time(w.submitted_at_ms)]))
        : el('p', { class: 'muted', text: 'No workflow runs.' }));
  };

  K.pages.workflow = async (box, id) => {
    const { workflow: w } = await K.api('GET', `/v1/workflows/${enc(id)}`);
    const steps = w.steps || [];
    const index = Object.fromEntries(steps.map((s, i) => [s.name, i]));
    const level = {};
    const levelOf = (s) => {
      if (level[s.name] !== undefined) return level[s.name];
      level[s.name] = 0;
      const needs = (s.needs || []).filter((n) => index[n] !== undefined);
      level[s.name] = needs.length ? 1 + Math.max(...needs.map((n) => levelOf(steps[index[n]]))) : 0;
      return level[s.name];
    };
    const cost = (x) => (x.cost_usd === null || x.cost_usd === undefined ? '' : '$' + x.cost_usd.toFixed(2));
    const nodes = steps.map((s, i) => ({ id: i, label: `${s.name} (${s.state}) ${cost(s)}`.trim(), level: levelOf(s),
      cls: 's-' + s.state, name: s.name }));
    const edges = steps.flatMap((s, i) => (s.needs || []).filter((n) => index[n] !== undefined).map((n) => [index[n], i]));
    K.append(box, el('h1', {}, `Workflow #${w.id} ${w.name} `, K.pill(w.state)),
      el('p', {},
        ['queued', 'running'].includes(w.state)
          ? K.ownAction(w.owner, 'cancel', () => K.api('POST', `/v1/workflows/${w.id}/cancel`)) : null,
        ['failed', 'cancelled'].includes(w.state)
          ? K.ownAction(w.owner, 'retry', () => K.api('POST', `/v1/workflows/${w.id}/retry`)) : null),
      K.kv([['Owner', w.owner], ['Reason', w.reason || ''], ['Revision', w.revision || '-'],
        ['Cost', w.cost_usd === null || w.cost_usd === undefined ? '-' : '$' + w.cost_usd.toFixed(4)],
        ['Submitted', K.time(w.submitted_at_ms)], ['Ended', K.time(w.ended_at_ms)]]),
      el('h2', { text: 'Steps' }), drawGraph(nodes, edges, false),
      K.table(['Step', 'State', 'Needs', 'Job', 'Attempts', 'GPU-hours', 'Cost', 'Reason'], steps.map((s) => [s.name,
        K.pill(s.state), (s.needs || []).join(', '), s.job ? el('a', { href: '#/job/' + s.job, text: '#' + s.job }) : '',
        `${s.attempts}`, s.gpu_seconds === undefined ? '' : hours(s.gpu_seconds),
        s.cost_unpriced ? 'unpriced' : cost(s), el('span', { class: 'wrap', text: s.reason || '' })])));
  };

  /*
   * A layered graph: nodes {id, label, level, cls}, edges [from, to].
   * Columns by level (reversed: the root on the right when rtl).
   */
  function drawGraph(nodes, edges, rtl) {
    const W = 190, H = 34, GX = 60, GY = 16;
    const cols = {};
    for (const n of nodes) (cols[n.level] = cols[n.level] || []).push(n);
    const levels = Math.max(0, ...nodes.map((n) => n.level)) + 1;
    const rows = Math.max(1, ...Object.values(cols).map((c) => c.length));
    for (const [lv, col] of Object.entries(cols))
      col.forEach((n, i) => {
        const l = rtl ? levels - 1 - Number(lv) : Number(lv);
        n.x = 10 + l * (W + GX);
        n.y = 10 + i * (H + GY);
      });
    const width = 20 + levels * (W + GX) - GX, height = 20 + rows * (H + GY) - GY;
    const g = svg('svg', { class: 'graph', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img' },
      svg('defs', {}, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5,
        markerWidth: 6, markerHeight: 6, orient: 'auto-start-reverse' },
      svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#8a94a6' }))));
    for (const [a, b] of edges) {
      const from = nodes[a], to = nodes[b];
      const left = from.x < to.x ? from : to, right = from.x < to.x ? to : from;
      const x1 = left.x + W, y1 = left.y + H / 2, x2 = right.x, y2 = right.y + H / 2;
      const path = svg('path', { class: 'edge', d: `M ${x1} ${y1} C ${x1 + GX / 2} ${y1}, ${x2 - GX / 2} ${y2}, ${x2} ${y2}`,
        'data-from': from.name || from.label, 'data-to': to.name || to.label });
      path.setAttribute(from.x < to.x ? 'marker-end' : 'marker-start', 'url(#arrow)');
      g.append(path);
    }
    for (const n of nodes)
      g.append(svg('g', { 'data-step': n.name || n.label },
        svg('rect', { class: 'node-box ' + n.cls, x: n.x, y: n.y, width: W, height: H, rx: 5 }),
        svg('text', { x: n.x + 8, y: n.y + H / 2 + 4, text: n.label.length > 28 ? n.label.slice(0, 27) + '…' : n.label })));
    return el('div', { class: 'scroll' }, g);
  }

  /* ---- cost ---- */

  const money = (v) => (v === null || v === undefined ? 'unpriced' : '$' + v.toFixed(2));
  const hours = (s) => (s / 3600).toFixed(2);

  K.pages.cost = async (box, arg, params) => {
    const by = params.get('by') || 'day';
    const [report, rightsize, reserve] = await Promise.all([
      K.api('GET', `/v1/cost?by=${enc(by)}`),
      K.api('GET', '/v1/cost/rightsize'),
      K.api('GET', '/v1/cost/reservations'),
    ]);
    const row = (r, key) => [key, hours(r.gpu_seconds), hours(r.idle_gpu_seconds), hours(r.lost_gpu_seconds),
      money(r.cost_usd), money(r.idle_cost_usd), money(r.total_cost_usd),
      r.goodput === null || r.goodput === undefined ? '' : (100 * r.goodput).toFixed(1) + '%'];
    const amount = (v, unit) => (unit === 'bytes' ? gib(v) + ' GiB' : `${Number(v.toFixed(2))} ${unit}`);
    const advice = rightsize.jobs.flatMap((j) => j.resources.filter((r) => r.over).map((r) =>
      [j.name, r.resource, amount(r.requested, r.unit), amount(r.p95, r.unit),
        amount(r.suggested, r.unit) + (r.suggested_gpus ? ` (${r.suggested_gpus} GPUs)` : '')]));
    K.append(box, el('h1', { text: 'Cost' }),
      el('p', { class: 'pager' }, 'by ', ['day', 'user', 'job', 'deployment', 'node'].map((b) =>
        el('a', { href: '#/cost?by=' + b, class: b === by ? 'on' : '', text: b }))),
      barChart(report.rows.map((r) => ({ label: keyText(by, r.key), value: r.total_cost_usd || 0 }))),
      K.table([by, 'busy GPU-hours', 'idle GPU-hours', 'lost GPU-hours', 'busy cost', 'idle cost', 'total', 'goodput'],
        report.rows.map((r) => row(r, by === 'job' ? el('a', { href: '#/job/' + r.key, text: keyText(by, r.key) })
          : keyText(by, r.key))).concat([row(report.total, el('b', { text: 'total' }))])),
      report.unpriced_nodes.length ? el('p', { class: 'muted', text: 'No price for: ' + report.unpriced_nodes.join(', ') }) : null,
      el('h2', { text: 'Right-size advice' }),
      advice.length ? K.table(['Job name', 'Resource', 'Requested', 'p95 used', 'Suggested'], advice)
        : el('p', { class: 'muted', text: 'No job asks for much more than it uses.' }),
      el('h2', { text: 'Reservations' }),
      reserve.skus.length ? K.table(['SKU', 'Utilisation', 'On demand $/h', '1y reserved $/h', '3y reserved $/h', 'Pays off'],
        reserve.skus.map((s) => [s.sku, (100 * s.utilisation).toFixed(0) + '%', s.on_demand_usd_hr, s.reserved_1y_usd_hr,
          s.reserved_3y_usd_hr, s.pays_off_3y ? (s.pays_off_1y ? '1y and 3y' : '3y') : 'no']))
        : el('p', { class: 'muted', text: 'No priced nodes to advise on.' }),
      el('h2', { text: 'Spot candidates' }),
      reserve.spot_candidates.length ? K.table(['Job', 'Name', 'User', 'Checkpoint every', 'Longest unsaved'],
        reserve.spot_candidates.map((j) => [el('a', { href: '#/job/' + j.job, text: '#' + j.job }), j.name, j.user,
          K.duration(j.checkpoint_every_ms / 1000), K.duration(j.longest_unsaved_ms / 1000)]))
        : el('p', { class: 'muted', text: 'No job checkpoints often enough for spot.' }));
  };

  /* A row's key as the table says it: jobs by id, the jobs of no
     deployment by that. */
  const keyText = (by, key) => (by === 'job' ? '#' + key : by === 'deployment' && key === '' ? '(no deployment)' : String(key));

  function barChart(items) {
    const W = 640, BH = 18, GAP = 4, LABEL = 150;
    const max = Math.max(1e-9, ...items.map((i) => i.value));
    const shown = items.slice(0, 30);
    const g = svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${Math.max(1, shown.length) * (BH + GAP)}`,
      width: W, height: Math.max(1, shown.length) * (BH + GAP), role: 'img' });
    shown.forEach((it, i) => {
      const y = i * (BH + GAP), w = (W - LABEL - 70) * it.value / max;
      g.append(svg('text', { x: 0, y: y + 13, text: String(it.label).slice(0, 22) }),
        svg('rect', { class: 'bar', x: LABEL, y, width: Math.max(1, w), height: BH }),
        svg('text', { x: LABEL + w + 4, y: y + 13, text: '$' + it.value.toFixed(2) }));
    });
    return el('div', { class: 'scroll' }, g);
  }

  /* ---- alerts and events ---- */

  function alertsTable(a) {
    return a.alerts.length ? K.table(['Rule', 'Severity', 'State', 'Summary', 'Labels', 'Fired', 'Resolved'],
      a.alerts.map((x) => [x.rule, x.severity, K.pill(x.state), el('span', { text: x.summary || '' }),
        Object.entries(x.labels || {}).map(([k, v]) => k + '=' + v).join(' '),
        K.time(x.fired_at_ms), K.time(x.resolved_at_ms)]))
      : el('p', { class: 'muted', text: 'No alerts.' });
  }

  /* The alerts, drawn again whenever the stream says one fired or
     resolved; the events as they come. */
  K.pages.alerts = async (box) => {
    const a = await K.api('GET', '/v1/alerts?all=1');
    const feed = el('tbody');
    const alerts = el('div', { id: 'alerts' }, alertsTable(a));
    const redraw = () => K.api('GET', '/v1/alerts?all=1').then((b) => alerts.replaceChildren(alertsTable(b)))
      .catch((e) => { if (e.name !== 'AbortError') alerts.replaceChildren(el('p', { class: 'error', text: e.message })); });
    K.append(box, el('h1', { text: 'Alerts and events' }),
      a.enabled ? null : el('p', { class: 'muted', text: 'Alert rules are off on this server.' }),
      alerts,
      el('h2', { text: 'Events (live)' }),
      el('div', { class: 'feed scroll' }, el('table', { id: 'events' },
        el('thead', {}, el('tr', {}, ['Seq', 'Time', 'Type', 'Detail'].map((h) => el('th', { text: h })))), feed)));
    K.streamLines('/v1/events?follow=1', (ev) => {
      const { seq, time_ms: t, type, ...rest } = ev;
      feed.prepend(el('tr', { 'data-type': type }, el('td', { text: seq }), el('td', { text: K.time(t) }),
        el('td', { text: type }), el('td', { class: 'wrap', text: JSON.stringify(rest) })));
      while (feed.children.length > 500) feed.lastChild.remove();
      if (type.startsWith('alert.')) redraw();
    }).catch((e) => { if (e.name !== 'AbortError') K.append(box, el('p', { class: 'error', text: e.message })); });
  };

  /* ---- audit ---- */

  K.pages.audit = async (box, arg, params) => {
    const q = new URLSearchParams({ limit: 100 });
    for (const k of ['actor', 'action']) if (params.get(k)) q.set(k, params.get(k));
    const a = await K.api('GET', '/v1/audit?' + q);
    let verify;
    if (K.can('admin')) {
      try {
        const v = await K.api('GET', '/v1/audit/verify');
        verify = el('p', { id: 'verify', class: v.ok ? '' : 'error' },
          v.ok ? `Chain verified: ${v.rows} rows intact.` : 'Chain broken: ' + JSON.stringify(v));
      } catch (e) {
        verify = el('p', { id: 'verify', class: 'error', text: 'verify failed: ' + e.message });
      }
    } else {
      verify = el('p', { id: 'verify', class: 'muted', text: 'Verifying the chain needs an admin.' });
    }
    K.append(box, el('h1', { text: 'Audit' }), verify,
      K.table(['Time', 'Actor', 'Role', 'Action', 'Object', 'Outcome', 'Detail'], a.audit.map((r) =>
        [K.time(r.time_ms), r.actor, r.role || '', r.action, r.object || '', K.pill(r.outcome),
          el('span', { class: 'wrap', text: r.detail || '' })])));
  };
})();
