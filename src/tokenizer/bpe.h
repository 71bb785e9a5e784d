/* The o200k_harmony tokenizer: byte-level BPE loaded from a Hugging Face tokenizer.json.
 *
 * Encoding follows tiktoken exactly (spec §4): the text is cut into pieces by the o200k
 * pre-tokeniser regex, each piece's UTF-8 bytes are merged pair by pair, lowest rank first, where
 * the rank of a pair is the id of the token its concatenation spells. Special tokens (<|start|>,
 * <|end|>, ...) are found only by tokenizer_encode_with_specials; user text always goes through
 * tokenizer_encode_ordinary, so a user typing "<|end|>" gets ordinary tokens, never a message
 * boundary.
 *
 * Input text need not be valid UTF-8: invalid sequences are encoded as U+FFFD, the way the
 * reference (tiktoken, which takes JavaScript or Python strings) sees such text after the usual
 * decoding with replacement; see tok_utf8.h. Decoding is exact on bytes.
 *
 * A loaded tokenizer is immutable: any number of threads may encode and decode with it at once. */
#ifndef GPTOSS_TOKENIZER_BPE_H
#define GPTOSS_TOKENIZER_BPE_H

#include "base/vec.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* Loads a tokenizer.json; NULL + err_set() on failure (the message names the file and field). */
tokenizer *tokenizer_load(const char *tokenizer_json_path);
/* model_dir/tokenizer.json when model_dir is given and has one, else
 * $(cache_dir)/tokenizer/tokenizer.json (where scripts/setup.sh puts it). */
tokenizer *tokenizer_load_for_model(const char *model_dir_or_null);
/* The path tokenizer_load_for_model would read (heap string), or NULL + err_set() when neither
 * exists. */
char *tokenizer_find_json(const char *model_dir_or_null);
void tokenizer_free(tokenizer *t);

/* Appends the ids of text[0..len) to out. Special-token names in the text are ordinary text.
 * Returns 0; -1 + err_set() for a text over 700 MB or if the regex engine fails (no input seen so
 * far makes it fail), with out then holding the ids of a prefix of the text. */
int tokenizer_encode_ordinary(const tokenizer *t, const char *text, size_t len, ivec *out);
/* tokenizer_encode_ordinary for callbacks that take a void *context (the harmony renderer's
 * harmony_encode_fn): ctx is the tokenizer. */
int tokenizer_encode_ordinary_cb(void *ctx, const char *text, size_t len, ivec *out);
/* Same, but every special token name (<|start|>, <|reserved_200100|>, ...) in the text becomes its
 * id. For text the program itself writes (the harmony renderer's markup), never for user text. */
int tokenizer_encode_with_specials(const tokenizer *t, const char *text, size_t len, ivec *out);

/* Decodes ids into a fresh heap buffer (NUL-terminated; *out_len excludes the NUL). Special ids
 * decode to their names. The bytes are exact: they may be invalid UTF-8 when the ids split a
 * character. -1 + err_set() for an id outside [0, vocab size). */
int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len);
/* The bytes of one token (not NUL-terminated); NULL for an id out of range. */
const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len);
/* The id of a special token by name ("<|start|>" → 200006), -1 if there is none. */
int32_t tokenizer_special_id(const tokenizer *t, const char *name);
/* True for ids of special tokens (199998 ... 201087 in o200k_harmony). */
int tokenizer_is_special(const tokenizer *t, int32_t id);
/* Embedding rows the ids address: 201088 for o200k_harmony (BPE ranks + specials + reserved). */
int tokenizer_vocab_size(const tokenizer *t);
/* Number of BPE tokens (ids below it are byte strings): 199998 for o200k. */
int tokenizer_bpe_size(const tokenizer *t);

/* Streaming decoder: tokens arrive one at a time and a character's bytes may be split across
 * tokens. tok_stream_push returns only complete UTF-8 text and holds back an incomplete character
 * until the token that completes it arrives. Bytes that can never become valid UTF-8 come out as
 * U+FFFD, so what the stream emits is always valid UTF-8 (safe for JSON and SSE). For ids whose
 * bytes are valid UTF-8, the concatenated output equals tokenizer_decode's. */
typedef struct {
    unsigned char pend[4]; /* an incomplete UTF-8 sequence carried to the next token */
    int npend;
    char *buf; /* the text returned by the last call; owned by the stream */
    size_t cap;
} tok_stream;

void tok_stream_init(tok_stream *s);
/* *text points into the stream's buffer and stays valid until the next call on the stream. An id
 * out of range is -1 + err_set() and leaves the stream as it was. */
int tok_stream_push(const tokenizer *t, tok_stream *s, int32_t id, const char **text, size_t *len);
/* Ends the stream: a held-back incomplete sequence comes out as U+FFFD. The stream is reset. */
void tok_stream_flush(tok_stream *s, const char **text, size_t *len);
void tok_stream_free(tok_stream *s);

#endif
