// The registry's part of the cameras page (issue 26 §2): the cluster's cameras listed,
// added, edited, disabled, enabled and removed through /api/cameras.
//
// Why a file of its own: console.js shows what the nodes do; this page changes the
// cluster's configuration, with rules of its own. Every write names the registry version
// the operator looked at (`If-Match`), so two operators never silently overwrite each
// other: the loser is told and sees the current state. The camera password is write-only:
// typed, put into the source URL of the one request that saves it, and cleared from the
// form at once. The API never returns it and nothing here writes it into the page. API
// strings reach the DOM as text only (console.js's `el`), as in the rest of the console.
'use strict';

(() => {
  const $ = (sel) => document.querySelector(sel);
  // What the page holds, for devtools and the browser test.
  const page = {
    version: null, // the registry version the list was read at
    records: [], // /api/registry/cameras
    editing: null, // {id, version, record} while the form edits a camera
    removing: null, // the id whose removal awaits its confirmation
  };
  window.vigilRegistry = page;
  let kit = null;
  let status = new Map(); // camera → /api/cameras row (the node's view)

  // A refusal's field → the input to mark.
  const INPUTS = {
    id: '#cam-id',
    source: '#cam-source',
    user: '#cam-user',
    password: '#cam-password',
    retention_hours: '#cam-retention',
    group: '#cam-group',
    labels: '#cam-labels',
  };

  function say(message, kind) {
    const m = $('#cam-message');
    m.textContent = message || '';
    m.className = kind || '';
  }

  function markInvalid(field) {
    document.querySelectorAll('#cam-form .invalid').forEach((i) => i.classList.remove('invalid'));
    const sel = INPUTS[field];
    if (sel) $(sel).classList.add('invalid');
  }

  const versionOf = (etag) => (etag ? etag.replace(/^W\//, '').replace(/"/g, '') : null);

  /** What the operator reads for a refused write. */
  function why(err) {
    if (err.status === 409 && err.refusal && err.refusal.version !== undefined) {
      return 'changed by someone else, reloaded: check the camera and save again';
    }
    if (err.status === 401 || err.status === 403) {
      return `${err.message}: sign in with the admin token above to change cameras`;
    }
    const r = err.refusal;
    if (r && r.error) {
      const where = [r.row ? `row ${r.row}` : '', r.field || ''].filter(Boolean).join(', ');
      return where ? `${where}: ${r.error}` : r.error;
    }
    return kit.explain(err);
  }

  // ---- the form -------------------------------------------------------------------
  function clearForm() {
    page.editing = null;
    $('#cam-form').reset();
    $('#cam-id').readOnly = false;
    $('#cam-form-title').textContent = 'Add a camera';
    $('#cam-save').textContent = 'Add';
    $('#cam-cancel').hidden = true;
    $('#cam-password').placeholder = '';
    markInvalid(null);
  }

  function editForm(record, version) {
    page.editing = { id: record.id, version, record };
    $('#cam-form-title').textContent = `Edit ${record.id}`;
    $('#cam-save').textContent = 'Save';
    $('#cam-cancel').hidden = false;
    $('#cam-id').value = record.id;
    $('#cam-id').readOnly = true;
    $('#cam-source').value = record.source;
    // The URL's user and password are never returned: both are typed again to change them.
    $('#cam-user').value = '';
    $('#cam-password').value = '';
    $('#cam-password').placeholder = record.has_password ? 'unchanged' : '';
    $('#cam-on-demand').checked = record.on_demand;
    $('#cam-record').checked = record.record;
    $('#cam-enabled').checked = record.enabled;
    $('#cam-retention').value = record.retention_hours === undefined ? '' : String(record.retention_hours);
    $('#cam-group').value = record.group || '';
    $('#cam-labels').value = Object.entries(record.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ');
    markInvalid(null);
  }

  class FormError extends Error {
    constructor(field, message) {
      super(`${field}: ${message}`);
      this.field = field;
    }
  }

  function labelsOf(textValue) {
    const labels = {};
    for (const part of textValue.split(',').map((p) => p.trim()).filter(Boolean)) {
      const eq = part.indexOf('=');
      if (eq <= 0) throw new FormError('labels', `"${part}" is not key=value`);
      labels[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
    }
    return labels;
  }

  /** The source as the API takes it: the URL with the typed user and password, if any. */
  function sourceOf(raw, user, password) {
    if (!user && !password) return raw;
    if (!user) throw new FormError('user', 'a password needs the user it belongs to');
    let url;
    try {
      url = new URL(raw);
    } catch (_) {
      throw new FormError('source', 'a user and password need an rtsp:// or rtsps:// URL');
    }
    url.username = user;
    url.password = password;
    return url.toString();
  }

  /** The form as a camera (adding) or as the fields that changed (editing). */
  function fromForm() {
    const retention = $('#cam-retention').value.trim();
    if (retention !== '' && !Number.isFinite(Number(retention))) {
      throw new FormError('retention_hours', 'a number of hours (empty: the node\'s default)');
    }
    const user = $('#cam-user').value.trim();
    const password = $('#cam-password').value;
    const rawSource = $('#cam-source').value.trim();
    const cam = {
      on_demand: $('#cam-on-demand').checked,
      record: $('#cam-record').checked,
      enabled: $('#cam-enabled').checked,
      labels: labelsOf($('#cam-labels').value),
    };
    if (retention !== '') cam.retention_hours = Number(retention);
    const group = $('#cam-group').value.trim();
    const e = page.editing;
    if (!e) {
      cam.id = $('#cam-id').value.trim();
      cam.source = sourceOf(rawSource, user, password);
      if (group) cam.group = group;
      return cam;
    }
    // Editing: only what changed; the source (with its sealed password) only when retyped.
    const old = e.record;
    const patch = {};
    for (const k of ['on_demand', 'record', 'enabled', 'retention_hours']) {
      if (cam[k] !== undefined && cam[k] !== old[k]) patch[k] = cam[k];
    }
    if (JSON.stringify(cam.labels) !== JSON.stringify(old.labels || {})) patch.labels = cam.labels;
    if (group !== (old.group || '')) patch.group = group;
    if (rawSource !== old.source || user || password) {
      patch.source = sourceOf(rawSource, user, password);
    }
    return patch;
  }

  async function save(ev) {
    ev.preventDefault();
    let body;
    try {
      body = fromForm();
    } catch (err) {
      $('#cam-password').value = '';
      markInvalid(err.field);
      say(err.message, 'error');
      return;
    }
    // The password is in `body` only now; the form forgets it whatever the answer.
    $('#cam-password').value = '';
    const e = page.editing;
    const opts = e
      ? { method: 'PUT', body, headers: { 'If-Match': `"${e.version}"` } }
      : { method: 'POST', body }; // an add overwrites nothing: an existing id is its own 409
    const path = e ? `/api/cameras/${encodeURIComponent(e.id)}` : '/api/cameras';
    try {
      await kit.api(path, opts);
      say(e ? `${e.id} saved` : `${body.id} added`, 'ok');
      clearForm();
      await load();
    } catch (err) {
      await conflict(err, e);
      markInvalid(err.refusal && err.refusal.field);
      say(why(err), 'error');
    }
  }

  /** After a 409 on an edit: the list and the form again, from the current version. */
  async function conflict(err, editing) {
    if (err.status !== 409 || !err.refusal || err.refusal.version === undefined) return;
    await load();
    const now = page.records.find((r) => r.id === (editing && editing.id));
    if (now) editForm(now, page.version);
  }

  // ---- the list -------------------------------------------------------------------
  async function act(id, patch, verb) {
    try {
      await kit.api(`/api/cameras/${encodeURIComponent(id)}`, {
        method: patch ? 'PUT' : 'DELETE',
        body: patch || undefined,
        headers: { 'If-Match': `"${page.version}"` },
      });
      say(`${id} ${verb}`, 'ok');
      if (!patch && page.editing && page.editing.id === id) clearForm();
    } catch (err) {
      say(`${id}: ${why(err)}`, 'error');
    }
    page.removing = null;
    await load();
  }

  function actions(r) {
    const b = (cls, label, onclick) => kit.el('button', { type: 'button', class: cls, onclick }, label);
    const edit = b('act-edit', 'Edit', () => { editForm(r, page.version); say(''); });
    const toggle = r.enabled
      ? b('act-disable', 'Disable', () => act(r.id, { enabled: false }, 'disabled'))
      : b('act-enable', 'Enable', () => act(r.id, { enabled: true }, 'enabled'));
    const remove = page.removing === r.id
      ? b('act-remove-confirm', 'Confirm remove', () => act(r.id, null, 'removed'))
      : b('act-remove', 'Remove', () => { page.removing = r.id; render(); });
    return kit.el('span', { class: 'actions' }, edit, ' ', toggle, ' ', remove);
  }

  function render() {
    const { text } = kit;
    kit.fill($('#registry'), page.records, (r) => r.id, (r) => {
      const s = status.get(r.id);
      const labels = Object.entries(r.labels || {}).map(([k, v]) => `${k}=${v}`);
      if (r.group) labels.unshift(`group ${r.group}`);
      return [
        r.id,
        r.has_password ? `${r.source} (password set)` : r.source,
        r.on_demand ? 'yes' : 'no',
        r.record ? 'yes' : 'no',
        r.retention_hours === undefined ? 'default' : `${r.retention_hours} h`,
        labels.join(', '),
        r.enabled ? 'yes' : 'no',
        s ? `${s.state}${s.node ? ` on ${text(s.node)}` : ''}` : '',
        actions(r),
      ];
    });
    $('#registry-summary').textContent = `Registry version ${page.version}, ${page.records.length} `
      + `camera${page.records.length === 1 ? '' : 's'}; changes apply on every node within seconds.`;
  }

  async function load() {
    const { body, etag } = await kit.api('/api/registry/cameras', { etag: true });
    page.records = body;
    page.version = versionOf(etag);
    render();
  }

  /** Called by console.js on each refresh of the cameras tab, with the node's camera rows. */
  async function refresh(k, cams) {
    kit = k;
    status = new Map((cams || []).map((c) => [c.camera, c]));
    const on = Boolean(kit.node().registry);
    $('#registry-on').hidden = !on;
    $('#registry-off').hidden = on;
    if (!on) {
      $('#registry-off').textContent = 'The camera registry is off on this node, so its cameras '
        + 'come from [[camera]] in its configuration file. To add, edit and remove cameras here, '
        + 'set [registry] enabled = true (with [storage] root on the shared storage and a '
        + '[registry] secret_key or [cluster] key) and restart the node.';
      return;
    }
    await load();
  }
  window.vigilRegistryPage = { refresh };

  $('#cam-form').addEventListener('submit', save);
  $('#cam-cancel').addEventListener('click', () => { clearForm(); say(''); });
})();
