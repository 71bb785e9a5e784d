// A tiny OpenAI-compatible streaming server for the benchmark client's tests (node built-ins only).
//
// POST /v1/completions and /v1/chat/completions stream max_tokens (or max_completion_tokens) chunks:
// the first after --ttft-ms, then one every --itl-ms on a fixed schedule (start + ttft + k * itl, so
// timer jitter does not accumulate), --tokens-per-chunk tokens per chunk (a server's stream
// interval), then a usage chunk (unless --no-usage) and [DONE]. It checks what the benchmark must
// send — token-id prompts in the ordinary range, ignore_eos, stream with include_usage — and answers
// 400 otherwise, so a wrong request shows up as a failed request in the test. --fail-every N answers
// every Nth request with 500. --close-every N closes the connection after every Nth response
// (Connection: close); --drop-every N closes the connection silently right after every Nth response,
// keep-alive advertised: the keep-alive race a client must survive (it has already sent its next
// request on that connection, and must resend it on a fresh one).
//
// GET /v1/models lists "mock-model". GET /stats returns what it saw: every request's prompt length
// and max_tokens in arrival order, the TCP connections opened, the most streams in flight at once.
// Prints "listening PORT" once ready (port 0 picks a free one).
'use strict';
const http = require('http');

const opt = {port: 0, ttftMs: 20, itlMs: 5, tokensPerChunk: 1, usage: true, failEvery: 0, closeEvery: 0, dropEvery: 0};
for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i], v = process.argv[i + 1];
    if (a === '--port') opt.port = +v, i++;
    else if (a === '--ttft-ms') opt.ttftMs = +v, i++;
    else if (a === '--itl-ms') opt.itlMs = +v, i++;
    else if (a === '--tokens-per-chunk') opt.tokensPerChunk = +v, i++;
    else if (a === '--no-usage') opt.usage = false;
    else if (a === '--fail-every') opt.failEvery = +v, i++;
    else if (a === '--close-every') opt.closeEvery = +v, i++;
    else if (a === '--drop-every') opt.dropEvery = +v, i++;
    else throw new Error('unknown option ' + a);
}

const stats = {requests: [], connections: 0, inflight: 0, maxInflight: 0, errors: []};

function bad(res, msg) {
    stats.errors.push(msg);
    res.writeHead(400, {'Content-Type': 'application/json'});
    res.end(JSON.stringify({error: {message: msg, type: 'BadRequestError', code: 400}}));
}

function validate(body, chat) {
    if (body.stream !== true) return 'stream must be true';
    if (!body.stream_options || body.stream_options.include_usage !== true) return 'stream_options.include_usage must be true';
    if (body.ignore_eos !== true) return 'ignore_eos must be true';
    if (typeof body.model !== 'string' || !body.model) return 'model missing';
    const max = chat ? body.max_completion_tokens : body.max_tokens;
    if (!Number.isInteger(max) || max < 1) return 'max tokens missing';
    if (chat) {
        const m = body.messages;
        if (!Array.isArray(m) || m.length !== 1 || m[0].role !== 'user' || typeof m[0].content !== 'string' || !m[0].content)
            return 'messages must be one user message with text';
    } else {
        const p = body.prompt;
        if (!Array.isArray(p) || p.length === 0) return 'prompt must be a non-empty array of token ids';
        for (const id of p)
            if (!Number.isInteger(id) || id < 0 || id >= 199998) return 'prompt id out of the ordinary range: ' + id;
    }
    return null;
}

