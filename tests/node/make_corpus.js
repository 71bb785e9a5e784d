#!/usr/bin/env node
// Assembles the tokenizer reference corpus (about 12 MB) from text found on a Debian machine set up by
// scripts/setup.sh, plus generated text for what such a machine does not have. Deterministic: the same
// machine gives the same bytes (files are read in sorted order; generated text uses a seeded PRNG).
//
//   node make_corpus.js OUTDIR
//
// writes OUTDIR/corpus.txt (valid UTF-8; the main comparison and the round-trip check),
// OUTDIR/corpus.sections.json (where each section starts, to name the section of a mismatch),
// OUTDIR/specials.txt (text with special token names, for encode-with-specials) and
// OUTDIR/invalid.bin (ill-formed UTF-8, compared after the usual decoding with replacement).
//
// A source that is missing on a machine is skipped (its budget is filled by nothing); the generated
// sections alone cover every script, emoji, whitespace, digit and contraction case the test is after.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

// ---------------------------------------------------------------------------------------------------
// Helpers

// mulberry32: a small PRNG with integer-only arithmetic, so every Node version gives the same stream.
function rng(seed) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  next.int = (n) => Math.floor(next() * n);
  next.pick = (a) => a[Math.floor(next() * a.length)];
  return next;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
function asText(buf) {
  try {
    return utf8.decode(buf);
  } catch {
    return null; // not UTF-8 (a Latin-1 man page, a binary): skipped
  }
}

// Files under dir whose name passes keep(), depth-first in sorted order.
function walk(dir, keep, out = []) {
  let names;
  try {
    names = fs.readdirSync(dir).sort();
  } catch {
    return out;
  }
  for (const n of names) {
    const p = path.join(dir, n);
    let st;
    try {
      st = fs.lstatSync(p);
    } catch {
      continue;
    }
    if (st.isDirectory()) walk(p, keep, out);
    else if (st.isFile() && keep(p)) out.push(p);
  }
  return out;
}

function readMaybeGz(p) {
  try {
    const b = fs.readFileSync(p);
    return p.endsWith('.gz') ? zlib.gunzipSync(b) : b;
  } catch {
    return null;
  }
}

// Up to budget bytes of text from files, at most perFile bytes of each (cut at a line end).
function fromFiles(files, budget, perFile) {
  const parts = [];
  let used = 0;
  for (const f of files) {
    if (used >= budget) break;
    const b = readMaybeGz(f);
    if (!b) continue;
    let t = asText(b);
    if (t === null || t.length === 0) continue;
    t = cutAtLine(t, Math.min(perFile, budget - used));
    parts.push(t);
    used += Buffer.byteLength(t);
  }
  return parts.join('\n');
}

// A prefix of t of at most n UTF-8 bytes, ending at a line end when there is one.
function cutAtLine(t, n) {
  if (Buffer.byteLength(t) <= n) return t;
  let s = Buffer.from(t).subarray(0, n).toString('utf8');
  if (s.endsWith('\ufffd')) s = s.slice(0, -1); // a character cut in two
  const nl = s.lastIndexOf('\n');
  return nl > n / 2 ? s.slice(0, nl + 1) : s;
}

// ---------------------------------------------------------------------------------------------------
// Text found on the machine

// gettext catalogues: the translated strings of every program, in ~190 languages and many scripts.
function moStrings(file) {
  const b = fs.readFileSync(file);
  if (b.length < 28) return [];
  const magic = b.readUInt32LE(0);
  const rd = magic === 0x950412de ? (o) => b.readUInt32LE(o) : magic === 0xde120495 ? (o) => b.readUInt32BE(o) : null;
  if (!rd) return [];
  const n = rd(8), tt = rd(16), out = [];
  for (let i = 0; i < n; i++) {
    const len = rd(tt + 8 * i), off = rd(tt + 8 * i + 4);
    if (off + len > b.length) break;
    const s = asText(b.subarray(off, off + len));
    if (s && !s.startsWith('Project-Id-Version')) out.push(s.replace(/\0/g, '\n'));
  }
  return out;
}

