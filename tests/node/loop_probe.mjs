// What the loop-stall tests (server_linear.mjs, server_stall.mjs) measure while a request runs:
// the server's own worst loop callback, and /health's worst wait on fresh connections.

// The longest CPU time one callback held an event loop, in seconds (gptoss:event_loop_max_callback_seconds,
// the maximum over the loops); NaN when /metrics has no such family.
export async function maxCallbackSeconds(base) {
  const m = await (await fetch(`${base}/metrics`)).text();
  const v = [...m.matchAll(/^gptoss:event_loop_max_callback_seconds\{[^}]*\} ([0-9.e+-]+)$/gm)];
  return v.length ? Math.max(...v.map((x) => Number(x[1]))) : NaN;
}

// Probes /health every 50 ms on a fresh connection until stop() is called; stop() resolves to the
// worst wait in seconds.
export function probeHealth(base) {
  let worst = 0, stopped = false;
  const running = (async () => {
    while (!stopped) {
      const t = performance.now();
      const r = await fetch(`${base}/health`, { headers: { Connection: 'close' } });
      await r.arrayBuffer();
      worst = Math.max(worst, (performance.now() - t) / 1000);
      await new Promise((res) => setTimeout(res, 50));
    }
  })();
  return { stop: async () => { stopped = true; await running; return worst; } };
}
