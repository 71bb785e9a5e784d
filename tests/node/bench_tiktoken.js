#!/usr/bin/env node
// Encoding speed of the reference tokenizers in Node, measured like `gptoss bench-tokenizer`:
// single-threaded encode_ordinary, one warm-up run, then N timed runs; MB/s of UTF-8 input, best and
// median. tiktoken is OpenAI's Rust core compiled to WASM; js-tiktoken (with --js) is pure JavaScript.
//
//   node bench_tiktoken.js [--repeat N] [--js] [--pathological] [FILE...]
//
// --pathological runs the generated worst cases of cmd_bench_tokenizer.c (same generators, same bytes) at
// growing sizes (4 KiB ... 1 MiB, x4), and stops growing a case when the next size would take longer
// than --cap seconds (default 20) if it grew quadratically, as tiktoken's merge loop does in the length
// of a piece.
'use strict';
const fs = require('fs');
const path = require('path');
const { harmonyEncoding } = require('./o200k_harmony');

function args() {
  const a = { repeat: 5, js: false, patho: false, cap: 20, files: [] };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i++) {
    if (v[i] === '--repeat') a.repeat = +v[++i];
    else if (v[i] === '--cap') a.cap = +v[++i];
    else if (v[i] === '--js') a.js = true;
    else if (v[i] === '--pathological') a.patho = true;
    else a.files.push(v[i]);
  }
  return a;
}

// The installed version of a package (its package.json is not exported, so read it from disk).
function version(pkg) {
  return JSON.parse(fs.readFileSync(path.join(__dirname, 'node_modules', pkg, 'package.json'), 'utf8')).version;
}

function time(f) {
  const t0 = process.hrtime.bigint();
  const r = f();
  return [Number(process.hrtime.bigint() - t0) / 1e9, r];
}

function measure(name, encode, text, repeat, cap = Infinity) {
  const bytes = Buffer.byteLength(text);
  const [warm, ids] = time(() => encode(text));
  const secs = [];
  if (warm < cap) for (let r = 0; r < repeat; r++) secs.push(time(() => encode(text))[0]);
  else secs.push(warm); // too slow to repeat: the warm-up run is the measurement
  secs.sort((x, y) => x - y);
  const mb = bytes / 1e6;
  const med = secs[secs.length >> 1];
  console.log(`${name.padEnd(34)} ${String(bytes).padStart(10)} bytes ${String(ids.length).padStart(9)} tokens  ` +
    `best ${(mb / secs[0]).toFixed(2).padStart(8)} MB/s  median ${(mb / med).toFixed(2).padStart(8)} MB/s  (${med.toFixed(4)} s)`);
  return med;
}

// The generators of src/cli/cmd_bench_tokenizer.c, byte for byte (31-bit LCG, seed 12345).
function gen(kind, n) {
  const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  let x = 12345;
  const rand = () => {
    x = (Math.imul(x, 1103515245) + 12345) & 0x7fffffff;
    return x >>> 16;
  };
  if (kind === 0) return 'a'.repeat(n);
  if (kind === 1) return ' '.repeat(n);
  if (kind === 4) return '\u4e2d'.repeat(Math.floor(n / 3));
  const out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = kind === 2 ? String.fromCharCode(97 + (rand() % 26)) : B64[rand() % 64];
  return out.join('');
}
const GEN_NAME = ['a*N', 'space*N', 'random a-z (no spaces)', 'random base64', 'U+4E2D*N'];

function main() {
  const a = args();
  const [loadSecs, enc] = time(() => harmonyEncoding());
  console.log(`tiktoken ${version('tiktoken')} loaded in ${loadSecs.toFixed(3)} s; ${a.repeat} timed runs each`);
  const encoders = [['tiktoken', (s) => enc.encode_ordinary(s)]];
  if (a.js) {
    const js = require('js-tiktoken');
    const [jsLoad, je] = time(() => js.getEncoding('o200k_base'));
    console.log(`js-tiktoken ${version('js-tiktoken')} loaded in ${jsLoad.toFixed(3)} s`);
    encoders.push(['js-tiktoken', (s) => je.encode(s, [], [])]);
  }
  for (const f of a.files) {
    const text = fs.readFileSync(f, 'utf8');
    for (const [ename, encode] of encoders) measure(`${path.basename(f)} (${ename})`, encode, text, a.repeat);
  }
  if (a.patho) {
    for (let k = 0; k < 5; k++) {
      for (let n = 1 << 12; n <= 1 << 20; n <<= 2) {
        const med = measure(`${GEN_NAME[k]} N=${n}`, encoders[0][1], gen(k, n), a.repeat, a.cap);
        if (n < 1 << 20 && med * 16 > a.cap) {
          console.log(`${''.padEnd(34)} (stopping: at 4x the size a quadratic run would take ~${(med * 16).toFixed(0)} s)`);
          break;
        }
      }
    }
  }
  enc.free();
}

main();
