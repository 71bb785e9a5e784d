// The built-in chat page: streams /v1/chat/completions from this same server and shows the
// reasoning (analysis channel) apart from the answer. Served by src/server/webui.c; no build step,
// no dependencies. Model output is only ever set as textContent, never parsed as HTML.
'use strict';

const KEY_STORE = 'gptoss.apiKey';
const $ = (id) => document.getElementById(id);
let apiKey = localStorage.getItem(KEY_STORE) || '';
let model = null;
let history = []; // the conversation as the API takes it: {role, content}
let controller = null; // the AbortController of the request in flight

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

function askKey(why) {
  $('key-form').hidden = false;
  $('key-error').textContent = why || '';
  $('key').focus();
}

// GET /v1/models both checks the key and names the model the requests must carry.
async function connect() {
  let r;
  try {
    r = await fetch('/v1/models', { headers: headers() });
  } catch (e) {
    $('model').textContent = `cannot reach the server: ${e.message}`;
    return false;
  }
  if (r.status === 401) {
    askKey(apiKey ? 'the server refused this key' : '');
    return false;
  }
  if (r.status === 503) { // still loading the model: try again shortly
    $('model').textContent = 'the model is loading…';
    setTimeout(connect, 1000);
    return false;
  }
  if (!r.ok) {
    $('model').textContent = `GET /v1/models: HTTP ${r.status}`;
    return false;
  }
  const body = await r.json();
  model = body.data[0].id;
  $('model').textContent = model;
  $('key-form').hidden = true;
  $('forget-key').hidden = !apiKey;
  return true;
}

// Server-sent events from a fetch body: yields each event's data (the lines after "data:").
async function* sseData(body) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(l.startsWith('data: ') ? 6 : 5)).join('\n');
      if (data) yield data;
    }
  }
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function addMessage(role, text) {
  const m = el('div', `msg ${role}`);
  m.append(el('div', 'who', role), el('div', 'text answer', text));
  $('log').append(m);
  m.scrollIntoView({ block: 'end' });
  return m;
}

// An assistant message: a collapsible reasoning block (open while it streams) above the answer.
function addAssistant() {
  const m = el('div', 'msg assistant');
  m.dataset.state = 'streaming';
  const details = el('details', 'reasoning');
  details.open = true;
  details.hidden = true;
  details.append(el('summary', '', 'reasoning'), el('div', 'text reasoning-text'));
  m.append(el('div', 'who', 'assistant'), details, el('div', 'text answer'));
  $('log').append(m);
  return {
    m,
    reasoning(t) { details.hidden = false; details.querySelector('.reasoning-text').textContent += t; },
    answer(t) {
      if (details.open && !details.dataset.touched) details.open = false; // the answer takes over
      m.querySelector('.answer').textContent += t;
    },
    note(t, cls) { m.append(el('div', cls || 'who', t)); },
    done(state) { m.dataset.state = state; m.scrollIntoView({ block: 'end' }); },
    details,
  };
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

// Tokens per second since the request went out, so the figure holds however the server groups
// tokens into chunks (with a --stream-interval, or text held back until it is known not to be a
// stop string, many tokens can arrive at once; a rate from the first chunk on would be nonsense).
// While streaming, one chunk is counted as one token (what the server sends at its default
// --stream-interval 1); the usage chunk at the end replaces the estimate with completion_tokens.
function showStats(tStart, tFirst, tokens, exact) {
  const seconds = (performance.now() - tStart) / 1000;
  const parts = [];
  if (tFirst !== null) parts.push(`first token ${Math.round(tFirst - tStart)} ms`);
  parts.push(`${exact ? '' : '≈'}${tokens} tokens`);
  if (seconds > 0) parts.push(`${(tokens / seconds).toFixed(1)} tokens/s`);
  $('stats').textContent = parts.join(' · ');
}

async function send(text) {
  if (!model && !(await connect())) return;
  const conversation = history; // "new chat" during the stream must not receive this answer
  conversation.push({ role: 'user', content: text });
  addMessage('user', text);
  const view = addAssistant();
  view.details.addEventListener('toggle', () => { view.details.dataset.touched = '1'; }, { once: true });
  controller = new AbortController();
  setBusy(true);
  const maxTokens = parseInt($('max-tokens').value, 10); // blank: the server's limit (the context)
  const tStart = performance.now();
  let tFirst = null, chunks = 0, answer = '', state = 'done';
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: headers(),
      signal: controller.signal,
      body: JSON.stringify({
        model, messages: conversation, stream: true, reasoning_effort: $('effort').value,
        stream_options: { include_usage: true },
        ...(maxTokens > 0 ? { max_tokens: maxTokens } : {}),
      }),
    });
    if (!r.ok) {
      const e = await r.json().catch(() => null);
      if (r.status === 401) askKey('the server refused this key');
      throw new Error(e?.error?.message || `HTTP ${r.status}`);
    }
    for await (const data of sseData(r.body)) {
      if (data === '[DONE]') break;
      const ev = JSON.parse(data);
      if (ev.error) throw new Error(ev.error.message);
      if (ev.usage) {
        showStats(tStart, tFirst, ev.usage.completion_tokens, true);
        continue;
      }
      const d = ev.choices?.[0]?.delta;
      if (!d) continue;
      // The server sends the reasoning under both names (vLLM renamed it): take one.
      const reasoning = d.reasoning_content ?? d.reasoning;
      if (reasoning) view.reasoning(reasoning);
      if (d.content) { answer += d.content; view.answer(d.content); }
      if (reasoning || d.content) {
        chunks++;
        if (tFirst === null) tFirst = performance.now();
        showStats(tStart, tFirst, chunks, false);
      }
      if (ev.choices[0].finish_reason) view.note(`finish: ${ev.choices[0].finish_reason}`);
    }
  } catch (e) {
    state = e.name === 'AbortError' ? 'stopped' : 'error';
    view.note(state === 'stopped' ? 'stopped' : e.message, state === 'stopped' ? 'who' : 'error');
  } finally {
    controller = null;
    setBusy(false);
  }
  // The reasoning stays out of the history: harmony drops earlier turns' analysis anyway.
  if (answer) conversation.push({ role: 'assistant', content: answer });
  view.done(state);
}

$('chat-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = $('prompt').value.trim();
  if (!text || controller) return;
  $('prompt').value = '';
  send(text);
});
$('prompt').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $('chat-form').requestSubmit();
  }
});
$('stop').addEventListener('click', () => controller?.abort());
$('new-chat').addEventListener('click', () => {
  controller?.abort();
  history = [];
  $('log').replaceChildren();
  $('stats').textContent = '';
});
$('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  apiKey = $('key').value.trim();
  localStorage.setItem(KEY_STORE, apiKey);
  connect();
});
$('forget-key').addEventListener('click', () => {
  apiKey = '';
  localStorage.removeItem(KEY_STORE);
  model = null;
  $('forget-key').hidden = true;
  connect();
});
connect();