function gettext(perLanguage) {
  const root = '/usr/share/locale';
  let langs;
  try {
    langs = fs.readdirSync(root).sort();
  } catch {
    return '';
  }
  const parts = [];
  for (const lang of langs) {
    let used = 0;
    for (const f of walk(path.join(root, lang), (p) => p.endsWith('.mo'))) {
      if (used >= perLanguage) break;
      for (const s of moStrings(f)) {
        if (used >= perLanguage) break;
        parts.push(s);
        used += Buffer.byteLength(s) + 1;
      }
    }
  }
  return parts.join('\n');
}

function manPages(perLanguage, english) {
  const root = '/usr/share/man';
  let dirs;
  try {
    dirs = fs.readdirSync(root).sort();
  } catch {
    return ['', ''];
  }
  const foreign = [];
  for (const d of dirs.filter((d) => !d.startsWith('man'))) {
    foreign.push(fromFiles(walk(path.join(root, d), (p) => p.endsWith('.gz')), perLanguage, 24 << 10));
  }
  const en = fromFiles(walk(root, (p) => /\/man\/man[1-8]\//.test(p) && p.endsWith('.gz')), english, 12 << 10);
  return [foreign.join('\n'), en];
}

// ---------------------------------------------------------------------------------------------------
// Generated text

// Names of languages, regions, scripts and currencies, month and day names and numbers, each written
// in ~100 locales by Node's ICU: real words in scripts the machine may not have text in.
function intlText(budget) {
  const locales = ['af', 'am', 'ar', 'as', 'az', 'be', 'bg', 'bn', 'bo', 'bs', 'ca', 'chr', 'cs', 'cy', 'da', 'de', 'dz',
    'el', 'en', 'eo', 'es', 'et', 'eu', 'fa', 'fi', 'fil', 'fr', 'ga', 'gd', 'gl', 'gu', 'ha', 'he', 'hi', 'hr', 'hu',
    'hy', 'id', 'ig', 'is', 'it', 'ja', 'jv', 'ka', 'kk', 'km', 'kn', 'ko', 'ky', 'lo', 'lt', 'lv', 'mk', 'ml', 'mn',
    'mr', 'ms', 'my', 'ne', 'nl', 'no', 'or', 'pa', 'pl', 'ps', 'pt', 'ro', 'ru', 'sd', 'si', 'sk', 'sl', 'so', 'sq',
    'sr', 'sv', 'sw', 'ta', 'te', 'tg', 'th', 'ti', 'tk', 'tr', 'ug', 'uk', 'ur', 'uz', 'vi', 'yi', 'yo', 'yue', 'zh',
    'zh-Hant', 'zu', 'ar-EG', 'fa-AF', 'hi-Latn', 'sr-Latn', 'mni', 'sat', 'ks', 'ckb'];
  const langs = ['ar', 'bn', 'de', 'el', 'en', 'es', 'fr', 'he', 'hi', 'hy', 'ja', 'ka', 'ko', 'ru', 'ta', 'th', 'zh', 'am',
    'my', 'km', 'si', 'bo', 'chr', 'iu', 'dv', 'sat', 'mni'];
  const regions = ['AE', 'BR', 'CN', 'DE', 'EG', 'ET', 'FR', 'GR', 'IL', 'IN', 'IR', 'JP', 'KR', 'MM', 'NP', 'RU', 'TH', 'US', 'VN', 'ZA'];
  const scripts = ['Arab', 'Armn', 'Beng', 'Cher', 'Cyrl', 'Deva', 'Ethi', 'Geor', 'Grek', 'Hang', 'Hani', 'Hebr', 'Khmr',
    'Knda', 'Laoo', 'Mlym', 'Mong', 'Mymr', 'Sinh', 'Taml', 'Telu', 'Thaa', 'Thai', 'Tibt', 'Yiii'];
  const currencies = ['EUR', 'USD', 'JPY', 'INR', 'CNY', 'RUB', 'ILS', 'THB', 'KRW', 'EGP'];
  const numberings = ['arab', 'arabext', 'beng', 'deva', 'fullwide', 'gujr', 'guru', 'khmr', 'knda', 'laoo', 'latn', 'mlym',
    'mymr', 'orya', 'tamldec', 'telu', 'thai', 'tibt', 'hanidec', 'adlm', 'mong', 'bali'];
  const parts = [];
  let used = 0;
  const add = (s) => {
    parts.push(s);
    used += Buffer.byteLength(s);
  };
  const date = new Date(Date.UTC(2024, 1, 29, 13, 45, 30));
  for (const loc of locales) {
    if (used >= budget) break;
    const line = [];
    const tryAdd = (f) => {
      try {
        const v = f();
        if (v) line.push(v);
      } catch {
        /* a locale or type ICU lacks */
      }
    };
    for (const [type, codes] of [['language', langs], ['region', regions], ['script', scripts], ['currency', currencies]]) {
      tryAdd(() => codes.map((c) => new Intl.DisplayNames([loc], { type }).of(c)).join(', '));
    }
    for (let m = 0; m < 12; m++) {
      const d = new Date(Date.UTC(2024, m, 1 + m * 2, m, m * 5));
      tryAdd(() => new Intl.DateTimeFormat(loc, { dateStyle: 'full', timeStyle: 'long', timeZone: 'UTC' }).format(d));
    }
    tryAdd(() => new Intl.RelativeTimeFormat(loc, { numeric: 'auto' }).format(-3, 'day'));
    tryAdd(() => new Intl.ListFormat(loc, { type: 'conjunction' }).format(langs.slice(0, 4).map((c) => new Intl.DisplayNames([loc], { type: 'language' }).of(c))));
    tryAdd(() => new Intl.NumberFormat(loc, { style: 'currency', currency: 'EUR' }).format(1234567.891));
    tryAdd(() => new Intl.NumberFormat(loc, { notation: 'compact', compactDisplay: 'long' }).format(987654321));
    tryAdd(() => new Intl.DateTimeFormat(loc, { era: 'long', year: 'numeric', calendar: 'islamic' }).format(date));
    add(line.join('\n') + '\n\n');
  }
  for (const nu of numberings) {
    const r = rng(nu.length * 7919);
    const nums = [];
    for (let i = 0; i < 60; i++) nums.push(new Intl.NumberFormat('en-u-nu-' + nu, { useGrouping: i % 2 === 0 }).format(Math.floor(r() * 10 ** (1 + (i % 12)))));
    add(nu + ': ' + nums.join(' ') + '\n');
  }
  return parts.join('');
}

// Every code point Node's Unicode (newer than the regex engines' tables, deliberately) calls assigned,
// except surrogates and private use, each between neighbours that make its class matter: a space, a
// letter of each case, a digit, punctuation, a newline, or itself. Where the tables of PCRE2 and of
// tiktoken's regex crate disagree about a character, this section shows it.
function codepointSweep() {
  const assigned = /^\p{Assigned}$/u;
  const skip = /^[\p{Cs}\p{Co}]$/u;
  const seps = [' ', 'a', 'A', '1', '.', '\n', '', "'s", '\u00a0'];
  const out = [];
  let k = 0;
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    if (!assigned.test(c) || skip.test(c)) continue;
    const sep = seps[k++ % seps.length];
    out.push(sep === '' ? c + c : c + sep);
    if (k % 64 === 0) out.push('\n');
  }
  return out.join('');
}

// Words in many scripts built from their alphabets, with the marks that attach to letters.
function scripts(r, budget) {
  const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => String.fromCodePoint(a + i));
  const alphabets = {
    cjk: range(0x4e00, 0x9fff),
    cjkExtB: range(0x20000, 0x2a6df),
    cjkExtH: range(0x31350, 0x323af), // Unicode 15 — after PCRE2 10.42's tables
    hiragana: range(0x3041, 0x3096),
    katakana: range(0x30a1, 0x30fa).concat(['ー']),
    hangul: range(0xac00, 0xd7a3),
    arabic: range(0x0621, 0x064a),
    arabicMarks: range(0x064b, 0x0652),
    hebrew: range(0x05d0, 0x05ea),
    hebrewMarks: range(0x05b0, 0x05bc),
    devanagari: range(0x0915, 0x0939),
    devanagariSigns: range(0x093e, 0x094d).concat(['ं', 'ँ', 'ः']),
    bengali: range(0x0995, 0x09b9),
    tamil: range(0x0b95, 0x0bb9),
    thai: range(0x0e01, 0x0e2e).concat(range(0x0e31, 0x0e3a), range(0x0e47, 0x0e4e)),
    cyrillic: range(0x0410, 0x044f),
    greek: range(0x0391, 0x03a9).concat(range(0x03b1, 0x03c9)),
    georgian: range(0x10d0, 0x10fa),
    armenian: range(0x0531, 0x0556).concat(range(0x0561, 0x0586)),
    ethiopic: range(0x1200, 0x1248),
    tibetan: range(0x0f40, 0x0f6c).concat(range(0x0f71, 0x0f84)),
    myanmar: range(0x1000, 0x102a).concat(range(0x102b, 0x103e)),
    khmer: range(0x1780, 0x17b3).concat(range(0x17b6, 0x17d3)),
    mongolian: range(0x1820, 0x1878).concat(['\u180e', '\u180b']),
    latinExt: range(0x00c0, 0x024f),
    combining: range(0x0300, 0x036f),
    ipa: range(0x0250, 0x02af),
    math: range(0x1d400, 0x1d7ff),
    cuneiform: range(0x12000, 0x12399),
    fullwidth: range(0xff01, 0xff5e),
    titlecase: ['ǅ', 'ǈ', 'ǋ', 'ǲ', 'ᾈ', 'ᾉ', 'ᾘ', 'ᾼ', 'ῌ', 'ῼ'],
    modifiers: range(0x02b0, 0x02c1).concat(range(0xa700, 0xa716)),
  };
  const word = (letters, marks, lo, hi) => {
    let w = '';
    const n = lo + r.int(hi - lo + 1);
    for (let i = 0; i < n; i++) {
      w += r.pick(letters);
      if (marks && r() < 0.4) w += r.pick(marks);
    }
    return w;
  };
  const punct = ['', '', '', ',', '.', '。', '、', '،', '؟', '।', '॥', '!', '?', '—', '…', '·', '«', '»', '「', '」', '(', ')', ':', ';', '\'', '"'];
  const gens = [
    () => word(alphabets.cjk, null, 1, 6),
    () => word(alphabets.cjkExtB, null, 1, 3),
    () => word(alphabets.cjkExtH, null, 1, 3),
    () => word(alphabets.hiragana, null, 1, 5) + word(alphabets.katakana, null, 0, 4),
    () => word(alphabets.hangul, null, 1, 5),
    () => word(alphabets.arabic, alphabets.arabicMarks, 2, 8),
    () => word(alphabets.hebrew, alphabets.hebrewMarks, 2, 7),
    () => word(alphabets.devanagari, alphabets.devanagariSigns, 2, 7),
    () => word(alphabets.bengali, null, 2, 6),
    () => word(alphabets.tamil, null, 2, 6),
    () => word(alphabets.thai, null, 2, 12),
    () => word(alphabets.cyrillic, null, 2, 10),
    () => word(alphabets.greek, null, 2, 9),
    () => word(alphabets.georgian, null, 2, 9),
    () => word(alphabets.armenian, null, 2, 9),
    () => word(alphabets.ethiopic, null, 2, 6),
    () => word(alphabets.tibetan, null, 2, 6),
    () => word(alphabets.myanmar, null, 2, 6),
    () => word(alphabets.khmer, null, 2, 6),
    () => word(alphabets.mongolian, null, 2, 6),
    () => word(alphabets.latinExt, alphabets.combining, 2, 9),
    () => word(['a', 'e', 'o', 'Z', 'x'], alphabets.combining, 1, 3) + r.pick(alphabets.combining).repeat(1 + r.int(12)),
    () => word(alphabets.ipa, null, 2, 6),
    () => word(alphabets.math, null, 1, 6),
    () => word(alphabets.cuneiform, null, 1, 3),
    () => word(alphabets.fullwidth, null, 1, 6),
    () => r.pick(alphabets.titlecase) + word(alphabets.latinExt, null, 0, 4) + r.pick(alphabets.titlecase),
    () => word(alphabets.modifiers, null, 1, 3) + word(['a', 'B', 'c'], null, 1, 3),
  ];
  const out = [];
  let used = 0;
  while (used < budget) {
    const g = r.pick(gens);
    const line = [];
    for (let i = 0; i < 12; i++) line.push(g() + r.pick(punct));
    const s = line.join(r() < 0.8 ? ' ' : '') + (r() < 0.1 ? '\r\n' : '\n');
    out.push(s);
    used += Buffer.byteLength(s);
  }
  return out.join('');
}