function stream(req, res, body, chat) {
    const n = chat ? body.max_completion_tokens : body.max_tokens;
    const promptLen = chat ? body.messages[0].content.split(' ').length : body.prompt.length;
    stats.requests.push({prompt_len: promptLen, max_tokens: n});
    if (opt.failEvery > 0 && stats.requests.length % opt.failEvery === 0) {
        res.writeHead(500, {'Content-Type': 'application/json'});
        res.end(JSON.stringify({error: {message: 'injected failure', type: 'InternalServerError', code: 500}}));
        return;
    }
    const headers = {'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache'};
    if (opt.closeEvery > 0 && stats.requests.length % opt.closeEvery === 0) headers.Connection = 'close';
    res.writeHead(200, headers);
    stats.inflight++;
    stats.maxInflight = Math.max(stats.maxInflight, stats.inflight);
    const id = 'cmpl-' + Math.random().toString(36).slice(2);
    const t0 = Date.now();
    let sent = 0, closed = false;
    res.on('close', () => { if (!closed) { closed = true; stats.inflight--; } });
    const chunk = (k, last) => {
        // The first chunk carries a NUL character ("\u0000" in JSON): a byte-0 token does that in real servers.
        const text = (sent === k ? '\u0000' : '') + ' tok'.repeat(k);
        const choice = chat ? {index: 0, delta: {content: text}, logprobs: null, finish_reason: last ? 'length' : null}
                            : {index: 0, text, logprobs: null, finish_reason: last ? 'length' : null};
        return {id, object: chat ? 'chat.completion.chunk' : 'text_completion', created: 0, model: body.model,
                choices: [choice], usage: null};
    };
    const next = () => {
        if (closed) return;
        const k = Math.min(opt.tokensPerChunk, n - sent);
        sent += k;
        res.write('data: ' + JSON.stringify(chunk(k, sent === n)) + '\n\n');
        if (sent < n) {
            // The token after this chunk's last one is due at t0 + ttft + (sent + k' - 1) * itl.
            const due = t0 + opt.ttftMs + (Math.min(sent + opt.tokensPerChunk, n) - 1) * opt.itlMs;
            setTimeout(next, Math.max(0, due - Date.now()));
            return;
        }
        if (opt.usage)
            res.write('data: ' + JSON.stringify({id, object: chat ? 'chat.completion.chunk' : 'text_completion', created: 0,
                model: body.model, choices: [], usage: {prompt_tokens: promptLen, completion_tokens: n, total_tokens: promptLen + n}}) + '\n\n');
        res.write('data: [DONE]\n\n');
        closed = true;
        stats.inflight--;
        // The socket is detached from res once the response is done: keep it for the drop.
        const nth = stats.requests.length, sock = res.socket;
        res.end(() => { if (opt.dropEvery > 0 && nth % opt.dropEvery === 0) sock.destroy(); });
    };
    const first = t0 + opt.ttftMs + (Math.min(opt.tokensPerChunk, n) - 1) * opt.itlMs;
    setTimeout(next, Math.max(0, first - Date.now()));
}

const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') {
        res.writeHead(200, {'Content-Type': 'application/json'});
        res.end(JSON.stringify({object: 'list', data: [{id: 'mock-model', object: 'model', root: 'mock-model'}]}));
        return;
    }
    if (req.method === 'GET' && req.url === '/stats') {
        res.writeHead(200, {'Content-Type': 'application/json'});
        res.end(JSON.stringify(stats));
        return;
    }
    const chat = req.url === '/v1/chat/completions';
    if (req.method !== 'POST' || (req.url !== '/v1/completions' && !chat)) {
        res.writeHead(404);
        res.end();
        return;
    }
    let data = '';
    req.setEncoding('utf8');
    req.on('data', (d) => { data += d; });
    req.on('end', () => {
        let body;
        try { body = JSON.parse(data); } catch (e) { return bad(res, 'invalid JSON: ' + e.message); }
        const err = validate(body, chat);
        if (err) return bad(res, err);
        stream(req, res, body, chat);
    });
});
server.on('connection', () => { stats.connections++; });
server.keepAliveTimeout = 120000;
server.headersTimeout = 121000;
server.listen(opt.port, '127.0.0.1', () => {
    console.log('listening ' + server.address().port);
});
process.on('SIGTERM', () => process.exit(0));
