// tiktoken's o200k_harmony, built from o200k_base: the npm tiktoken package (1.0.22) does not ship
// o200k_harmony, but it is o200k_base's ranks and regex with more special tokens (tiktoken's Python
// definition, openai_public.py): <|startoftext|> 199998, <|endoftext|> 199999, the harmony markup
// tokens 200002 ... 200012, and <|reserved_N|> for every other id up to 201087. o200k_base's own
// <|endofprompt|> (200018) stays, so 200018 answers to two names.
'use strict';
const { get_encoding } = require('tiktoken');

function harmonySpecials() {
  const named = {
    199998: '<|startoftext|>',
    199999: '<|endoftext|>',
    200002: '<|return|>',
    200003: '<|constrain|>',
    200005: '<|channel|>',
    200006: '<|start|>',
    200007: '<|end|>',
    200008: '<|message|>',
    200012: '<|call|>',
  };
  const specials = {};
  for (let id = 199998; id < 201088; id++) specials[named[id] || `<|reserved_${id}|>`] = id;
  return specials;
}

function harmonyEncoding() {
  return get_encoding('o200k_base', harmonySpecials());
}

module.exports = { harmonyEncoding, harmonySpecials };