// Emoji: plain, with skin tones, ZWJ families and professions, flags, keycaps, tags, variation selectors.
function emoji(r, budget) {
  const base = ['😀', '😂', '🥲', '🙂', '🤖', '🚀', '🎉', '❤', '✨', '👍', '👋', '🧑', '👩', '👨', '👧', '👦', '🐈', '🏳', '🏴', '☕', '⚽', '🤷', '🙆', '💁'];
  const tones = ['', '🏻', '🏼', '🏽', '🏾', '🏿'];
  const zwj = ['👨‍👩‍👧‍👦', '👩‍💻', '🧑🏽‍🚀', '🏳️‍🌈', '🏴‍☠️', '👁️‍🗨️', '❤️‍🔥', '🐈‍⬛', '🧑‍🤝‍🧑', '👩🏾‍❤️‍💋‍👨🏻', '🤷‍♀️', '🙆🏿‍♂️'];
  const flag = () => String.fromCodePoint(0x1f1e6 + r.int(26), 0x1f1e6 + r.int(26));
  const keycap = () => r.pick('0123456789#*') + '\ufe0f\u20e3';
  const tagFlag = () => '🏴\u{E0067}\u{E0062}' + r.pick(['\u{E0065}\u{E006E}\u{E0067}', '\u{E0073}\u{E0063}\u{E0074}', '\u{E0077}\u{E006C}\u{E0073}']) + '\u{E007F}';
  const gens = [
    () => r.pick(base) + r.pick(tones),
    () => r.pick(zwj),
    flag,
    keycap,
    tagFlag,
    () => r.pick(['☺', '✌', '☝', '❤', '☀']) + r.pick(['\ufe0f', '\ufe0e', '']),
  ];
  const words = ['hello', 'world', 'the', 'party', 'launch', 'Great', 'job', 'ok'];
  const out = [];
  let used = 0;
  while (used < budget) {
    const parts = [];
    for (let i = 0; i < 10; i++) {
      const e = Array.from({ length: 1 + r.int(3) }, () => r.pick(gens)()).join('');
      parts.push(r() < 0.5 ? r.pick(words) + e : e + (r() < 0.5 ? ' ' : '') + r.pick(words));
    }
    const s = parts.join(r() < 0.7 ? ' ' : '') + '\n';
    out.push(s);
    used += Buffer.byteLength(s);
  }
  return out.join('');
}

