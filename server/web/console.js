// vigil's operator console: one page, plain JS, no build step.
//
// Every string that comes from the API (node ids, camera names, reasons, client addresses)
// reaches the DOM as a text node or an attribute value set through the DOM, never as
// markup: this file builds elements with `el()` and never assigns HTML. The admin token
// (needed for writes, and for reads beyond loopback) lives in sessionStorage only: it is
// typed by the operator and sent as a bearer header, never written into the page or a URL.
'use strict';

(() => {
  const TOKEN_KEY = 'vigil.adminToken';
  // `[http] console_refresh_ms` and `console_history`, from /api/node once it answers.
  let REFRESH_MS = 2000;
  let HISTORY = 150;
  const COLORS = ['#2a7ab0', '#d9822b', '#3a8f5c', '#b03a5b', '#7a5ab0', '#8a8a2a', '#2aa0a0', '#555'];

  // What the page saw, for operators' devtools and the browser test.
  const seen = {
    refreshes: 0,
    errors: [],
    node: null,
    loadHistory: {}, // node id → [[ms, load], …]
    player: { state: 'idle', src: null, error: null },
  };
  window.vigilConsole = seen;
  window.addEventListener('error', (e) => seen.errors.push(String(e.message)));
  window.addEventListener('unhandledrejection', (e) => seen.errors.push(String(e.reason)));

  const $ = (sel) => document.querySelector(sel);

  /** An element with properties/attributes and children; strings become text nodes. */
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'data') Object.entries(v).forEach(([dk, dv]) => { e.dataset[dk] = dv; });
      else if (k === 'style') Object.entries(v).forEach(([sk, sv]) => { e.style[sk] = sv; });
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  const text = (v) => (v === undefined || v === null ? '' : String(v));
  const num = (v, digits) => (typeof v === 'number' ? v.toFixed(digits) : '');
  const iso = (ms) => new Date(ms).toISOString();
  const isoSecs = (ms) => iso(ms).replace(/\.\d+Z$/, 'Z');

  // ---- authentication ---------------------------------------------------------------
  // The token never crosses plain HTTP beyond loopback: on such a page the console stays
  // read-only and says to open the node's HTTPS address ([http] tls_listen) to sign in.
  const loopbackHost = /^(localhost|127(\.\d+){3}|\[::1\])$/.test(location.hostname);
  const tokenAllowed = location.protocol === 'https:' || loopbackHost;
  const token = () => (tokenAllowed ? sessionStorage.getItem(TOKEN_KEY) || '' : '');
  // Who the node says this page is (`GET /api/whoami`): a user signed in with a name and
  // password holds a session cookie (HttpOnly: never readable here) and gets the session's
  // CSRF token, which every write sends back.
  const nobody = { user: null, proof: 'none', admin: false, operate: false, rights: null, csrf: null };
  let me = nobody;
  const authHeaders = () => ({
    ...(token() ? { Authorization: `Bearer ${token()}` } : {}),
    ...(me.csrf ? { 'X-Vigil-CSRF': me.csrf } : {}),
  });
  const canOperate = () => token() !== '' || me.operate;
  const isAdmin = () => token() !== '' || me.admin;
  // A signed-in user sees the tabs their rights use; the token and an open node see all.
  const mayPlayback = () => !me.rights || me.admin || me.rights.playback.length > 0;

  async function whoami() {
    try {
      const r = await fetch('/api/whoami', { headers: authHeaders(), cache: 'no-store' });
      me = r.ok ? await r.json() : nobody;
    } catch (_) {
      me = nobody;
    }
    seen.me = me;
    showAuth();
  }

  function showAuth() {
    const session = me.proof === 'session';
    const any = token() !== '' || session;
    document.body.classList.toggle('admin', canOperate());
    $('#auth-state').textContent = token() ? 'token set: actions enabled'
      : session ? `signed in as ${me.user}` : me.proof === 'local' ? 'open node: read-only' : 'not signed in';
    $('#token-clear').hidden = !any;
    $('#token-form').querySelectorAll('.signin').forEach((e) => { e.hidden = any; });
    const shown = {
      cluster: canOperate() || !me.rights,
      scheduler: canOperate() || !me.rights,
      recordings: mayPlayback(),
      audit: isAdmin() || (!me.rights && me.proof === 'local'),
    };
    document.querySelectorAll('#tabs a').forEach((a) => {
      a.hidden = Object.hasOwn(shown, a.dataset.tab) && !shown[a.dataset.tab];
    });
  }

  // One form: a user name and password sign in (a session), a token alone is kept in the tab.
  $('#token-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const t = $('#token-input').value.trim();
    const user = $('#signin-user').value.trim();
    const password = $('#signin-password').value;
    $('#token-input').value = '';
    $('#signin-password').value = '';
    if (!tokenAllowed) {
      $('#auth-state').textContent = 'plain HTTP beyond loopback: open the console over HTTPS to sign in';
      return;
    }
    if (user) {
      const r = await fetch('/api/signin', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ user, password }),
        cache: 'no-store',
      }).catch((err) => ({ ok: false, status: 0, text: async () => String(err) }));
      if (!r.ok) {
        $('#auth-state').textContent = `sign-in refused: ${r.status} ${(await r.text()).trim()}`;
        return;
      }
      seen.node = null;
    } else if (t) {
      sessionStorage.setItem(TOKEN_KEY, t);
    }
    await whoami();
    refresh();
  });
  $('#token-clear').addEventListener('click', async () => {
    sessionStorage.removeItem(TOKEN_KEY);
    if (me.proof === 'session') {
      await fetch('/api/signout', { method: 'POST', headers: authHeaders() }).catch(() => {});
    }
    me = nobody;
    await whoami();
    refresh();
  });

  class ApiError extends Error {
    constructor(status, body) {
      super(`${status}: ${body}`);
      this.status = status;
      // A JSON refusal (the registry's `{error, row, field, version}`), else null.
      try { this.refusal = JSON.parse(body); } catch (_) { this.refusal = null; }
    }
  }

  /**
   * The API's JSON answer to `path`. `options`: `method`, `body` (sent as JSON), `headers`
   * (added to the token's), `etag` (answer `{body, etag}`: the version a write may name).
   */
  async function api(path, options) {
    const opts = options || {};
    const r = await fetch(path, {
      method: opts.method || 'GET',
      headers: { ...authHeaders(), ...(opts.body ? { 'Content-Type': 'application/json' } : {}), ...opts.headers },
      body: opts.body ? JSON.stringify(opts.body) : undefined,
      cache: 'no-store',
    });
    if (!r.ok) throw new ApiError(r.status, (await r.text()).trim());
    return opts.etag ? { body: await r.json(), etag: r.headers.get('ETag') } : r.json();
  }

  function banner(message) {
    const b = $('#banner');
    b.hidden = !message;
    b.textContent = message || '';
  }

  function explain(err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      return `${err.message}\nThis node answers only who may ask: sign in above (a user, or the admin token).`;
    }
    return String(err.message || err);
  }

  // ---- tables -----------------------------------------------------------------------
  /**
   * Sets `table`'s rows: one per item, cells from `cells(item)` (strings, nodes or
   * `{cls, v}`). A row whose content did not change is kept as it is (no flicker, and a
   * button the operator is about to click stays the same element).
   */
  function fill(table, items, key, cells) {
    const body = table.tBodies[0];
    const old = new Map([...body.rows].map((r) => [r.dataset.key, r]));
    const rows = items.map((it) => {
      const k = String(key(it));
      const cs = cells(it);
      const sig = JSON.stringify(cs.map((c) => {
        if (c instanceof Node) return [c.className, c.textContent, Boolean(c.disabled)];
        return c && c.cls ? [c.cls, c.v instanceof Node ? [c.v.className, c.v.textContent] : c.v] : c;
      }));
      const prev = old.get(k);
      if (prev && prev.dataset.sig === sig) return prev;
      return el('tr', { data: { key: k, sig } },
        cs.map((c) => el('td', c && c.cls ? { class: c.cls } : null, c && c.cls ? c.v : c)));
    });
    body.replaceChildren(...rows);
  }
  const n = (v, digits) => ({ cls: 'num', v: num(v, digits || 0) });

  // ---- cluster ----------------------------------------------------------------------
  async function nodeAction(id, action) {
    try {
      await api(`/api/cluster/nodes/${encodeURIComponent(id)}/${action}`, { method: 'POST' });
      banner('');
    } catch (err) {
      banner(explain(err));
    }
    refresh();
  }

  function recordLoads(view) {
    const now = Date.now();
    for (const nd of view.nodes) {
      if (typeof nd.load !== 'number') continue;
      const h = seen.loadHistory[nd.id] || (seen.loadHistory[nd.id] = []);
      h.push([now, nd.load]);
      if (h.length > HISTORY) h.splice(0, h.length - HISTORY);
    }
  }

  /** Load (0–100) per node over the last minutes, drawn by hand: one canvas, no library. */
  function drawChart() {
    const c = $('#load-chart');
    const g = c.getContext('2d');
    const W = c.width;
    const H = c.height;
    const left = 34;
    const bottom = 18;
    g.clearRect(0, 0, W, H);
    g.font = '11px sans-serif';
    g.fillStyle = '#778';
    g.strokeStyle = '#e4e6ea';
    for (const y of [0, 25, 50, 75, 100]) {
      const py = (H - bottom) * (1 - y / 100) + 0.5;
      g.beginPath(); g.moveTo(left, py); g.lineTo(W, py); g.stroke();
      g.fillText(String(y), 4, Math.min(H - bottom, Math.max(10, py + 4)));
    }
    const ids = Object.keys(seen.loadHistory).sort();
    const all = ids.flatMap((id) => seen.loadHistory[id]);
    if (all.length === 0) return;
    const t1 = Math.max(...all.map((p) => p[0]));
    const t0 = t1 - HISTORY * REFRESH_MS;
    g.fillText(`${Math.round((t1 - t0) / 60000)} min`, left, H - 4);
    g.fillText('now', W - 24, H - 4);
    const legend = $('#load-legend');
    legend.replaceChildren();
    ids.forEach((id, i) => {
      const color = COLORS[i % COLORS.length];
      const pts = seen.loadHistory[id];
      g.strokeStyle = color;
      g.lineWidth = 2;
      g.beginPath();
      pts.forEach(([t, load], k) => {
        const x = left + (W - left) * ((t - t0) / (t1 - t0 || 1));
        const y = (H - bottom) * (1 - Math.min(100, Math.max(0, load)) / 100);
        if (k === 0) g.moveTo(x, y); else g.lineTo(x, y);
      });
      g.stroke();
      g.lineWidth = 1;
      const last = pts[pts.length - 1];
      legend.append(el('li', { data: { node: id } },
        el('span', { class: 'swatch', style: { background: color } }), id, ` ${num(last[1], 1)}`));
    });
  }

  async function refreshCluster() {
    if (!seen.node.cluster) {
      // One node: the node itself, its CPU as the load line.
      const me = await api('/api/node');
      const cams = await api('/api/cameras');
      const cpu = me.process && seen.lastCpu
        ? (100 * (me.process.cpu_seconds - seen.lastCpu[1])) / Math.max(0.001, (me.now_ms - seen.lastCpu[0]) / 1000)
        : null;
      if (me.process) seen.lastCpu = [me.now_ms, me.process.cpu_seconds];
      const node = {
        id: me.id, alive: true, scheduler: false, load: cpu, load_cpu: cpu, sessions: me.sessions,
        live: cams.filter((c) => c.state === 'live').map((c) => c.camera), edges: [],
      };
      recordLoads({ nodes: [node] });
      $('#cluster-summary').textContent = `Clustering is off on this node ([cluster] enabled = false): ${me.id} alone, `
        + `its load line the node's CPU (% of a core).`;
      fill($('#nodes'), [node], (nd) => nd.id, (nd) => [
        nd.id, 'yes', '', '', n(nd.load, 1), n(nd.load_cpu, 1), '', '', n(nd.sessions), '',
        nd.live.join(' '), '', '', '', { cls: 'admin-only', v: '' },
      ]);
      drawChart();
      return;
    }
    const view = await api('/api/cluster/nodes');
    recordLoads(view);
    const g = view.gossip;
    $('#cluster-summary').textContent = `Seen from ${view.self_id}; scheduler ${text(view.scheduler) || 'none'} `
      + `(term ${view.term}); gossip ${g.datagrams_sent} datagrams out, ${g.datagrams_received} in, ${g.rejected} rejected.`;
    const admin = canOperate();
    fill($('#nodes'), view.nodes, (nd) => nd.id, (nd) => [
      nd.id, nd.alive ? 'yes' : 'no', nd.scheduler ? 'yes' : '', text(nd.class),
      n(nd.load, 1), n(nd.load_cpu, 1), n(nd.load_mem, 1), n(nd.load_net, 1),
      n(nd.sessions), n(nd.streams), nd.live.join(' '), nd.edges.join(' '),
      nd.draining ? 'yes' : '', typeof nd.report_age_ms === 'number' ? `${nd.report_age_ms} ms` : '',
      {
        cls: 'admin-only',
        v: admin ? (nd.draining
          ? el('button', { type: 'button', class: 'act-undrain', onclick: () => nodeAction(nd.id, 'undrain') }, 'Undrain')
          : el('button', { type: 'button', class: 'act-drain', onclick: () => nodeAction(nd.id, 'drain') }, 'Drain'))
          : '',
      },
    ]);
    drawChart();
  }

  // ---- player -----------------------------------------------------------------------
  let hls = null;
  const video = $('#player');

  function setPlayer(state, error) {
    seen.player.state = state;
    seen.player.error = error || null;
    video.dataset.state = state;
    $('#player-state').textContent = error ? `${state}: ${error}` : state;
  }
  video.addEventListener('playing', () => setPlayer('playing'));
  video.addEventListener('waiting', () => { if (seen.player.state === 'playing') setPlayer('buffering'); });
  video.addEventListener('error', () => setPlayer('error', video.error ? video.error.message : 'media error'));

  // Live video goes over WebRTC (WHEP: a fraction of a second behind the camera), HLS when
  // the browser, the camera's codec or the node cannot; recordings over HLS.
  let pc = null;
  let whepResource = null;
  // A recording playing over WebRTC is steered through its resource (seek, pause, speed)
  // instead of being offered again: {camera, resource}.
  let steering = null;
  // The camera the PTZ controls steer (see showPtz).
  let ptzCamera = null;

  function stopPlayer() {
    steering = null;
    seen.steer = null;
    $('#player-steer').hidden = true;
    ptzCamera = null;
    $('#player-ptz').hidden = true;
    if (hls) { hls.destroy(); hls = null; }
    const conn = pc && pc.close ? pc : null;
    whepClose(conn, whepResource);
    pc = null;
    whepResource = null;
    video.srcObject = null;
    video.removeAttribute('src');
    video.load();
  }

  /** The decoder's counters of the WebRTC video (getStats' inbound-rtp), for tests and the eye. */
  async function webrtcStats() {
    return statsOf(pc);
  }
  async function statsOf(conn) {
    if (!conn || !conn.getStats) return null;
    const report = await conn.getStats();
    let v = null;
    report.forEach((r) => {
      if (r.type === 'inbound-rtp' && r.kind === 'video') {
        v = { framesDecoded: r.framesDecoded || 0, freezeCount: r.freezeCount || 0,
              freezeSecs: r.totalFreezesDuration || 0, framesDropped: r.framesDropped || 0,
              packetsLost: r.packetsLost || 0, width: r.frameWidth || 0,
              jitterBufferMs: r.jitterBufferEmittedCount
                ? Math.round((r.jitterBufferDelay / r.jitterBufferEmittedCount) * 1000) : 0 };
      }
    });
    return v;
  }
  window.vigilWebrtcStats = webrtcStats;

  /**
   * A WHEP viewer: offers to receive video and audio, POSTs the offer to `whep`, applies the
   * answer. `onStream(stream)` once the video track arrives. Returns {conn, resource}.
   */
  async function whepConnect(whep, onStream) {
    if (!window.RTCPeerConnection) throw new Error('this browser has no WebRTC');
    const conn = new RTCPeerConnection();
    const stream = new MediaStream();
    conn.addTransceiver('video', { direction: 'recvonly' });
    conn.addTransceiver('audio', { direction: 'recvonly' });
    conn.ontrack = (e) => {
      stream.addTrack(e.track);
      if (e.track.kind === 'video') onStream(stream);
    };
    try {
      await conn.setLocalDescription(await conn.createOffer());
      // Sent at once, without waiting for this browser's candidates (≈ 120 ms in Chromium):
      // the node is ICE-lite and learns the viewer's address from its checks.
      const r = await fetch(whep, {
        method: 'POST',
        headers: { ...authHeaders(), 'Content-Type': 'application/sdp' },
        body: conn.localDescription.sdp,
      });
      if (r.status !== 201) throw new ApiError(r.status, (await r.text()).trim());
      // Relative to where the answer came from: a playback offer may have been placed on
      // another member (a 307 the fetch followed).
      const resource = new URL(r.headers.get('Location') || '', r.url || location.href).toString();
      // The camera's tracks WebRTC does not carry (AAC audio): named by the node.
      const notCarried = r.headers.get('X-Vigil-Not-Carried');
      await conn.setRemoteDescription({ type: 'answer', sdp: await r.text() });
      return { conn, resource, notCarried };
    } catch (err) {
      conn.close();
      throw err;
    }
  }

  /** Ends a WHEP viewer: the resource deleted first (a closed connection ends the node's peer by itself). */
  function whepClose(conn, resource) {
    if (resource) {
      fetch(resource, { method: 'DELETE', headers: authHeaders(), keepalive: true })
        .catch(() => {})
        .finally(() => { if (conn) conn.close(); });
    } else if (conn) {
      conn.close();
    }
  }

  async function playWebrtc(whep, title, fallback, camera) {
    stopPlayer();
    seen.player = { state: 'loading', src: whep, via: 'webrtc', error: null };
    setPlayer('loading');
    $('#player-title').textContent = `${title} (WebRTC)`;
    $('#player-box').hidden = false;
    try {
      const attempt = {};
      pc = attempt;
      const { conn, resource, notCarried } = await whepConnect(whep, (stream) => {
        video.muted = true;
        video.srcObject = stream;
        video.play().catch((err) => setPlayer('error', String(err.message || err)));
      });
      if (pc !== attempt) { whepClose(conn, resource); return; }
      pc = conn;
      whepResource = resource;
      if (notCarried) {
        seen.player.notCarried = notCarried;
        $('#player-title').textContent = `${title} (WebRTC; not carried: ${notCarried})`;
      }
      if (camera) {
        steering = { camera, resource };
        $('#steer-pause').textContent = 'Pause';
        $('#steer-scale').value = '1';
        $('#steer-state').textContent = '';
        $('#player-steer').hidden = false;
      }
      conn.onconnectionstatechange = () => {
        if (pc === conn && conn.connectionState === 'failed') setPlayer('error', 'WebRTC connection failed');
      };
    } catch (err) {
      // 415: the camera's codec is not carried over WebRTC; anything else: say why, and play
      // over HLS all the same.
      const why = String(err.message || err);
      seen.errorsWebrtc = (seen.errorsWebrtc || []).concat([why]);
      fallback(`WebRTC unavailable (${why}): HLS`);
    }
  }

  function play(src, title, note) {
    stopPlayer();
    seen.player = { state: 'loading', src, via: 'hls', error: null };
    setPlayer('loading');
    $('#player-title').textContent = note ? `${title} — ${note}` : title;
    $('#player-box').hidden = false;
    if (window.Hls && window.Hls.isSupported()) {
      hls = new window.Hls({
        xhrSetup: (xhr) => { const t = token(); if (t) xhr.setRequestHeader('Authorization', `Bearer ${t}`); },
      });
      hls.on(window.Hls.Events.ERROR, (_e, d) => { if (d.fatal) setPlayer('error', `${d.type}: ${d.details}`); });
      hls.on(window.Hls.Events.MANIFEST_PARSED, () => {
        video.play().catch((err) => setPlayer('error', String(err.message || err)));
      });
      hls.loadSource(src);
      hls.attachMedia(video);
    } else if (video.canPlayType('application/vnd.apple.mpegurl') && !token()) {
      video.src = src; // the platform's own HLS (Safari); it cannot send the bearer header
      video.play().catch((err) => setPlayer('error', String(err.message || err)));
    } else {
      setPlayer('error', 'this browser plays neither MSE (hls.js) nor native HLS');
    }
  }
  $('#player-close').addEventListener('click', () => {
    stopPlayer();
    setPlayer('idle');
    $('#player-box').hidden = true;
  });

  const playLiveHls = (cam, note) => play(`/hls/live/${encodeURIComponent(cam)}/index.m3u8`, `live/${cam}`, note);
  const playLive = (cam) => {
    playWebrtc(`/whep/live/${encodeURIComponent(cam)}`, `live/${cam}`, (note) => playLiveHls(cam, note));
    showPtz(cam);
  };

  // PTZ beside the live view, for a camera the registry knows as an ONVIF device (its
  // presets read through the node, which needs the admin token): each arrow moves for 1 s.
  async function ptz(command) {
    const cam = ptzCamera;
    if (!cam) return null;
    const op = typeof command === 'string' ? command : Object.keys(command)[0];
    try {
      const r = await api(`/api/cameras/${encodeURIComponent(cam)}/ptz`, { method: 'POST', body: command });
      seen.ptz = { camera: cam, op, status: 200 };
      $('#ptz-state').textContent = '';
      return r.ptz;
    } catch (err) {
      seen.ptz = { camera: cam, op, status: err.status || 0 };
      $('#ptz-state').textContent = `${op}: ${err.message || err}`;
      return null;
    }
  }
  async function showPtz(cam) {
    ptzCamera = cam;
    const records = (window.vigilRegistry && window.vigilRegistry.records) || [];
    const rec = records.find((r) => r.id === cam);
    if (!rec || !rec.onvif || !isAdmin()) return;
    const answer = await ptz('presets');
    if (ptzCamera !== cam || !answer || !Array.isArray(answer.presets)) return;
    const list = $('#ptz-presets');
    list.replaceChildren(...answer.presets.map((p) => el('option', { value: p.token }, p.name || p.token)));
    $('#ptz-state').textContent = '';
    $('#player-ptz').hidden = false;
  }
  document.querySelectorAll('#player-ptz .ptz-move').forEach((b) => {
    b.addEventListener('click', () => ptz({
      move: {
        pan: Number(b.dataset.pan || 0),
        tilt: Number(b.dataset.tilt || 0),
        zoom: Number(b.dataset.zoom || 0),
        timeout_ms: 1000,
      },
    }));
  });
  $('#ptz-stop').addEventListener('click', () => ptz('stop'));
  $('#ptz-goto').addEventListener('click', () => {
    const preset = $('#ptz-presets').value;
    if (preset) ptz({ goto_preset: { preset } });
  });
  const playRecordingHls = (cam, ms, note) => play(
    `/hls/playback/${encodeURIComponent(cam)}/index.m3u8?start=${encodeURIComponent(iso(ms))}`,
    `playback/${cam} from ${iso(ms)}`,
    note,
  );
  // A click on the timeline starts a WebRTC playback from that moment (the sender RTSP
  // playback uses, from the keyframe at or before it), or seeks the one of that camera
  // already playing; HLS when WebRTC cannot.
  async function playRecording(cam, ms) {
    if (steering && steering.camera === cam) {
      const r = await steer({ op: 'seek', at: iso(ms) });
      if (r) {
        $('#player-title').textContent = `playback/${cam} from ${iso(ms)} (WebRTC)`;
        return;
      }
    }
    await playWebrtc(
      `/whep/playback/${encodeURIComponent(cam)}?start=${encodeURIComponent(iso(ms))}`,
      `playback/${cam} from ${iso(ms)}`,
      (note) => playRecordingHls(cam, ms, note),
      cam,
    );
  }

  /** Sends a control to the playing recording: its answer (scale, paused, position), or null. */
  async function steer(control) {
    if (!steering) return null;
    const s = steering;
    try {
      const r = await fetch(`${s.resource}/control`, {
        method: 'POST',
        headers: { ...authHeaders(), 'Content-Type': 'application/json' },
        body: JSON.stringify(control),
      });
      const text = await r.text();
      if (steering !== s) return null;
      if (r.status !== 200) {
        $('#steer-state').textContent = `${control.op}: ${text.trim()}`;
        if (r.status === 404) steering = null; // the peer is gone: the next click offers anew
        return null;
      }
      const state = JSON.parse(text);
      seen.steer = state;
      $('#steer-pause').textContent = state.paused ? 'Resume' : 'Pause';
      $('#steer-scale').value = String(state.scale);
      $('#steer-state').textContent = state.ended ? 'ended: click the timeline to play again'
        : state.position_ms ? `at ${isoSecs(state.position_ms)}` : '';
      return state;
    } catch (err) {
      $('#steer-state').textContent = `${control.op}: ${err.message || err}`;
      return null;
    }
  }
  $('#steer-pause').addEventListener('click', () => {
    steer({ op: seen.steer && seen.steer.paused ? 'resume' : 'pause' });
  });
  $('#steer-scale').addEventListener('change', (e) => {
    steer({ op: 'scale', scale: Number(e.target.value) });
  });

  // ---- wall -------------------------------------------------------------------------
  // The first page: this node's live cameras playing, each tile its own WHEP viewer, kept
  // across refreshes and closed when the page leaves the wall.
  const wall = { tiles: new Map(), size: 2 };
  window.vigilWall = wall;

  function openTile(cam) {
    const v = el('video', { muted: true, autoplay: true, playsinline: true });
    v.muted = true;
    const label = el('span', { class: 'tile-label' }, cam, ' ', el('span', { class: 'muted tile-state' }, 'loading'));
    const box = el('div', { class: 'tile', data: { camera: cam, state: 'loading' } }, v, label);
    const tile = { box, video: v, conn: null, resource: null, closed: false };
    const state = (s) => { box.dataset.state = s; box.querySelector('.tile-state').textContent = s; };
    v.addEventListener('playing', () => state('playing'));
    whepConnect(`/whep/live/${encodeURIComponent(cam)}`, (stream) => {
      v.srcObject = stream;
      v.play().catch((err) => state(`error: ${err.message || err}`));
    }).then(({ conn, resource }) => {
      if (tile.closed) { whepClose(conn, resource); return; }
      tile.conn = conn;
      tile.resource = resource;
    }).catch((err) => state(`error: ${err.message || err}`));
    tile.stats = () => statsOf(tile.conn);
    return tile;
  }

  function closeTile(t) {
    t.closed = true;
    whepClose(t.conn, t.resource);
    t.box.remove();
  }

  function closeWall() {
    wall.tiles.forEach(closeTile);
    wall.tiles.clear();
  }

  async function refreshWall() {
    const cams = await api('/api/cameras');
    const self = seen.node.id;
    const live = cams
      .filter((c) => c.state === 'live' && (!c.node || c.node === self))
      .slice(0, wall.size * wall.size)
      .map((c) => c.camera);
    for (const [cam, t] of wall.tiles) {
      if (!live.includes(cam)) { closeTile(t); wall.tiles.delete(cam); }
    }
    const grid = $('#wall');
    grid.style.gridTemplateColumns = `repeat(${wall.size}, 1fr)`;
    for (const cam of live) {
      if (!wall.tiles.has(cam)) {
        const t = openTile(cam);
        wall.tiles.set(cam, t);
        grid.append(t.box);
      }
    }
    $('#wall-empty').hidden = live.length > 0;
  }
  $('#wall-size').addEventListener('change', (e) => {
    wall.size = Number(e.target.value) || 2;
    closeWall();
    refresh();
  });

  // ---- cameras ----------------------------------------------------------------------
  async function refreshCameras() {
    const cams = await api('/api/cameras');
    const self = seen.node.id;
    fill($('#cameras'), cams, (c) => c.camera, (c) => {
      const here = c.state === 'live' && c.node === self;
      const button = el('button', {
        type: 'button',
        class: 'act-play',
        disabled: !here,
        title: here ? null : `live HLS is served by the node holding the camera (${text(c.node) || 'none'})`,
        onclick: () => playLive(c.camera),
      }, 'Play');
      return [c.camera, c.source, text(c.node), c.state, n(c.viewers), n(c.bitrate_kbps),
        c.recording ? 'yes' : 'no', c.bound, button];
    });
    return cams;
  }

  // ---- recordings -------------------------------------------------------------------
  function pickExport(cam, ms, endMs) {
    $('#export-camera').value = cam;
    $('#export-start').value = isoSecs(ms);
    $('#export-end').value = isoSecs(Math.min(endMs, ms + 60000));
  }

  function timeline(cam, rec) {
    const ranges = rec.ranges;
    // The chosen window ends at the last recorded instant (a week is too coarse to click).
    const win = Number($('#timeline-window').value) || 0;
    const t1 = ranges[ranges.length - 1].end_ms;
    const t0 = win ? Math.max(ranges[0].start_ms, t1 - win) : ranges[0].start_ms;
    const span = Math.max(1, t1 - t0);
    const shown = ranges.filter((r) => r.end_ms > t0)
      .map((r) => ({ ...r, start_ms: Math.max(r.start_ms, t0) }));
    const bar = el('div', { class: 'timeline', data: { camera: cam, start: t0, end: t1 } },
      shown.map((r) => el('div', {
        class: 'range',
        title: `${r.start} – ${r.end}`,
        style: { left: `${(100 * (r.start_ms - t0)) / span}%`, width: `${(100 * (r.end_ms - r.start_ms)) / span}%` },
      })));
    bar.addEventListener('click', (e) => {
      const box = bar.getBoundingClientRect();
      const ms = Math.round(t0 + (span * (e.clientX - box.left)) / Math.max(1, box.width));
      bar.querySelectorAll('.cursor').forEach((x) => x.remove());
      bar.append(el('div', { class: 'cursor', style: { left: `${(100 * (ms - t0)) / span}%` } }));
      pickExport(cam, ms, t1);
      playRecording(cam, ms);
    });
    const gaps = rec.gaps.length;
    return el('div', { class: 'timeline-row', data: { camera: cam } },
      el('div', null, el('strong', null, cam), ` ${rec.segments} segments, ${(rec.bytes / 1e6).toFixed(1)} MB, `
        + `${ranges.length} range${ranges.length === 1 ? '' : 's'}, ${gaps} gap${gaps === 1 ? '' : 's'}`),
      bar,
      el('div', { class: 'timeline-axis' }, el('span', null, isoSecs(t0)), el('span', null, isoSecs(t1))));
  }

  async function refreshRecordings() {
    const box = $('#timelines');
    if (!seen.node.recording) {
      box.replaceChildren(el('p', { class: 'muted' }, 'Recording is disabled on this node.'));
      return;
    }
    const [status, cams] = await Promise.all([api('/api/recordings'), api('/api/cameras')]);
    const names = [...new Set([...status.map((s) => s.camera), ...cams.filter((c) => c.recording).map((c) => c.camera)])].sort();
    const rows = await Promise.all(names.map(async (cam) => {
      try {
        const rec = await api(`/api/recordings/${encodeURIComponent(cam)}`);
        if (rec.ranges.length === 0) return el('p', { class: 'muted' }, `${cam}: nothing recorded yet`);
        return timeline(cam, rec);
      } catch (err) {
        return el('p', { class: 'muted' }, `${cam}: ${explain(err)}`);
      }
    }));
    box.replaceChildren(...rows);
  }

  $('#timeline-window').addEventListener('change', () => refresh());

  $('#export-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const cam = $('#export-camera').value.trim();
    const q = new URLSearchParams({ start: $('#export-start').value.trim(), end: $('#export-end').value.trim(), download: '1' });
    const url = `/api/export/${encodeURIComponent(cam)}?${q}`;
    const link = $('#export-link');
    const name = `${cam}-${q.get('start')}.mp4`.replace(/[^A-Za-z0-9._-]/g, '_');
    const state = $('#export-state');
    if (!token()) {
      // A plain link: the browser streams the file to disk (reads are open on loopback).
      link.href = url;
      link.download = name;
      link.textContent = 'download';
      link.hidden = false;
      state.textContent = '';
      link.click();
      return;
    }
    // A bearer token cannot ride a link: fetch it, then hand the browser the bytes.
    state.textContent = 'exporting…';
    try {
      const r = await fetch(url, { headers: authHeaders() });
      if (!r.ok) throw new ApiError(r.status, (await r.text()).trim());
      const blob = await r.blob();
      link.href = URL.createObjectURL(blob);
      link.download = name;
      link.textContent = 'download';
      link.hidden = false;
      state.textContent = `${(blob.size / 1e6).toFixed(1)} MB`;
      link.click();
    } catch (err) {
      state.textContent = explain(err);
    }
  });

  // ---- sessions ---------------------------------------------------------------------
  async function refreshSessions() {
    const local = await api('/api/sessions');
    fill($('#sessions'), local, (s) => s.id, (s) => [
      s.id, s.path, s.kind, s.transport, s.client, text(s.node), n(s.moves), text(s.steered_by),
      n(s.current_kbps || s.bitrate_kbps), n(s.duration_secs, 1),
    ]);
    if (!seen.node.cluster) {
      fill($('#cluster-sessions'), [], () => '', () => []);
      $('#cluster-sessions-note').textContent = 'Clustering is off on this node.';
      return;
    }
    const all = await api('/api/cluster/sessions');
    fill($('#cluster-sessions'), all.sessions, (s) => `${s.node}/${s.id}`, (s) => [
      s.node, s.id, s.path, s.kind, s.client, n(s.kbps),
    ]);
    $('#cluster-sessions-note').textContent = all.truncated.length
      ? `Reports list at most 50 sessions per node; more on: ${all.truncated.join(', ')}`
      : 'From the nodes\' gossip reports (a few seconds behind).';
  }

  // ---- scheduler --------------------------------------------------------------------
  async function refreshScheduler() {
    if (!seen.node.cluster) {
      $('#scheduler-summary').textContent = 'Clustering is off on this node: no scheduler.';
      return;
    }
    const s = await api('/api/cluster/scheduler');
    $('#scheduler-summary').textContent = `Seen from ${s.self_id}; scheduler ${text(s.scheduler) || 'none'} `
      + `(term ${s.term}), policy ${s.policy}; decided by ${s.decided_by}.`;
    fill($('#decisions'), s.decisions, (d) => `${d.at}/${d.camera}`, (d) => [
      d.at, d.kind, d.camera, d.time, text(d.node), d.redirected ? 'yes' : '', d.via,
      text(d.decided_by), text(d.asked_by), d.reason,
    ]);
    fill($('#migrations'), s.migrations, (m) => `${m.at_ms}/${text(m.session)}`, (m) => [
      iso(m.at_ms), m.node, n(m.load, 1), n(m.sigma, 2), n(m.p, 3), text(m.session), text(m.camera),
      text(m.to), m.result, n(m.took_ms, 1), m.reason,
    ]);
  }

  // ---- audit ------------------------------------------------------------------------
  const AUDIT_PAGE = 200;
  async function refreshAudit() {
    const q = new URLSearchParams({ limit: String(AUDIT_PAGE), order: 'newest' });
    for (const k of ['camera', 'user', 'kind', 'from', 'to']) {
      const v = $(`#audit-${k}`).value.trim();
      if (v) q.set(k, v);
    }
    let page;
    try {
      page = await api(`/api/audit?${q}`);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        $('#audit-summary').textContent = 'No audit trail on this node (it needs recording on: a storage root).';
        fill($('#audit'), [], () => '', () => []);
        return;
      }
      throw err;
    }
    seen.audit = page.records;
    fill($('#audit'), page.records, (r) => `${r.node}/${r.seq}`, (r) => [
      iso(r.at_ms), r.node, r.kind, r.user, r.client || '', text(r.camera), text(r.protocol),
      typeof r.from_ms === 'number' || typeof r.to_ms === 'number'
        ? `${typeof r.from_ms === 'number' ? iso(r.from_ms) : ''} – ${typeof r.to_ms === 'number' ? iso(r.to_ms) : ''}` : '',
      r.detail && Object.keys(r.detail).length ? JSON.stringify(r.detail) : '',
    ]);
    $('#audit-summary').textContent = `${page.records.length} record(s)`
      + (page.next ? ` — the newest ${AUDIT_PAGE}: narrow the search for older ones.` : '.');
  }
  $('#audit-form').addEventListener('submit', (e) => { e.preventDefault(); refresh(); });

  // ---- tabs and refresh -------------------------------------------------------------
  // The cameras tab also holds the registry's page (cameras.js), given what it shares.
  const kit = { el, api, fill, explain, text, node: () => seen.node, refresh: () => refresh() };
  const TABS = {
    wall: refreshWall,
    cluster: refreshCluster,
    cameras: async () => {
      const cams = await refreshCameras();
      // The registry's editor is the admin's (its routes answer nobody else).
      if (window.vigilRegistryPage && isAdmin()) await window.vigilRegistryPage.refresh(kit, cams);
      else { $('#registry-on').hidden = true; $('#registry-off').hidden = true; }
    },
    recordings: refreshRecordings,
    sessions: refreshSessions,
    scheduler: refreshScheduler,
    audit: refreshAudit,
  };
  const tab = () => {
    const t = location.hash.replace(/^#/, '');
    return Object.hasOwn(TABS, t) ? t : 'wall';
  };

  let running = false;
  async function refresh() {
    if (running) return;
    running = true;
    try {
      if (!seen.node) {
        seen.node = await api('/api/node');
        $('#node-id').textContent = `node ${seen.node.id}`;
        if (seen.node.console) {
          REFRESH_MS = seen.node.console.refresh_ms;
          HISTORY = seen.node.console.history;
          schedule();
        }
      }
      const current = tab();
      // The load chart keeps its history whichever tab is shown.
      if (current !== 'cluster' && seen.node.cluster && canOperate()) recordLoads(await api('/api/cluster/nodes'));
      await TABS[current]();
      banner('');
    } catch (err) {
      banner(explain(err));
    } finally {
      seen.refreshes += 1;
      running = false;
    }
  }

  function showTab() {
    const current = tab();
    if (current !== 'wall') closeWall();
    document.querySelectorAll('.tab').forEach((s) => { s.hidden = s.id !== `tab-${current}`; });
    document.querySelectorAll('#tabs a').forEach((a) => a.classList.toggle('active', a.dataset.tab === current));
    refresh();
  }
  window.addEventListener('hashchange', showTab);

  // Recordings change slowly and their timelines take clicks: refreshed on entry and about
  // every 15 s.
  let timer = null;
  let ticks = 0;
  function schedule() {
    clearInterval(timer);
    timer = setInterval(() => {
      ticks += 1;
      // Recordings and the audit trail read storage: every 15 s, not every period.
      const slow = tab() === 'recordings' || tab() === 'audit';
      if (!slow || ticks % Math.max(1, Math.round(15000 / REFRESH_MS)) === 0) refresh();
    }, REFRESH_MS);
  }

  showAuth();
  schedule();
  whoami().then(showTab);
})();
