#!/usr/bin/env node
// Compares gptoss's token ids with tiktoken's o200k_harmony on a file.
//
//   node compare_tokenizer.js ordinary|specials TEXT_FILE OUR_IDS_FILE [SECTIONS_JSON]
//
// TEXT_FILE is read as bytes and decoded the way Node decodes UTF-8 (ill-formed parts → U+FFFD), which
// is what tiktoken, a string API, would be given. OUR_IDS_FILE holds `gptoss tokenize` output (ids
// separated by commas). "ordinary" compares with encode_ordinary, "specials" with encode(text, "all").
// Every differing region is found (the two id streams are re-aligned at the next common byte
// boundary); the first few are printed with the text around them and the corpus section they are in.
// SHOW_ALL=1 in the environment prints every region. Exit status 0 when identical, 1 otherwise.
'use strict';
const fs = require('fs');
const { harmonyEncoding } = require('./o200k_harmony');

function main() {
  const [mode, textFile, idsFile, sectionsFile] = process.argv.slice(2);
  if (!['ordinary', 'specials'].includes(mode) || !idsFile) {
    console.error('usage: node compare_tokenizer.js ordinary|specials TEXT_FILE OUR_IDS_FILE [SECTIONS_JSON]');
    process.exit(2);
  }
  const bytes = fs.readFileSync(textFile);
  const text = bytes.toString('utf8');
  const enc = harmonyEncoding();
  const t0 = process.hrtime.bigint();
  const ref = mode === 'ordinary' ? enc.encode_ordinary(text) : enc.encode(text, 'all');
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const oursText = fs.readFileSync(idsFile, 'utf8').trim();
  const ours = oursText === '' ? new Uint32Array(0) : Uint32Array.from(oursText.split(/[,\s]+/), Number);
  const sections = sectionsFile ? JSON.parse(fs.readFileSync(sectionsFile, 'utf8')) : [];

  const lenCache = new Map();
  const tokLen = (id) => {
    let n = lenCache.get(id);
    if (n === undefined) {
      n = enc.decode_single_token_bytes(id).length;
      lenCache.set(id, n);
    }
    return n;
  };
  const sectionAt = (off) => {
    let name = '';
    for (const s of sections) if (s.offset <= off) name = s.name;
    return name;
  };
  const show = (ids) =>
    Array.from(ids, (id) => `${id}:${JSON.stringify(Buffer.from(enc.decode_single_token_bytes(id)).toString('utf8'))}`).join(' ');

  // The byte offset of each token start in each stream; aligned tokens at equal offsets are compared.
  // The reference works on the repaired text, whose bytes differ from the file's where it was invalid;
  // our ids decode to the repaired text too, so offsets are in the repaired text's bytes.
  const repaired = Buffer.from(text);
  let i = 0, j = 0, pi = 0, pj = 0, regions = 0, shown = 0;
  while (i < ref.length || j < ours.length) {
    if (i < ref.length && j < ours.length && pi === pj && ref[i] === ours[j]) {
      pi += tokLen(ref[i++]);
      pj += tokLen(ours[j++]);
      continue;
    }
    // A differing region: advance whichever stream is behind until both reach a common boundary.
    const i0 = i, j0 = j, start = Math.min(pi, pj);
    do {
      if ((pi <= pj && i < ref.length) || j >= ours.length) pi += tokLen(ref[i++]);
      else pj += tokLen(ours[j++]);
    } while ((pi !== pj || (i < ref.length) !== (j < ours.length)) && (i < ref.length || j < ours.length));
    regions++;
    if (shown++ < (+process.env.SHOW_ALL ? 1e9 : 8)) {
      const ctx = repaired.subarray(Math.max(0, start - 40), Math.min(repaired.length, Math.max(pi, pj) + 40)).toString('utf8');
      console.log(`MISMATCH at byte ${start} (token ${i0} of tiktoken, ${j0} of ours), section "${sectionAt(start)}"`);
      console.log(`  text     : ${JSON.stringify(ctx)}`);
      console.log(`  tiktoken : ${show(ref.subarray(Math.max(0, i0 - 2), i + 2))}`);
      console.log(`  gptoss   : ${show(ours.subarray(Math.max(0, j0 - 2), j + 2))}`);
    }
  }
  const mb = repaired.length / 1e6;
  console.log(`${mode}: ${textFile}: ${mb.toFixed(2)} MB, ${ref.length} tiktoken tokens (${(mb / secs).toFixed(2)} MB/s), ` +
    `${ours.length} ours; ${regions === 0 ? 'identical' : regions + ' differing regions'}`);
  process.exit(regions === 0 ? 0 : 1);
}

main();