// The (?i:'s|'t|'re|'ve|'m|'ll|'d) suffix in every case, after words of every case shape, plus near
// misses (curly apostrophes, 'x, LONG S, a letter after the suffix).
function contractions(r, budget) {
  const sfx = [];
  for (const base of ['s', 't', 're', 've', 'm', 'll', 'd']) {
    const n = base.length;
    for (let mask = 0; mask < 1 << n; mask++) {
      let s = "'";
      for (let i = 0; i < n; i++) s += mask & (1 << i) ? base[i].toUpperCase() : base[i];
      sfx.push(s);
    }
  }
  sfx.push("'ſ", '’s', '’S', "'x", "'", "''s", "'st", "'ll've", "'S'", "'Ve");
  const stems = ['don', 'DON', 'Don', 'dOn', 'it', 'IT', 'I', 'you', 'YOU', 'We', 'they', 'John', 'JOHN', 'o', 'Éric',
    'ÉRIC', 'straße', 'ǅemal', 'ΟΔΥΣΣΕΥΣ', 'naïve', '123', ' ', '', 'can', 'shouldn', 'x', 'ᾈ', 'ǈ', 'i̇', 'İ'];
  const tails = ['', '', ' ', '.', 'a', 'A', '1', '\n', "'s", '?', '!'];
  const out = [];
  let used = 0;
  while (used < budget) {
    const s = r.pick(stems) + r.pick(sfx) + r.pick(tails) + (r() < 0.2 ? '\n' : ' ');
    out.push(s);
    used += Buffer.byteLength(s);
  }
  return out.join('');
}

