// agentd console: plain JavaScript, no build step, nothing fetched but this daemon's own API.
// Pages (hash routes): #/ the task list, #/tasks/ID a task, #/submit the submit form, #/evals the evaluations,
// #/evals/ID one evaluation's result.
// Every value from the API reaches the page through textContent or attributes, never as HTML.
'use strict';
(() => {
  const SVG = 'http://www.w3.org/2000/svg';
  const STATES = ['queued', 'running', 'waiting_for_human', 'awaiting_tool', 'succeeded', 'failed', 'cancelled'];
  const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);
  const EVENT_TYPES = ['task_queued', 'task_started', 'step_started', 'model_delta', 'action_started',
    'action_finished', 'screenshot_saved', 'step_finished', 'waiting_for_human', 'task_finished', 'message_start',
    'message_end', 'text_start', 'text_end', 'thinking_start', 'thinking_end', 'tool_call_start', 'tool_call_delta',
    'tool_call_end', 'tool_started', 'tool_output', 'tool_finished', 'awaiting_tool', 'error'];

  // What tests and the latency benchmark read: when each step's screenshot was shown (ms since the epoch).
  const probe = { shown: [], live: [], acted: [], ready: false };
  window.agentdConsole = probe;

  const session = { csrf: '', auth: '' };
  let page = null;

  // ---- small DOM helpers ----
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c);
    return el;
  }
  function svg(tag, attrs, text) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    return el;
  }
  function toast(message) {
    const t = document.getElementById('toast');
    t.textContent = message;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.textContent = ''; }, 5000);
  }
  const stateBadge = (state) => h('span', { class: `state ${state}`, text: state.replaceAll('_', ' ') });
  function age(iso) {
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 60) return `${Math.floor(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    if (s < 86400) return `${Math.floor(s / 3600)} h`;
    return `${Math.floor(s / 86400)} d`;
  }
  const cost = (usage) => `$${(usage && usage.cost_usd ? usage.cost_usd : 0).toFixed(4)}`;
  const shotUrl = (id, step) => `/v1/tasks/${encodeURIComponent(id)}/steps/${step}/screenshot`;

  // ---- the API ----
  async function api(method, path, body) {
    const options = { method, credentials: 'same-origin', headers: {} };
    if (method !== 'GET') options.headers['X-Agentd-CSRF'] = session.csrf;
    if (body !== undefined) {
      options.headers['Content-Type'] = 'application/json';
      options.body = typeof body === 'string' ? body : JSON.stringify(body);
    }
    const response = await fetch(path, options);
    if (response.status === 401 && session.auth === 'cookie') {
      location.assign('/console/login');
    }
    const text = await response.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
    if (!response.ok) {
      const error = new Error((json && json.error && json.error.message) || `HTTP ${response.status}`);
      error.status = response.status;
      error.field = json && json.error && json.error.field;
      throw error;
    }
    return json;
  }

  // ---- routing ----
  function route(moved) {
    if (page && page.stop) page.stop();
    const hash = location.hash || '#/';
    const main = document.getElementById('main');
    main.replaceChildren();
    const m = hash.match(/^#\/tasks\/([^/?#]+)/);
    const ev = hash.match(/^#\/evals\/([^/?#]+)/);
    const current = m ? null : hash.startsWith('#/submit') ? 'nav-submit' : hash.startsWith('#/evals') ? 'nav-evals' : 'nav-tasks';
    for (const id of ['nav-tasks', 'nav-evals', 'nav-submit']) {
      const link = document.getElementById(id);
      if (id === current) link.setAttribute('aria-current', 'page'); else link.removeAttribute('aria-current');
    }
    if (m) page = taskPage(main, decodeURIComponent(m[1]));
    else if (ev) page = evalPage(main, decodeURIComponent(ev[1]));
    else if (hash.startsWith('#/evals')) page = evalsPage(main);
    else if (hash.startsWith('#/submit')) page = submitPage(main);
    else page = listPage(main);
    if (moved) {
      const heading = main.querySelector('h1');
      if (heading) heading.focus();
    }
  }

  // ---- the task list ----
  const filters = { state: '', age: '', minSteps: '', minCost: '' };
  const stepCounts = new Map(); // id -> {steps, final}

  function listPage(main) {
    const field = (label, input) => h('div', {}, h('label', { for: input.id, text: label }), input);
    const stateSelect = h('select', { id: 'filter-state' },
      h('option', { value: '', text: 'any' }), STATES.map((s) => h('option', { value: s, text: s.replaceAll('_', ' ') })));
    const ageSelect = h('select', { id: 'filter-age' },
      [['', 'any'], ['3600', 'last hour'], ['86400', 'last day'], ['604800', 'last week']]
        .map(([v, t]) => h('option', { value: v, text: t })));
    const minSteps = h('input', { id: 'filter-steps', type: 'number', min: '0', step: '1', inputmode: 'numeric' });
    const minCost = h('input', { id: 'filter-cost', type: 'number', min: '0', step: '0.01', inputmode: 'decimal' });
    stateSelect.value = filters.state; ageSelect.value = filters.age;
    minSteps.value = filters.minSteps; minCost.value = filters.minCost;
    const tbody = h('tbody');
    const summary = h('p', { class: 'muted', 'aria-live': 'polite' });
    const problem = h('p', { class: 'problem', role: 'alert' });
    main.append(
      h('h1', { tabindex: '-1', text: 'Tasks' }),
      h('form', { class: 'panel filters', role: 'search', 'aria-label': 'Filter tasks', onsubmit: (e) => e.preventDefault() },
        field('State', stateSelect), field('Created', ageSelect), field('Steps at least', minSteps),
        field('Cost at least (USD)', minCost)),
      problem, summary,
      h('div', { class: 'panel scroll' },
        h('table', { class: 'tasks' },
          h('caption', { class: 'muted', text: 'Newest first; refreshed every 2 seconds.' }),
          h('thead', {}, h('tr', {},
            h('th', { scope: 'col', text: 'Task' }), h('th', { scope: 'col', text: 'State' }),
            h('th', { scope: 'col', class: 'wide', text: 'Instructions' }), h('th', { scope: 'col', text: 'Age' }),
            h('th', { scope: 'col', text: 'Steps' }), h('th', { scope: 'col', text: 'Cost' }))),
          tbody)));
    let tasks = [];
    let stopped = false;
    let timer = null;

    function render() {
      const now = Date.now();
      const shown = tasks.filter((t) => {
        if (filters.age && now - Date.parse(t.created_at) > Number(filters.age) * 1000) return false;
        const steps = stepCounts.get(t.id);
        if (filters.minSteps !== '' && (steps ? steps.steps : 0) < Number(filters.minSteps)) return false;
        if (filters.minCost !== '' && (t.usage ? t.usage.cost_usd : 0) < Number(filters.minCost)) return false;
        return true;
      });
      const focused = document.activeElement && document.activeElement.dataset.task;
      tbody.replaceChildren(...shown.map((t) => {
        // A task whose stored record cannot be read: what is known of it, and why (its page says the same).
        if (t.error) {
          return h('tr', { 'data-id': t.id, class: 'unreadable' },
            h('td', {}, h('a', { href: `#/tasks/${encodeURIComponent(t.id)}`, class: 'mono', 'data-task': t.id, text: t.id })),
            h('td', {}, t.state ? stateBadge(t.state) : h('span', { class: 'state unknown', text: 'unknown' })),
            h('td', { class: 'what wide problem', title: t.error, text: t.error }),
            h('td', { class: 'num', title: t.created_at, text: age(t.created_at) }),
            h('td', { class: 'num', text: '–' }),
            h('td', { class: 'num', text: '–' }));
        }
        const steps = stepCounts.get(t.id);
        return h('tr', { 'data-id': t.id },
          h('td', {}, h('a', { href: `#/tasks/${encodeURIComponent(t.id)}`, class: 'mono', 'data-task': t.id, text: t.id })),
          h('td', {}, stateBadge(t.state)),
          h('td', { class: 'what wide', title: t.task.instructions, text: t.task.instructions }),
          h('td', { class: 'num', title: t.created_at, text: age(t.created_at) }),
          h('td', { class: 'num', text: steps ? String(steps.steps) : '…' }),
          h('td', { class: 'num', text: cost(t.usage) }));
      }));
      if (focused) {
        const again = tbody.querySelector(`a[data-task="${CSS.escape(focused)}"]`);
        if (again) again.focus();
      }
      summary.textContent = `${shown.length} of ${tasks.length} tasks shown`;
    }

    async function refresh() {
      try {
        const query = filters.state ? `?limit=200&state=${encodeURIComponent(filters.state)}` : '?limit=200';
        tasks = (await api('GET', `/v1/tasks${query}`)).tasks || [];
        problem.textContent = '';
        // The list carries no steps: count them from each task's document, once for finished tasks.
        const need = tasks.filter((t) => { const c = stepCounts.get(t.id); return !t.error && (!c || !c.final); }).slice(0, 25);
        await Promise.all(need.map(async (t) => {
          try {
            const doc = await api('GET', `/v1/tasks/${encodeURIComponent(t.id)}`);
            stepCounts.set(t.id, { steps: doc.steps.length, final: TERMINAL.has(doc.state) });
          } catch (_) { /* shown as … until the next refresh */ }
        }));
        if (!stopped) render();
        probe.ready = true;
      } catch (e) {
        problem.textContent = `Could not load the tasks: ${e.message}`;
      }
      if (!stopped) timer = setTimeout(refresh, 2000);
    }
    const changed = () => {
      const stateChanged = filters.state !== stateSelect.value;
      Object.assign(filters, { state: stateSelect.value, age: ageSelect.value, minSteps: minSteps.value, minCost: minCost.value });
      if (stateChanged) { clearTimeout(timer); refresh(); } else render();
    };
    for (const input of [stateSelect, ageSelect, minSteps, minCost]) input.addEventListener('input', changed);
    refresh();
    return { stop() { stopped = true; clearTimeout(timer); } };
  }

  // ---- evaluations (docs/eval.md) ----
  const percent = (rate) => (rate === null || rate === undefined ? '–' : `${(rate * 100).toFixed(1)}%`);
  const dollars = (usd) => (usd === null || usd === undefined ? '–' : `$${usd.toFixed(4)}`);

  function evalsPage(main) {
    const tbody = h('tbody');
    const problem = h('p', { class: 'problem', role: 'alert' });
    main.append(
      h('h1', { tabindex: '-1', text: 'Evaluations' }),
      h('p', { class: 'muted', text: 'Suites run through this daemon with agentd eval, newest first.' }),
      problem,
      h('div', { class: 'panel scroll' },
        h('table', { class: 'evals' },
          h('thead', {}, h('tr', {},
            h('th', { scope: 'col', text: 'Suite' }), h('th', { scope: 'col', text: 'Evaluation' }),
            h('th', { scope: 'col', text: 'Runs' }), h('th', { scope: 'col', text: 'Age' }))),
          tbody)));
    let stopped = false;
    let timer = null;
    async function refresh() {
      try {
        const evals = (await api('GET', '/v1/evals?limit=100')).evals || [];
        problem.textContent = '';
        if (stopped) return;
        tbody.replaceChildren(...evals.map((e) => h('tr', { 'data-id': e.id },
          h('td', {}, h('a', { href: `#/evals/${encodeURIComponent(e.id)}`, text: e.suite })),
          h('td', { class: 'mono', text: e.id }),
          h('td', { class: 'num', text: String(e.runs) }),
          h('td', { class: 'num', title: e.created_at, text: age(e.created_at) }))));
        if (!evals.length) tbody.append(h('tr', {}, h('td', { colspan: '4', class: 'muted', text: 'No evaluations yet.' })));
        probe.ready = true;
      } catch (e) {
        problem.textContent = `Could not load the evaluations: ${e.message}`;
      }
      if (!stopped) timer = setTimeout(refresh, 5000);
    }
    refresh();
    return { stop() { stopped = true; clearTimeout(timer); } };
  }

  function evalPage(main, id) {
    const heading = h('h1', { tabindex: '-1', text: 'Evaluation' });
    const meta = h('p', { class: 'muted mono', text: id });
    const progress = h('p', { class: 'muted', 'aria-live': 'polite' });
    const problem = h('p', { class: 'problem', role: 'alert' });
    const models = h('div');
    main.append(h('p', {}, h('a', { href: '#/evals', text: '← Evaluations' })), heading, meta, progress, problem, models);
    let stopped = false;
    let timer = null;
    const runLink = (taskId, label) => h('a', { href: `#/tasks/${encodeURIComponent(taskId)}`, class: 'mono', title: taskId, text: label });
    function modelSection(m, repeat) {
      const facts = [
        ['Pass rate', `${percent(m.pass_rate)} of ${m.runs} runs (${m.passed} passed)`],
        ['95% interval', m.interval ? `${percent(m.interval[0])} – ${percent(m.interval[1])}` : '–'],
        [`pass^${repeat}`, percent(m.pass_all_k)],
        ['Median', `${m.median_steps === null ? '–' : m.median_steps} steps, ${m.median_seconds === null ? '–' : m.median_seconds.toFixed(1)} s`],
        ['Tokens', `${m.input_tokens} in · ${m.output_tokens} out`],
        ['Cost', `${dollars(m.cost_usd)} · per task ${dollars(m.cost_per_task_usd)} · per success ${dollars(m.cost_per_success_usd)}`],
        ['Not counted', `${m.infrastructure_failures} infrastructure failure(s) · ${m.interrupted} interrupted`],
      ];
      const failed = new Map();
      for (const t of m.tasks) for (const f of t.failures) failed.set(f.task_id, f);
      const runs = (t) => t.task_ids.map((taskId, i) => {
        const f = failed.get(taskId);
        return h('div', { class: `eval-run ${f ? f.verdict : 'passed'}` },
          runLink(taskId, `repeat ${i + 1}`), ' ',
          h('span', { class: 'muted', text: f ? `${f.verdict} (${f.reason}): ${f.summary}` : 'passed' }));
      });
      const rows = m.tasks.map((t) => h('tr', { class: 'eval-task' },
        h('td', { text: t.name }),
        h('td', { class: 'num', text: `${t.passed}/${t.runs}` }),
        h('td', { class: 'num', text: String(t.infrastructure_failures + t.interrupted) }),
        h('td', { class: 'wide' }, runs(t))));
      const head = h('thead', {}, h('tr', {},
        h('th', { scope: 'col', text: 'Task' }), h('th', { scope: 'col', text: 'Passed' }),
        h('th', { scope: 'col', text: 'Not counted' }), h('th', { scope: 'col', class: 'wide', text: 'Runs' })));
      return h('section', { class: 'panel eval-model' },
        h('h2', { text: m.name }),
        h('dl', { class: 'facts' }, facts.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })])),
        h('div', { class: 'scroll' }, h('table', { class: 'eval-tasks' }, head, h('tbody', {}, rows))));
    }
    async function refresh() {
      let pending = 0;
      try {
        const r = await api('GET', `/v1/evals/${encodeURIComponent(id)}`);
        if (stopped) return;
        problem.textContent = '';
        heading.textContent = `Evaluation of ${r.suite}`;
        document.title = `agentd console – evaluation ${r.suite}`;
        pending = r.pending;
        const ended = r.models.reduce((n, m) => n + m.runs + m.infrastructure_failures + m.interrupted, 0);
        progress.textContent = r.pending ? `${ended} of ${r.planned} runs ended; ${r.pending} still going (refreshed every 2 seconds).`
          : `${ended} of ${r.planned} runs ended; repeat ${r.repeat}.`;
        models.replaceChildren(...r.models.map((m) => modelSection(m, r.repeat)));
        probe.ready = true;
      } catch (e) {
        problem.textContent = `Could not load the evaluation: ${e.message}`;
      }
      if (!stopped && (pending > 0 || problem.textContent)) timer = setTimeout(refresh, 2000);
    }
    refresh();
    return { stop() { stopped = true; clearTimeout(timer); } };
  }

  // ---- the submit form ----
  const TEMPLATE = JSON.stringify({
    instructions: 'Open the reports page',
    computer: { provider: 'mock', scene: 'login' },
    model: { provider: 'scripted', script: { turns: [{ complete: { success: true, summary: 'done' } }] } },
  }, null, 2);

  function submitPage(main) {
    const text = h('textarea', { id: 'task-json', rows: '18', spellcheck: 'false', 'aria-describedby': 'task-help' });
    text.value = submitPage.draft || TEMPLATE;
    text.addEventListener('input', () => { submitPage.draft = text.value; });
    const problem = h('p', { class: 'problem', role: 'alert', id: 'submit-problem' });
    const button = h('button', { type: 'submit', id: 'submit-task', text: 'Submit task' });
    const form = h('form', { class: 'panel' },
      h('label', { for: 'task-json', text: 'Task file (JSON)' }), text,
      h('p', { class: 'muted', id: 'task-help', text: 'The same document `agentd submit` takes (docs/task-file.md). Paths it names must be allowed by api.allowed_paths.' }),
      problem, button);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      button.disabled = true;
      problem.textContent = '';
      try {
        const record = await api('POST', '/v1/tasks', text.value);
        submitPage.draft = null;
        toast(`Submitted ${record.id}`);
        location.hash = `#/tasks/${encodeURIComponent(record.id)}`;
      } catch (err) {
        problem.textContent = err.field ? `${err.message} (field ${err.field})` : err.message;
        text.focus();
      } finally {
        button.disabled = false;
      }
    });
    // A demonstration: a task whose steps are all the person's, done on its live desktop (docs/humans.md).
    const computer = h('textarea', { id: 'demo-computer', rows: '3', spellcheck: 'false' });
    computer.value = JSON.stringify({ provider: 'mock', scene: 'login' });
    const demoText = h('input', { id: 'demo-instructions', type: 'text', placeholder: 'what it shows (optional)' });
    const demoProblem = h('p', { class: 'problem', role: 'alert', id: 'demo-problem' });
    const demoButton = h('button', { type: 'submit', id: 'record-demonstration', text: 'Record a demonstration' });
    const demo = h('form', { class: 'panel', id: 'demonstration' },
      h('label', { for: 'demo-computer', text: 'Computer (JSON, as a task file names it)' }), computer,
      h('label', { for: 'demo-instructions', text: 'Instructions' }), demoText,
      h('p', { class: 'muted', text: 'You do the steps on the live desktop; Finish ends it. `agentd compile` makes it a script, `agentd replay` plays it again.' }),
      demoProblem, demoButton);
    demo.addEventListener('submit', async (e) => {
      e.preventDefault();
      demoButton.disabled = true;
      demoProblem.textContent = '';
      try {
        let parsed;
        try { parsed = JSON.parse(computer.value); } catch (err) { throw Object.assign(new Error(`Computer: not JSON: ${err.message}`), { field: 'computer' }); }
        const body = { computer: parsed };
        if (demoText.value.trim()) body.instructions = demoText.value.trim();
        const record = await api('POST', '/v1/demonstrations', JSON.stringify(body));
        toast(`Recording ${record.id}`);
        location.hash = `#/tasks/${encodeURIComponent(record.id)}`;
      } catch (err) {
        demoProblem.textContent = err.field ? `${err.message} (field ${err.field})` : err.message;
        computer.focus();
      } finally {
        demoButton.disabled = false;
      }
    });
    main.append(h('h1', { tabindex: '-1', text: 'Submit a task' }), form, h('h2', { text: 'Record a demonstration' }), demo);
    return { stop() {} };
  }

  // ---- drawing a step's actions on its screenshot (screen pixels) ----
  function describe(a) {
    switch (a.type) {
      case 'click': return `click${a.button && a.button !== 'left' ? ` ${a.button}` : ''} (${a.x}, ${a.y})${a.keys && a.keys.length ? ` with ${a.keys.join('+')}` : ''}`;
      case 'double_click': case 'triple_click': case 'move': return `${a.type.replace('_', ' ')} (${a.x}, ${a.y})`;
      case 'drag': return `drag through ${a.path.length} points to (${a.path[a.path.length - 1].x}, ${a.path[a.path.length - 1].y})`;
      case 'scroll': return `scroll (${a.x}, ${a.y}) by ${a.scroll_x || 0}, ${a.scroll_y || 0}`;
      case 'type': return `type ${JSON.stringify(a.text)}`;
      case 'keypress': return `keys ${a.keys.join('+')}`;
      case 'hold_key': return `hold ${a.keys.join('+')} for ${a.duration_ms} ms`;
      case 'wait': return `wait ${a.duration_ms} ms`;
      case 'zoom': return `zoom (${a.x1}, ${a.y1})–(${a.x2}, ${a.y2})`;
      default: return a.type.replaceAll('_', ' ');
    }
  }

  function drawActions(layer, width, height, actions, proposed) {
    layer.replaceChildren();
    layer.setAttribute('viewBox', `0 0 ${width} ${height}`);
    const u = Math.max(width, height) / 640; // one "unit" of stroke, whatever the screen size
    const color = proposed ? '#b86bff' : '#ff2d55';
    const dash = proposed ? `${6 * u} ${4 * u}` : 'none';
    const defs = svg('defs');
    const marker = svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: '8', refY: '5', markerWidth: '5', markerHeight: '5', orient: 'auto-start-reverse' });
    marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', fill: color }));
    defs.append(marker);
    layer.append(defs);
    let last = { x: 12 * u, y: 12 * u };
    let textRow = 0;
    const label = (x, y, text) => {
      const g = svg('g');
      const t = svg('text', { x: x + 9 * u, y: y - 9 * u, 'font-size': 11 * u, 'font-family': 'DejaVu Sans, sans-serif', fill: '#fff', 'paint-order': 'stroke', stroke: '#000', 'stroke-width': 3 * u }, text);
      g.append(t);
      layer.append(g);
    };
    const ring = (x, y, r) => layer.append(svg('circle', { cx: x, cy: y, r: r * u, fill: 'none', stroke: color, 'stroke-width': 2.5 * u, 'stroke-dasharray': dash }));
    actions.forEach((a, i) => {
      const n = `${i + 1}`;
      switch (a.type) {
        case 'click': case 'double_click': case 'triple_click': {
          const rings = a.type === 'click' ? 1 : a.type === 'double_click' ? 2 : 3;
          for (let r = 0; r < rings; r++) ring(a.x, a.y, 8 + r * 5);
          layer.append(svg('circle', { cx: a.x, cy: a.y, r: 2 * u, fill: color }));
          label(a.x, a.y, `${n} ${a.type.replace('_', ' ')}`);
          last = { x: a.x, y: a.y };
          break;
        }
        case 'move':
          layer.append(svg('path', { d: `M${a.x - 7 * u},${a.y} h${14 * u} M${a.x},${a.y - 7 * u} v${14 * u}`, stroke: color, 'stroke-width': 2 * u }));
          label(a.x, a.y, `${n} move`);
          last = { x: a.x, y: a.y };
          break;
        case 'drag': {
          if (!a.path.length) break;
          const points = a.path.map((p) => `${p.x},${p.y}`).join(' ');
          layer.append(svg('circle', { cx: a.path[0].x, cy: a.path[0].y, r: 4 * u, fill: color }));
          layer.append(svg('polyline', { points, fill: 'none', stroke: color, 'stroke-width': 3 * u, 'stroke-dasharray': dash, 'marker-end': 'url(#arrow)' }));
          label(a.path[0].x, a.path[0].y, `${n} drag`);
          last = a.path[a.path.length - 1];
          break;
        }
        case 'scroll': {
          const dx = a.scroll_x || 0; const dy = a.scroll_y || 0;
          const len = Math.hypot(dx, dy) || 1;
          const shown = Math.min(80, Math.max(30, len / 4)) * u;
          ring(a.x, a.y, 6);
          layer.append(svg('line', { x1: a.x, y1: a.y, x2: a.x + (dx / len) * shown, y2: a.y + (dy / len) * shown, stroke: color, 'stroke-width': 3 * u, 'marker-end': 'url(#arrow)' }));
          label(a.x, a.y, `${n} scroll ${dy ? `${dy > 0 ? '↓' : '↑'}${Math.abs(dy)}` : ''}${dx ? ` ${dx > 0 ? '→' : '←'}${Math.abs(dx)}` : ''}`);
          last = { x: a.x, y: a.y };
          break;
        }
        case 'zoom':
          layer.append(svg('rect', { x: Math.min(a.x1, a.x2), y: Math.min(a.y1, a.y2), width: Math.abs(a.x2 - a.x1), height: Math.abs(a.y2 - a.y1), fill: 'none', stroke: color, 'stroke-width': 2 * u, 'stroke-dasharray': `${4 * u} ${3 * u}` }));
          label(a.x1, a.y1, `${n} zoom`);
          break;
        case 'type': case 'keypress': case 'hold_key': {
          const text = a.type === 'type' ? `⌨ ${a.text.length > 40 ? `${a.text.slice(0, 40)}…` : a.text}` : `⌨ ${a.keys.join('+')}`;
          const x = Math.min(last.x + 12 * u, width - 200 * u);
          const y = Math.min(last.y + (22 + textRow * 18) * u, height - 6 * u);
          textRow += 1;
          const box = svg('text', { x, y, 'font-size': 13 * u, 'font-family': 'DejaVu Sans Mono, monospace', fill: '#fff', 'paint-order': 'stroke', stroke: color, 'stroke-width': 4 * u }, `${n} ${text}`);
          layer.append(box);
          break;
        }
        default: break;
      }
    });
  }

  // ---- a task's page ----
  function taskPage(main, id) {
    const t = {
      doc: null, selected: null, live: true, frames: new Map(), streams: new Map(), liveActions: new Map(),
      stopped: false, es: null, poll: null, refreshTimer: null, loadingStep: null, editPreview: null,
      ws: null, streaming: false, liveUrl: null, liveHeader: null, liveTimes: [], wsRetry: null,
    };
    const title = h('h1', { tabindex: '-1', class: 'mono', text: id });
    const badge = h('span');
    const instructions = h('p', { class: 'muted' });
    const controls = h('div', { class: 'panel controls', id: 'controls', 'aria-label': 'Controls', role: 'group' });
    const img = h('img', { id: 'screen', alt: 'No screenshot yet' });
    const layer = svg('svg', { id: 'overlay', preserveAspectRatio: 'none', 'aria-hidden': 'true' });
    const empty = h('div', { class: 'empty', text: 'Waiting for the first screenshot…' });
    // The live desktop (GET /v1/tasks/{id}/live): shown instead of the latest step while following live.
    const liveImg = h('img', { id: 'live-screen', alt: 'The desktop, live' });
    const liveState = h('span', { id: 'live-state', class: 'muted', 'aria-live': 'off' });
    const viewer = h('div', { class: 'viewer' }, empty);
    const stepLabel = h('span', { id: 'step-label', 'aria-live': 'polite' });
    const prev = h('button', { type: 'button', class: 'quiet', id: 'step-prev', 'aria-keyshortcuts': 'ArrowLeft', text: '◀ Previous' });
    const next = h('button', { type: 'button', class: 'quiet', id: 'step-next', 'aria-keyshortcuts': 'ArrowRight', text: 'Next ▶' });
    const liveButton = h('button', { type: 'button', class: 'quiet', id: 'step-live', 'aria-pressed': 'true', 'aria-keyshortcuts': 'End', text: 'Follow live' });
    const timeline = h('div', { class: 'timeline', role: 'group', 'aria-label': 'Steps (← → to move)', id: 'timeline' });
    const stream = h('div', { class: 'stream', id: 'stream', 'aria-live': 'off' });
    const streamTitle = h('h2', { text: 'Model output' });
    const details = h('div', { id: 'step-details' });
    const usage = h('dl', { class: 'kv', id: 'usage' });
    const outcome = h('div', { id: 'outcome' });
    const problem = h('p', { class: 'problem', role: 'alert' });
    main.append(
      h('div', { class: 'task-head' }, h('a', { href: '#/', text: '← Tasks' }), title, badge),
      instructions, problem, controls,
      h('div', { class: 'layout' },
        h('section', { 'aria-label': 'Screen' },
          h('div', { class: 'stepbar' }, prev, stepLabel, next, liveButton, liveState),
          viewer, timeline),
        h('section', { 'aria-label': 'Details' },
          h('div', { class: 'panel' }, streamTitle, stream),
          h('div', { class: 'panel' }, details),
          h('div', { class: 'panel' }, h('h2', { text: 'Usage and outcome' }), usage, outcome))));

    // Frames: one per step screenshot (and the final screen), known from the document or from events.
    function frameList() { return [...t.frames.values()].sort((a, b) => a.index - b.index); }
    function upsertFrame(index, info) {
      const old = t.frames.get(index) || { index, actions: [], step: null };
      t.frames.set(index, Object.assign(old, info));
    }

    function select(index, fromUser) {
      if (fromUser) setLive(index === latestIndex());
      t.selected = index;
      renderFrame();
      renderTimeline();
      renderDetails();
    }
    function latestIndex() { const f = frameList(); return f.length ? f[f.length - 1].index : null; }
    function setLive(on) {
      t.live = on;
      liveButton.setAttribute('aria-pressed', on ? 'true' : 'false');
      placeScreen();
    }

    // ---- the live desktop ----
    function showingLive() { return t.live && t.streaming && !!liveImg.getAttribute('src'); }
    // Puts the live desktop or the selected step's screenshot in the viewer.
    function placeScreen() {
      const live = showingLive();
      img.hidden = live;
      if (live) {
        // The latest step's actions stay drawn, on the live desktop (the same screen, scaled the same way);
        // the step's screenshot stays in the page, hidden.
        if (!liveImg.isConnected) { viewer.replaceChildren(img, liveImg, layer); overlay(); }
        stepLabel.textContent = 'Live';
      } else if (liveImg.isConnected) {
        liveImg.remove();
        if (!img.getAttribute('src')) viewer.replaceChildren(empty);
        renderFrame();
      }
      renderLiveState();
      renderHands();
    }
    function renderLiveState() {
      const now = Date.now();
      t.liveTimes = t.liveTimes.filter((at) => now - at < 1000);
      liveState.dataset.live = t.streaming ? 'true' : 'false';
      liveState.textContent = t.streaming ? `● live · ${t.liveTimes.length} fps` : '';
    }
    function liveMessage(e) {
      if (typeof e.data !== 'string') {
        const header = t.liveHeader;
        t.liveHeader = null;
        if (!header) return;
        const url = URL.createObjectURL(e.data);
        liveImg.onload = () => {
          if (t.liveUrl && t.liveUrl !== url) URL.revokeObjectURL(t.liveUrl);
          t.liveUrl = url;
          t.liveTimes.push(Date.now());
          probe.live.push({ task: id, seq: header.seq, width: header.width, height: header.height, at: Date.now() });
          placeScreen();
        };
        liveImg.src = url;
        return;
      }
      let m;
      try { m = JSON.parse(e.data); } catch (_) { return; }
      if (m.type === 'frame') { t.liveHeader = m; t.screen = m.screen; }
      else if (m.type === 'acted') {
        streamEntry(m.step, 'note', `${m.ok ? '✓' : '✗'} by hand: ${m.message || 'done'}`);
        renderStream();
        probe.acted.push(m);
      } else if (m.type === 'error') {
        problem.textContent = `The desktop refused that: ${m.message}`;
        probe.acted.push(m);
      } else if (m.type === 'state') { t.streaming = !!m.live; placeScreen(); }
      else if (m.type === 'ended') { t.streaming = false; placeScreen(); }
    }
    function connectLive() {
      if (t.stopped || t.ws) return;
      const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
      const width = Math.max(320, Math.round((viewer.clientWidth || 1280) * (window.devicePixelRatio || 1)));
      const ws = new WebSocket(`${scheme}://${location.host}/v1/tasks/${encodeURIComponent(id)}/live?width=${width}`);
      ws.binaryType = 'blob';
      t.ws = ws;
      ws.onmessage = liveMessage;
      ws.onclose = () => {
        if (t.ws === ws) t.ws = null;
        t.streaming = false;
        placeScreen();
        // Gone before the task finished (a restart, the network): again shortly.
        if (!t.stopped && !(t.doc && TERMINAL.has(t.doc.state))) t.wsRetry = setTimeout(connectLive, 1000);
      };
    }
    const liveTicker = setInterval(renderLiveState, 1000);

    // ---- a person's hands on the live desktop (while they have taken it over) ----
    // Pointer and keyboard on the live image become actions of the task file's, in screen pixels, sent on
    // the live socket; the daemon runs each on the desktop and records it as the person's step.
    function handsOn() {
      return showingLive() && !!t.doc && t.doc.state === 'waiting_for_human' && !!t.doc.waiting && t.doc.waiting.kind === 'takeover';
    }
    function renderHands() {
      const on = handsOn();
      liveImg.dataset.hands = on ? 'on' : 'off';
      if (on) {
        liveImg.tabIndex = 0;
        liveImg.alt = 'The desktop, live: yours — click, drag, scroll and type on it';
        liveImg.title = 'Your hands on the desktop: click, drag, scroll; click it, then type';
      } else {
        liveImg.removeAttribute('tabindex');
        liveImg.alt = 'The desktop, live';
        liveImg.removeAttribute('title');
      }
    }
    function sendAction(action) {
      if (!handsOn() || !t.ws || t.ws.readyState !== WebSocket.OPEN) return;
      t.ws.send(JSON.stringify({ action }));
    }
    function screenPoint(e) {
      const box = liveImg.getBoundingClientRect();
      const screen = t.screen || { width: liveImg.naturalWidth, height: liveImg.naturalHeight };
      const x = Math.round(((e.clientX - box.left) / box.width) * screen.width);
      const y = Math.round(((e.clientY - box.top) / box.height) * screen.height);
      return { x: Math.min(screen.width - 1, Math.max(0, x)), y: Math.min(screen.height - 1, Math.max(0, y)) };
    }
    function heldKeys(e) {
      return [e.ctrlKey && 'ctrl', e.shiftKey && 'shift', e.altKey && 'alt', e.metaKey && 'super'].filter(Boolean);
    }
    const BUTTONS = ['left', 'middle', 'right'];
    let pressed = null;
    liveImg.addEventListener('pointerdown', (e) => {
      if (!handsOn()) return;
      e.preventDefault();
      liveImg.focus();
      pressed = { start: screenPoint(e), button: BUTTONS[e.button] || 'left', path: [screenPoint(e)], at: Date.now() };
    });
    liveImg.addEventListener('pointermove', (e) => {
      if (!pressed) return;
      const p = screenPoint(e);
      const last = pressed.path[pressed.path.length - 1];
      if (Math.abs(p.x - last.x) + Math.abs(p.y - last.y) >= 8 && pressed.path.length < 60) pressed.path.push(p);
    });
    liveImg.addEventListener('pointerup', (e) => {
      if (!pressed) return;
      const done = pressed;
      pressed = null;
      if (!handsOn()) return;
      const end = screenPoint(e);
      const keys = heldKeys(e);
      const moved = Math.abs(end.x - done.start.x) + Math.abs(end.y - done.start.y);
      if (moved < 4) {
        sendAction(e.detail === 2 && done.button === 'left' ? { type: 'double_click', x: end.x, y: end.y } : { type: 'click', x: end.x, y: end.y, button: done.button, keys });
      } else {
        const path = done.path.concat([end]);
        sendAction({ type: 'drag', path, button: done.button, keys });
      }
    });
    liveImg.addEventListener('contextmenu', (e) => { if (handsOn()) e.preventDefault(); });
    liveImg.addEventListener('dragstart', (e) => e.preventDefault());
    // Wheel turns within 150 ms become one scroll.
    let wheel = null;
    liveImg.addEventListener('wheel', (e) => {
      if (!handsOn()) return;
      e.preventDefault();
      const p = screenPoint(e);
      const lines = e.deltaMode === 1 ? 40 : e.deltaMode === 2 ? 400 : 1;
      if (!wheel) {
        wheel = { x: p.x, y: p.y, dx: 0, dy: 0, keys: heldKeys(e) };
        setTimeout(() => {
          const w = wheel;
          wheel = null;
          sendAction({ type: 'scroll', x: w.x, y: w.y, scroll_x: Math.round(w.dx), scroll_y: Math.round(w.dy), keys: w.keys });
        }, 150);
      }
      wheel.dx += e.deltaX * lines;
      wheel.dy += e.deltaY * lines;
    }, { passive: false });
    // Typed characters are gathered into one `type` until a pause or another key; other keys and chords
    // are `keypress`es; a paste is typed.
    let typed = '';
    let typedTimer = null;
    function flushTyped() {
      clearTimeout(typedTimer);
      typedTimer = null;
      if (typed) sendAction({ type: 'type', text: typed });
      typed = '';
    }
    const KEY_NAMES = { ' ': 'space', Control: 'ctrl', Meta: 'super', OS: 'super', AltGraph: 'alt' };
    liveImg.addEventListener('keydown', (e) => {
      if (!handsOn()) return;
      if (['Control', 'Shift', 'Alt', 'Meta', 'OS', 'AltGraph'].includes(e.key)) return;
      if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 'v') return; // the paste event types it
      e.preventDefault();
      e.stopPropagation();
      if (e.key.length === 1 && !e.ctrlKey && !e.altKey && !e.metaKey) {
        typed += e.key;
        clearTimeout(typedTimer);
        typedTimer = setTimeout(flushTyped, 400);
        return;
      }
      flushTyped();
      const key = KEY_NAMES[e.key] || e.key;
      sendAction({ type: 'keypress', keys: heldKeys(e).filter((k) => k !== key).concat([key]) });
    });
    liveImg.addEventListener('paste', (e) => {
      if (!handsOn()) return;
      e.preventDefault();
      flushTyped();
      const text = (e.clipboardData && e.clipboardData.getData('text/plain')) || '';
      if (text) sendAction({ type: 'type', text });
    });
    liveImg.addEventListener('blur', flushTyped);

    function renderFrame() {
      const frames = frameList();
      const frame = t.frames.get(t.selected);
      const position = frames.findIndex((f) => f.index === t.selected);
      prev.disabled = position <= 0;
      next.disabled = position < 0 || position >= frames.length - 1;
      if (!frame) { stepLabel.textContent = showingLive() ? 'Live' : 'No steps yet'; return; }
      // While the live desktop shows, the step's screenshot is still loaded (hidden) for stepping back to it.
      stepLabel.textContent = showingLive() ? 'Live'
        : frame.final ? `Final screen (${position + 1} of ${frames.length})` : `Step ${frame.index} (${position + 1} of ${frames.length})`;
      const want = shotUrl(id, frame.index) + (frame.version ? `?v=${frame.version}` : '');
      if (img.dataset.src !== want) {
        // Load off-screen first, so the old screen stays until the new one can be shown.
        const loader = new Image();
        const step = frame.index;
        t.loadingStep = step;
        loader.onload = () => {
          if (t.stopped || t.loadingStep !== step) return;
          img.src = loader.src;
          img.dataset.src = want;
          img.dataset.step = String(step);
          img.alt = frame.final ? 'The final screen' : `The screen at step ${step}`;
          // While the live desktop shows, the step's screenshot is kept (hidden) for stepping back to it.
          if (!img.isConnected) viewer.replaceChildren(...(showingLive() ? [img, liveImg, layer] : [img, layer]));
          img.hidden = showingLive();
          probe.shown.push({ task: id, step, at: Date.now() });
          overlay();
        };
        loader.onerror = () => {
          // Not stored yet (or the step is not journaled yet): try again shortly.
          if (!t.stopped && t.loadingStep === step) setTimeout(() => { if (t.loadingStep === step) { img.dataset.src = ''; renderFrame(); } }, 300);
        };
        loader.src = want;
      } else {
        overlay();
      }
    }
    function overlay() {
      let frame = t.frames.get(t.selected);
      if (showingLive()) {
        // On the live desktop: the latest actions carried out (the step now starting has none yet).
        const acted = frameList().filter((f) => !f.final && ((f.step && f.step.actions.length) || (t.liveActions.get(f.index) || []).length));
        if (acted.length) frame = acted[acted.length - 1];
      }
      if (!frame || !layer.isConnected) return;
      const proposed = !!(frame.step && frame.step.approval && frame.step.approval.approved === null && !frame.step.finished);
      const recorded = frame.step && frame.step.actions.length ? frame.step.actions : (t.liveActions.get(frame.index) || []);
      const width = frame.width || img.naturalWidth || 1280;
      const height = frame.height || img.naturalHeight || 800;
      if (proposed && t.editPreview) {
        // A half-edited action may lack what drawing it needs: then the proposed ones stay drawn.
        try { drawActions(layer, width, height, t.editPreview, true); return; } catch (_) { /* drawn below */ }
      }
      drawActions(layer, width, height, frame.final ? [] : recorded, proposed);
    }

    function renderTimeline() {
      const frames = frameList();
      const have = new Map([...timeline.children].map((b) => [Number(b.dataset.index), b]));
      frames.forEach((f, i) => {
        let button = have.get(f.index);
        if (!button) {
          button = h('button', { type: 'button', 'data-index': String(f.index), onclick: () => select(f.index, true) },
            h('img', { alt: '', loading: 'lazy', src: shotUrl(id, f.index) + (f.version ? `?v=${f.version}` : '') }),
            h('span', { text: f.final ? 'final' : `step ${f.index}` }));
          button.setAttribute('aria-label', f.final ? 'Final screen' : `Step ${f.index}`);
          const after = timeline.children[i];
          timeline.insertBefore(button, after || null);
        }
        if (f.index === t.selected) button.setAttribute('aria-current', 'step'); else button.removeAttribute('aria-current');
      });
      const current = timeline.querySelector('[aria-current="step"]');
      if (current && t.live) {
        // Only the strip scrolls to the live step: scrolling the page would move what a person is reading or
        // about to click (an approval, its edit) each time a step arrives.
        const strip = timeline.getBoundingClientRect();
        const box = current.getBoundingClientRect();
        if (box.left < strip.left) timeline.scrollLeft += box.left - strip.left;
        else if (box.right > strip.right) timeline.scrollLeft += box.right - strip.right;
      }
    }

    function renderDetails() {
      const frame = t.frames.get(t.selected);
      const key = JSON.stringify([t.selected, frame ? frame.step : null, frame ? !!frame.final : false]);
      if (details.dataset.key === key) return;
      details.dataset.key = key;
      details.replaceChildren();
      if (!frame) { details.append(h('h2', { text: 'Step' }), h('p', { class: 'muted', text: 'Nothing has happened yet.' })); return; }
      if (frame.final) { details.append(h('h2', { text: 'Final screen' }), h('p', { class: 'muted', text: 'The screen after the last step’s actions.' })); return; }
      const step = frame.step;
      details.append(h('h2', { text: step && step.by === 'human' ? `Step ${frame.index} — by a person` : `Step ${frame.index}` }));
      if (!step) { details.append(h('p', { class: 'muted', text: 'In progress: the model is deciding.' })); return; }
      // A browser's page: as text, never a link (the page is the task's, not the operator's).
      if (step.page) details.append(h('p', { class: 'page' }, h('span', { class: 'muted', text: 'Page: ' }), h('strong', { text: step.page.title || '(untitled)' }), h('span', { class: 'mono', text: ` ${step.page.url}` })));
      if (step.model_text) details.append(h('pre', { class: 'model-text', text: step.model_text }));
      if (step.thinking) details.append(h('details', {}, h('summary', { text: 'Thinking' }), h('pre', { class: 'thinking', text: step.thinking })));
      if (step.approval) {
        const a = step.approval;
        details.append(h('p', { class: 'call waiting', text: `Asked a human: ${a.reason} — ${a.approved === null || a.approved === undefined ? 'waiting' : a.approved ? 'approved' : 'rejected'}` }));
      }
      const computerResults = step.results.filter((r) => !r.tool);
      if (step.actions.length) {
        details.append(h('h2', { text: 'Actions' }), h('ol', { class: 'actions' }, step.actions.map((a, i) => {
          const r = computerResults[i];
          return h('li', { class: r ? (r.ok ? 'ok' : 'bad') : '' }, h('span', { text: describe(a) }),
            r && r.message ? h('span', { class: 'muted', text: ` — ${r.message}` }) : null);
        })));
      }
      const functions = step.calls.filter((c) => c.call === 'function');
      if (functions.length) {
        details.append(h('h2', { text: 'Tool calls' }));
        for (const call of functions) {
          const result = step.call_results.find((r) => r.call_id === call.id);
          details.append(h('div', { class: `call ${result ? (result.ok ? 'ok' : 'bad') : ''}` },
            h('div', {}, h('strong', { text: call.name }), h('span', { class: 'muted mono', text: ` ${call.id}` })),
            h('pre', { text: JSON.stringify(call.arguments, null, 2) }),
            result ? h('pre', { text: `${result.ok ? '✓' : '✗'} ${result.message}` }) : h('p', { class: 'muted', text: 'no result yet' }),
            result && result.details ? h('details', {}, h('summary', { text: 'Details' }), h('pre', { text: JSON.stringify(result.details, null, 2) })) : null));
        }
      }
      const u = step.usage;
      details.append(h('p', { class: 'muted', text: `${step.duration_ms} ms · ${u.input_tokens} in / ${u.output_tokens} out tokens · ${cost(u)}` }));
    }

    function renderStream() {
      const steps = [...t.streams.keys()].sort((a, b) => a - b);
      const step = steps.length ? steps[steps.length - 1] : null;
      streamTitle.textContent = step === null ? 'Model output' : `Model output, step ${step}`;
      const entries = step === null ? [] : t.streams.get(step);
      stream.replaceChildren(...entries.map((e) => h(e.kind === 'text' ? 'div' : 'pre', { class: e.kind === 'thinking' ? 'thinking' : e.kind === 'text' ? '' : 'muted' , text: e.text })));
      stream.scrollTop = stream.scrollHeight;
    }
    function streamEntry(step, kind, text, append) {
      if (!t.streams.has(step)) t.streams.set(step, []);
      const entries = t.streams.get(step);
      const last = entries[entries.length - 1];
      if (append && last && last.kind === kind) last.text += text; else entries.push({ kind, text });
    }

    function renderControls() {
      const doc = t.doc;
      if (!doc) return;
      // Rebuilt only when what they offer changes: a focused button or a half-typed answer survives refreshes.
      // A taken-over desktop offers the same form whatever step the person's actions have reached: its note
      // (and a click on its button) must survive the steps they add.
      const kind = doc.waiting && doc.waiting.kind;
      const step = kind === 'takeover' ? null : doc.waiting && doc.waiting.step;
      const key = JSON.stringify([doc.state, doc.waiting_reason, kind, step, (doc.pending_tool_calls || []).map((c) => c.id)]);
      if (controls.dataset.key === key) return;
      controls.dataset.key = key;
      const hadFocus = controls.contains(document.activeElement);
      controls.replaceChildren();
      if (!TERMINAL.has(doc.state)) {
        controls.append(h('button', { type: 'button', class: 'danger', id: 'cancel', text: 'Cancel task', onclick: (e) => act(e.target, 'POST', 'cancel', undefined, 'Cancel requested') }));
      }
      if (doc.state === 'queued' || doc.state === 'running') {
        controls.append(h('button', { type: 'button', id: 'pause', text: 'Take the desktop over', onclick: (e) => act(e.target, 'POST', 'pause', undefined, 'Pause requested: the task parks after its current step') }));
      }
      if (doc.state === 'waiting_for_human' && doc.waiting && doc.waiting.kind === 'takeover') {
        // A demonstration is finished by handing its desktop back; any other task resumes.
        const words = doc.task && doc.task.labels && doc.task.labels['agentd.demonstration']
          ? { lead: 'Recording a demonstration. ', what: 'Do the steps on the live desktop below; each action is a step. Finish when you are done.', label: 'Summary', hint: 'what it shows (optional; its summary)', button: 'Finish the demonstration', done: 'Demonstration finished' }
          : { lead: 'A person has the desktop. ', what: 'Hand it back when you are done: the task goes on from a fresh screenshot.', label: 'Note for the model', hint: 'what you did (optional; the model reads it)', button: 'Hand the desktop back', done: 'Handed back: the task resumes' };
        const note = h('textarea', { id: 'resume-note', rows: '2', placeholder: words.hint });
        const form = h('form', { class: 'call waiting', id: 'takeover' },
          h('p', {}, h('strong', { text: words.lead }), h('span', { text: words.what })),
          h('label', { for: note.id, text: words.label }), note,
          h('div', { class: 'controls' }, h('button', { type: 'submit', class: 'ok', id: 'resume', text: words.button })));
        form.addEventListener('submit', (e) => {
          e.preventDefault();
          const body = note.value.trim() ? { note: note.value } : {};
          act(form.querySelector('button[type=submit]'), 'POST', 'resume', body, words.done);
        });
        controls.append(form);
      } else if (doc.state === 'waiting_for_human' && doc.waiting && doc.waiting.kind === 'question') {
        const text = h('textarea', { id: 'answer-text', rows: '3' });
        const form = h('form', { class: 'call waiting', id: 'answer' },
          h('p', {}, h('strong', { text: 'The model asks: ' }), h('span', { id: 'waiting-question', text: doc.waiting.question || '' })),
          h('label', { for: text.id, text: 'Answer (what the model reads)' }), text,
          h('div', { class: 'controls' },
            h('button', { type: 'submit', class: 'ok', id: 'send-answer', text: 'Send answer' }),
            h('button', { type: 'button', class: 'danger', id: 'reject', text: 'Reject', onclick: (e) => act(e.target, 'POST', 'reject', {}, 'Rejected') })));
        form.addEventListener('submit', (e) => {
          e.preventDefault();
          act(form.querySelector('button[type=submit]'), 'POST', 'answer', { text: text.value }, 'Answer sent: the task resumes');
        });
        controls.append(form);
      } else if (doc.state === 'waiting_for_human') {
        const reason = h('input', { id: 'reject-reason', type: 'text', placeholder: 'why (optional)' });
        const proposed = doc.waiting && doc.waiting.kind === 'approval' ? doc.waiting.proposed : null;
        controls.append(h('div', { class: 'call waiting' },
          h('p', {}, h('strong', { text: 'The agent asks: ' }), h('span', { id: 'waiting-reason', text: doc.waiting_reason || '' })),
          h('p', { class: 'muted', text: 'Its proposed actions are drawn dashed on the screenshot.' }),
          h('div', { class: 'controls' },
            h('button', { type: 'button', class: 'ok', id: 'approve', text: 'Approve', onclick: (e) => act(e.target, 'POST', 'approve', undefined, 'Approved: the task resumes') }),
            h('div', {}, h('label', { for: 'reject-reason', text: 'Reason to reject' }), reason),
            h('button', { type: 'button', class: 'danger', id: 'reject', text: 'Reject', onclick: (e) => act(e.target, 'POST', 'reject', { reason: reason.value }, 'Rejected') })),
          // Only computer actions can be edited (the daemon refuses an edit of a step that proposes none).
          proposed && proposed.actions && proposed.actions.length ? editForm(proposed.actions) : null));
      }
      if (doc.pending_tool_calls && doc.pending_tool_calls.length) {
        const forms = doc.pending_tool_calls.map((call, i) => ({
          call,
          output: h('textarea', { id: `tool-output-${i}`, rows: '3' }),
          failed: h('input', { id: `tool-failed-${i}`, type: 'checkbox' }),
          details: h('textarea', { id: `tool-details-${i}`, rows: '2', placeholder: '{"optional": "JSON"}' }),
        }));
        const form = h('form', { class: 'call waiting', id: 'tool-results' },
          h('p', {}, h('strong', { text: 'The agent waits for the answer of remote tool calls.' })),
          forms.map((f) => h('fieldset', {},
            h('legend', {}, h('strong', { text: f.call.name }), h('span', { class: 'muted mono', text: ` ${f.call.id}` })),
            h('pre', { text: JSON.stringify(f.call.arguments, null, 2) }),
            h('label', { for: f.output.id, text: 'Output (what the model reads)' }), f.output,
            h('label', { for: f.failed.id }, f.failed, ' the tool failed'),
            h('label', { for: f.details.id, text: 'Details (JSON, kept in the record, not shown to the model)' }), f.details)),
          h('button', { type: 'submit', id: 'send-tool-results', text: 'Send answers' }));
        form.addEventListener('submit', (e) => {
          e.preventDefault();
          try {
            const results = forms.map((f) => ({
              id: f.call.id, ok: !f.failed.checked, output: f.output.value,
              details: f.details.value.trim() ? JSON.parse(f.details.value) : null,
            }));
            act(form.querySelector('button[type=submit]'), 'POST', 'tool-results', { results }, 'Answers sent: the task resumes');
          } catch (err) {
            problem.textContent = `Details must be JSON: ${err.message}`;
          }
        });
        controls.append(form);
      }
      controls.hidden = !controls.children.length;
      if (hadFocus) title.focus();
    }

    // Approve with an edit (docs/humans.md): the proposed computer actions as JSON (screen pixels), run instead of them.
    // While the text parses, the edited actions are drawn on the screenshot in place of the proposed ones.
    function editForm(actions) {
      const original = JSON.stringify(actions, null, 2);
      const text = h('textarea', { id: 'edit-actions', rows: String(Math.min(14, original.split('\n').length + 1)), spellcheck: 'false', 'aria-describedby': 'edit-help edit-problem' });
      text.value = original;
      const editProblem = h('p', { class: 'problem', id: 'edit-problem', role: 'alert' });
      const submit = h('button', { type: 'submit', class: 'ok', id: 'approve-edited', text: 'Approve with these actions' });
      const form = h('form', { id: 'edit-form' },
        h('label', { for: text.id, text: 'Actions to run instead (JSON)' }), text,
        h('p', { class: 'muted', id: 'edit-help', text: 'One action or an array of them, in screen pixels, e.g. {"type": "type", "text": "bob"}. They run instead of the proposed actions; the record keeps both.' }),
        editProblem,
        h('div', { class: 'controls' }, submit,
          h('button', { type: 'button', class: 'quiet', id: 'edit-reset', text: 'Back to the proposed actions', onclick: () => { text.value = original; changed(); } })));
      const parse = () => {
        const value = JSON.parse(text.value);
        if (Array.isArray(value)) return value;
        if (value && typeof value === 'object') return [value];
        throw new Error('give an action object or an array of them');
      };
      function changed() {
        editProblem.textContent = '';
        text.removeAttribute('aria-invalid');
        try { t.editPreview = parse(); } catch (_) { t.editPreview = null; }
        overlay();
      }
      text.addEventListener('input', changed);
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        let edited;
        try {
          edited = parse();
        } catch (err) {
          editProblem.textContent = `Not sent: the actions are not valid JSON (${err.message}).`;
          text.setAttribute('aria-invalid', 'true');
          text.focus();
          return;
        }
        submit.disabled = true;
        problem.textContent = '';
        try {
          await api('POST', `/v1/tasks/${encodeURIComponent(id)}/approve`, { actions: edited });
          t.editPreview = null;
          toast('Approved with your actions: the task resumes');
          await refresh();
          title.focus();
        } catch (err) {
          // The daemon checks every action; nothing changed, the task still waits.
          editProblem.textContent = `The daemon refused the edit; nothing changed, the task still waits. ${err.message}`;
          text.setAttribute('aria-invalid', 'true');
          text.focus();
          submit.disabled = false;
        }
      });
      form.hidden = true;
      const toggle = h('button', { type: 'button', class: 'quiet', id: 'edit-toggle', 'aria-expanded': 'false', 'aria-controls': 'edit-form', text: 'Edit the actions before approving' });
      toggle.addEventListener('click', () => {
        const open = form.hidden;
        form.hidden = !open;
        toggle.setAttribute('aria-expanded', open ? 'true' : 'false');
        if (open) { changed(); text.focus(); } else { t.editPreview = null; overlay(); }
      });
      return h('div', { id: 'edit', class: 'edit' }, toggle, form);
    }

    async function act(button, method, what, body, done) {
      button.disabled = true;
      problem.textContent = '';
      try {
        await api(method, `/v1/tasks/${encodeURIComponent(id)}/${what}`, body === undefined ? undefined : body);
        toast(done);
        await refresh();
        title.focus();
      } catch (e) {
        problem.textContent = `${what}: ${e.message}`;
        button.disabled = false;
      }
    }

    function renderDoc() {
      const doc = t.doc;
      badge.replaceChildren(stateBadge(doc.state));
      badge.id = 'task-state';
      badge.dataset.state = doc.state;
      instructions.textContent = doc.task.instructions;
      for (const step of doc.steps) {
        upsertFrame(step.index, { step, width: step.screenshot.width, height: step.screenshot.height, final: false });
      }
      if (doc.final_screenshot) {
        upsertFrame(doc.steps.length, { width: doc.final_screenshot.width, height: doc.final_screenshot.height, final: true, step: null });
      }
      const u = doc.usage;
      usage.replaceChildren(
        ...[['Steps', doc.steps.length], ['Attempt', doc.attempt], ['Input tokens', u.input_tokens], ['Output tokens', u.output_tokens],
          ['Cache read', u.cache_read_tokens], ['Cache write', u.cache_write_tokens], ['Cost', cost(u)],
          ['Created', new Date(doc.created_at).toLocaleString()], ['Worker', doc.worker || '—']]
          .flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: String(v) })]));
      outcome.replaceChildren();
      if (doc.outcome) {
        outcome.append(h('p', {}, h('strong', { text: doc.outcome.success ? '✓ ' : '✗ ' }), h('span', { id: 'outcome-summary', text: `${doc.outcome.summary} (${doc.outcome.reason})` })));
        if (doc.outcome.output !== undefined) outcome.append(h('pre', { text: JSON.stringify(doc.outcome.output, null, 2) }));
      }
      renderControls();
      renderHands();
      if (t.live) {
        const latest = latestIndex();
        if (latest !== null) t.selected = latest;
      }
      renderFrame();
      renderTimeline();
      renderDetails();
    }

    async function refresh() {
      try {
        t.doc = await api('GET', `/v1/tasks/${encodeURIComponent(id)}`);
        problem.textContent = '';
        if (!t.stopped) renderDoc();
        probe.ready = true;
      } catch (e) {
        problem.textContent = e.status === 404 ? `No task ${id}.` : `Could not load the task: ${e.message}`;
      }
    }
    function refreshSoon() {
      if (t.refreshTimer) return;
      t.refreshTimer = setTimeout(() => { t.refreshTimer = null; refresh(); }, 100);
    }

    function onEvent(type, e) {
      let ev;
      try { ev = JSON.parse(e.data); } catch (_) { return; }
      switch (type) {
        case 'screenshot_saved':
          upsertFrame(ev.step, { width: ev.width, height: ev.height, version: ev.seq });
          if (t.live) { t.selected = ev.step; renderFrame(); renderTimeline(); renderDetails(); } else renderTimeline();
          refreshSoon();
          break;
        case 'model_delta': streamEntry(ev.step, ev.kind, ev.text, true); renderStream(); break;
        case 'step_started': streamEntry(ev.step, 'note', ev.by === 'human' ? `step ${ev.step}: by a person` : `step ${ev.step} started`); renderStream(); break;
        case 'action_started':
          streamEntry(ev.step, 'note', `▶ ${describe(ev.action)}`);
          if (!t.liveActions.has(ev.step)) t.liveActions.set(ev.step, []);
          t.liveActions.get(ev.step)[ev.index] = ev.action;
          renderStream();
          if (t.selected === ev.step || showingLive()) overlay();
          break;
        case 'action_finished': streamEntry(ev.step, 'note', `${ev.ok ? '✓' : '✗'} ${ev.message || 'done'} (${ev.duration_ms} ms)`); renderStream(); break;
        case 'tool_call_end': streamEntry(ev.step, 'note', `call ${ev.name} ${JSON.stringify(ev.arguments)}`); renderStream(); break;
        case 'tool_started': streamEntry(ev.step, 'note', `▶ tool ${ev.name}`); renderStream(); break;
        case 'tool_output': streamEntry(ev.step, 'tool', ev.text, true); renderStream(); break;
        case 'tool_finished': streamEntry(ev.step, 'note', `${ev.ok ? '✓' : '✗'} tool ${ev.name}: ${ev.output}`); renderStream(); break;
        case 'error': streamEntry(ev.step || 0, 'note', `error: ${ev.message}`); renderStream(); break;
        case 'task_finished':
          if (t.es) { t.es.close(); t.es = null; }
          setConnection('');
          refreshSoon();
          break;
        case 'step_finished': case 'waiting_for_human': case 'awaiting_tool': case 'task_started': refreshSoon(); break;
        default: break;
      }
    }
    function setConnection(text) { document.getElementById('connection').textContent = text; }

    function connect() {
      const es = new EventSource(`/v1/tasks/${encodeURIComponent(id)}/events`);
      t.es = es;
      for (const type of EVENT_TYPES) es.addEventListener(type, (e) => onEvent(type, e));
      es.onopen = () => setConnection('● live');
      es.onerror = () => {
        if (t.doc && TERMINAL.has(t.doc.state)) { es.close(); t.es = null; setConnection(''); return; }
        setConnection('reconnecting…');
      };
    }

    const step = (delta) => {
      const frames = frameList();
      const i = frames.findIndex((f) => f.index === t.selected);
      const target = frames[Math.min(frames.length - 1, Math.max(0, i + delta))];
      if (target) select(target.index, true);
    };
    prev.addEventListener('click', () => step(-1));
    next.addEventListener('click', () => step(1));
    liveButton.addEventListener('click', () => {
      const on = liveButton.getAttribute('aria-pressed') !== 'true';
      setLive(on);
      if (on) { const latest = latestIndex(); if (latest !== null) select(latest, false); }
    });
    function onKey(e) {
      if (e.target.closest('input, textarea, select, [contenteditable]') || e.altKey || e.ctrlKey || e.metaKey) return;
      const frames = frameList();
      if (e.key === 'ArrowLeft') step(-1);
      else if (e.key === 'ArrowRight') step(1);
      else if (e.key === 'Home' && frames.length) select(frames[0].index, true);
      else if (e.key === 'End' && frames.length) { setLive(true); select(latestIndex(), false); }
      else return;
      e.preventDefault();
      const current = timeline.querySelector('[aria-current="step"]');
      if (current && timeline.contains(document.activeElement)) current.focus();
    }
    document.addEventListener('keydown', onKey);

    renderStream();
    refresh().then(() => {
      if (!t.stopped && !(t.doc && TERMINAL.has(t.doc.state))) { connect(); connectLive(); } else if (!t.stopped) replay();
    });
    // A finished task's stream is replayed once (for its model output) without following.
    function replay() {
      const es = new EventSource(`/v1/tasks/${encodeURIComponent(id)}/events?follow=false`);
      t.es = es;
      for (const type of EVENT_TYPES) es.addEventListener(type, (e) => onEvent(type, e));
      es.onerror = () => { es.close(); if (t.es === es) t.es = null; };
    }
    // A safety net beside the stream: the document again every 5 s while the task is not finished.
    t.poll = setInterval(() => { if (!(t.doc && TERMINAL.has(t.doc.state))) refresh(); }, 5000);
    return {
      stop() {
        t.stopped = true;
        if (t.es) t.es.close();
        if (t.ws) t.ws.close();
        clearTimeout(t.wsRetry);
        clearInterval(liveTicker);
        if (t.liveUrl) URL.revokeObjectURL(t.liveUrl);
        clearInterval(t.poll);
        clearTimeout(t.refreshTimer);
        document.removeEventListener('keydown', onKey);
        setConnection('');
      },
    };
  }

  // ---- start ----
  async function start() {
    try {
      const info = await api('GET', '/console/session');
      session.csrf = info.csrf || '';
      session.auth = info.auth || '';
    } catch (e) {
      if (e.status === 401) { location.assign('/console/login'); return; }
    }
    const logout = document.getElementById('logout');
    if (session.auth === 'cookie') {
      logout.hidden = false;
      logout.addEventListener('click', async () => {
        try { await api('POST', '/console/logout'); } catch (_) { /* the session is gone either way */ }
        location.assign('/console/login');
      });
    }
    window.addEventListener('hashchange', () => route(true));
    route(false);
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
