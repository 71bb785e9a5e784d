// Opens N idle connections to 127.0.0.1:PORT and holds them for HOLD seconds (tests/test_server_fds.sh):
// prints "held K" once every connect has settled. Connections the server has not accepted yet sit in
// its listen queue; the kernel completes their handshake all the same.
import net from 'node:net';

const [port, n, hold] = process.argv.slice(2).map(Number);
const socks = [];
let settled = 0, ok = 0;
for (let i = 0; i < n; i++) {
  const s = net.connect(port, '127.0.0.1');
  s.on('connect', () => { ok++; if (++settled === n) console.log(`held ${ok}`); });
  s.on('error', () => { if (++settled === n) console.log(`held ${ok}`); });
  socks.push(s);
}
setTimeout(() => { for (const s of socks) s.destroy(); process.exit(0); }, hold * 1000);