// Runs of every kind of white space, before letters, punctuation, newlines and the end of a line.
function whitespace(r, budget) {
  const ws = [' ', ' ', ' ', '\t', '\n', '\r\n', '\r', '\v', '\f', '\u00a0', '\u3000', '\u2028', '\u2029', '\u0085',
    '\u180e', '\u200b', '\u2003', '\u202f', '\u205f', '\u1680', '\ufeff'];
  const after = ['word', 'Word', '.', '!', '1', '\n', '', '(', '中', 'ά', ' x', '/', '\r\n', '#'];
  const out = [];
  let used = 0;
  while (used < budget) {
    let run = '';
    const n = r() < 0.05 ? 50 + r.int(400) : 1 + r.int(8);
    const homogeneous = r() < 0.5;
    const w = r.pick(ws);
    for (let i = 0; i < n; i++) run += homogeneous ? w : r.pick(ws);
    const s = run + r.pick(after);
    out.push(s);
    used += Buffer.byteLength(s);
  }
  return out.join('');
}

// Digit runs of every length, ASCII and other \p{N}, with the separators numbers come with.
function digits(r, budget) {
  const sets = ['0123456789', '0123456789', '٠١٢٣٤٥٦٧٨٩', '۰۱۲۳۴۵۶۷۸۹', '०१२३४५६७८९', '０１２３４５６７８９', '²³¹¼½¾⅓⅔ⅠⅡⅢⅣⅫ', '①②③④⑤⑩⑳', '𝟎𝟏𝟐𝟑𝟒𝟓', '〇一二三'];
  const seps = [' ', ',', '.', '-', ':', '/', '', 'e', 'x', '%', '$', '€', '\n', '_', 'th '];
  const out = [];
  let used = 0;
  while (used < budget) {
    const set = Array.from(r.pick(sets));
    const n = r() < 0.1 ? 20 + r.int(60) : 1 + r.int(9);
    let s = '';
    for (let i = 0; i < n; i++) s += r.pick(set);
    s += r.pick(seps);
    out.push(s);
    used += Buffer.byteLength(s);
  }
  return out.join('');
}

// Special token names as plain text (encode_ordinary must not treat them specially) and near misses.
function specialNames(r, budget) {
  const names = ['<|start|>', '<|end|>', '<|message|>', '<|channel|>', '<|constrain|>', '<|return|>', '<|call|>',
    '<|endoftext|>', '<|startoftext|>', '<|endofprompt|>', '<|reserved_200100|>', '<|reserved_201087|>',
    '<|reserved_201088|>', '<|unknown|>', '<|', '|>', '<||>', '<|start', 'start|>', '< |end| >', '<<|end|>>'];
  const words = ['user', 'assistant', 'analysis', 'final', 'Hello', ' world', '\n', ' ', 'to=functions.get', 'json'];
  const out = [];
  let used = 0;
  while (used < budget) {
    const s = r.pick(names) + r.pick(words) + (r() < 0.3 ? ' ' : '');
    out.push(s);
    used += Buffer.byteLength(s);
  }
  return out.join('');
}

// A harmony-like conversation with real special tokens, for encode-with-specials.
function specialsSample(r) {
  const out = [];
  for (let i = 0; i < 400; i++) {
    out.push('<|start|>' + r.pick(['system', 'developer', 'user', 'assistant']));
    if (r() < 0.5) out.push('<|channel|>' + r.pick(['analysis', 'final', 'commentary to=functions.get_weather ']));
    if (r() < 0.2) out.push('<|constrain|>json');
    out.push('<|message|>' + r.pick(['Hello  ', 'What is 2 + 2?', ' {"a": 1}', '  \n\n', 'text with <|fake|> and <|end', '中文 ']));
    out.push(r.pick(['<|end|>', '<|return|>', '<|call|>', '<|endoftext|>', '<|reserved_200050|>', '<|endofprompt|>']));
    if (r() < 0.1) out.push('  \n');
  }
  return out.join('');
}

// JSON: compact and pretty, with escapes, unicode, deep nesting, long numbers.
function jsonText(r, budget) {
  const keys = ['id', 'name', 'value', 'items', 'type', 'описание', '名前', 'é', 'emoji😀', 'path', 'x-y_z'];
  const gen = (d) => {
    const k = r.int(d > 3 ? 4 : 7);
    if (k === 0) return r.int(1000000) - 500000;
    if (k === 1) return r() * 1e6;
    if (k === 2) return r.pick(['hello', 'Hello, "world"\n', 'a\\b\tc', 'ünïcödé', '中文字符', '', '    ', 'https://example.com/a?b=c&d=e', '<|end|>']);
    if (k === 3) return r.pick([true, false, null]);
    if (k <= 5) return Array.from({ length: r.int(5) }, () => gen(d + 1));
    const o = {};
    for (let i = r.int(6); i > 0; i--) o[r.pick(keys) + i] = gen(d + 1);
    return o;
  };
  const out = [];
  let used = 0;
  while (used < budget) {
    const v = gen(0);
    const s = (r() < 0.5 ? JSON.stringify(v) : JSON.stringify(v, null, r.pick([2, 4, '\t']))) + '\n';
    out.push(s);
    used += Buffer.byteLength(s);
  }
  return out.join('');
}

// Ill-formed UTF-8 of every kind, amid text: compared after decoding with replacement (U+FFFD).
function invalidBytes(r) {
  const bad = [[0x80], [0xbf], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xe0, 0x9f, 0xbf], [0xed, 0xa0, 0x80],
    [0xed, 0xbf, 0xbf], [0xf0, 0x8f, 0xbf, 0xbf], [0xf4, 0x90, 0x80, 0x80], [0xf5], [0xff], [0xfe], [0xc3], [0xe4, 0xb8],
    [0xf0, 0x9f, 0x98], [0xe2, 0x82, 0x41], [0xf0, 0x9f, 0x41], [0x00], [0xc3, 0xa9, 0xa9]];
  const text = ['Hello', ' world', 'é', '中', '😀', ' ', '\n', "'s", 'abc', '123'];
  const parts = [];
  for (let i = 0; i < 3000; i++) {
    parts.push(Buffer.from(r.pick(text)));
    if (r() < 0.5) parts.push(Buffer.from(r.pick(bad)));
  }
  parts.push(Buffer.from([0xe4, 0xb8])); // truncated at the very end
  return Buffer.concat(parts);
}

// ---------------------------------------------------------------------------------------------------

function main() {
  const outdir = process.argv[2];
  if (!outdir) {
    console.error('usage: node make_corpus.js OUTDIR');
    process.exit(2);
  }
  fs.mkdirSync(outdir, { recursive: true });
  const r = rng(20250807);
  const [manForeign, manEnglish] = manPages(80 << 10, 900 << 10);
  const isText = (p) => /\.(js|mjs|cjs|ts|md|json)$/.test(p);
  const npm = walk('/usr/lib/node_modules', isText);
  const sections = [
    ['gettext translations (/usr/share/locale)', () => gettext(24 << 10)],
    ['man pages, translated', () => manForeign],
    ['man pages, English', () => manEnglish],
    ['man pages, English, CRLF', () => cutAtLine(manEnglish.slice(manEnglish.length >> 1), 300 << 10).replace(/\n/g, '\r\n')],
    ['C headers (/usr/include)', () => fromFiles(walk('/usr/include', (p) => p.endsWith('.h')), 1000 << 10, 16 << 10)],
    ['JavaScript (node_modules)', () => fromFiles(npm.filter((p) => /\.(js|mjs|cjs)$/.test(p)), 700 << 10, 16 << 10)],
    ['Markdown (node_modules)', () => fromFiles(npm.filter((p) => p.endsWith('.md')), 300 << 10, 16 << 10)],
    ['JSON (node_modules)', () => fromFiles(npm.filter((p) => p.endsWith('.json')), 250 << 10, 16 << 10)],
    ['JSON, generated', () => jsonText(r, 300 << 10)],
    ['locale definitions (/usr/share/i18n/locales)', () => fromFiles(walk('/usr/share/i18n/locales', () => true), 500 << 10, 24 << 10)],
    ['package documentation (/usr/share/doc)', () => fromFiles(walk('/usr/share/doc', (p) => /(copyright|changelog\.Debian\.gz|README[^/]*)$/.test(p)), 700 << 10, 12 << 10)],
    ['Unicode data (perl unicore)', () => fromFiles(walk('/usr/share/perl', (p) => /unicore\/[^/]*\.txt$/.test(p)), 300 << 10, 100 << 10)],
    ['Intl (Node ICU) names, dates and numbers', () => intlText(700 << 10)],
    ['every assigned code point', codepointSweep],
    ['scripts, generated words', () => scripts(r, 1200 << 10)],
    ['emoji', () => emoji(r, 300 << 10)],
    ['contractions', () => contractions(r, 150 << 10)],
    ['white space runs', () => whitespace(r, 250 << 10)],
    ['digit runs', () => digits(r, 200 << 10)],
    ['special token names as text', () => specialNames(r, 30 << 10)],
    ['long pieces', () => ['a'.repeat(5000), ' '.repeat(3000), 'A'.repeat(2000) + 'b', '中'.repeat(1500), 'ab'.repeat(2000),
      Array.from({ length: 4000 }, () => r.pick('abcdefghijklmnopqrstuvwxyz')).join(''), '-'.repeat(3000), '9'.repeat(3001),
      '\n'.repeat(2000), '\t'.repeat(1000) + 'x'].join('\n')],
  ];
  const chunks = [];
  const manifest = [];
  let offset = 0;
  for (const [name, make] of sections) {
    const text = make();
    const buf = Buffer.from(text + '\n');
    manifest.push({ name, offset, bytes: buf.length });
    chunks.push(buf);
    offset += buf.length;
  }
  fs.writeFileSync(path.join(outdir, 'corpus.txt'), Buffer.concat(chunks));
  fs.writeFileSync(path.join(outdir, 'corpus.sections.json'), JSON.stringify(manifest, null, 1));
  fs.writeFileSync(path.join(outdir, 'specials.txt'), specialsSample(r));
  fs.writeFileSync(path.join(outdir, 'invalid.bin'), invalidBytes(r));
  for (const m of manifest) console.log(`${String(m.bytes).padStart(9)}  ${m.name}`);
  console.log(`${String(offset).padStart(9)}  total`);
}

main();
