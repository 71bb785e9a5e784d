/* A step as bytes. See step_wire.h. */
#include "step/step_wire.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

enum { FLAG_PROMPT_NEXT = 1 };

/* Bytes one sequence takes on the wire at least (no prompt_next, no logit bias, empty tables):
 * slot, start_pos, swa_first, output_len, prompt_len; sample, reset_slot; the parameters' fixed
 * part; its query_start entry; its two table lengths. A count of sequences is checked against it
 * before anything is allocated for them. */
enum { SEQ_MIN_BYTES = 5 * 4 + 2 + (7 * 4 + 8 + 1 + 2 * 4 + 1 + 4) + 4 + 2 * 4 };

uint32_t step_wire_checksum(const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

void step_wire_buf_free(step_wire_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* ---- writing ---- */

static unsigned char *room(step_wire_buf *b, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        b->data = xrealloc(b->data, cap);
        b->cap = cap;
    }
    unsigned char *p = b->data + b->len;
    b->len += n;
    return p;
}

static void le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u8(step_wire_buf *b, unsigned v) {
    *room(b, 1) = (unsigned char)v;
}

static void put_u32(step_wire_buf *b, uint32_t v) {
    le32(room(b, 4), v);
}

static void put_i32(step_wire_buf *b, int32_t v) {
    put_u32(b, (uint32_t)v);
}

static void put_f32(step_wire_buf *b, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put_u32(b, u);
}

static void put_u64(step_wire_buf *b, uint64_t v) {
    le64(room(b, 8), v);
}

static void put_i32s(step_wire_buf *b, const int32_t *v, int64_t n) {
    unsigned char *p = room(b, (size_t)n * 4);
    for (int64_t i = 0; i < n; i++) le32(p + 4 * i, (uint32_t)v[i]);
}

static void put_header(step_wire_buf *b, int kind, uint32_t seq) {
    unsigned char *p = b->data;
    const uint64_t payload = b->len - STEP_WIRE_HEADER_BYTES;
    le32(p, STEP_WIRE_MAGIC);
    p[4] = STEP_WIRE_VERSION & 0xff, p[5] = STEP_WIRE_VERSION >> 8;
    p[6] = (unsigned char)kind, p[7] = 0;
    le32(p + 8, seq);
    le32(p + 12, step_wire_checksum(p + STEP_WIRE_HEADER_BYTES, payload));
    le64(p + 16, payload);
    le64(p + 24, 0);
}

/* One sequence's block table row without its trailing -1s. */
static void put_table(step_wire_buf *b, const int32_t *row, int stride) {
    int n = stride;
    while (n > 0 && row[n - 1] == -1) n--;
    put_i32(b, n);
    put_i32s(b, row, n);
}

static void put_params(step_wire_buf *b, const sampling_params *p) {
    put_f32(b, p->temperature), put_f32(b, p->top_p), put_i32(b, p->top_k);
    put_f32(b, p->min_p), put_f32(b, p->presence_penalty), put_f32(b, p->frequency_penalty);
    put_f32(b, p->repetition_penalty);
    put_u64(b, p->seed), put_u8(b, p->has_seed);
    put_i32(b, p->logprobs), put_i32(b, p->prompt_logprobs);
    put_u8(b, p->constrained);
    const int nb = p->logit_bias ? p->n_logit_bias : 0;
    put_i32(b, nb);
    for (int k = 0; k < nb; k++)
        put_i32(b, p->logit_bias[k].token), put_f32(b, p->logit_bias[k].bias);
}

int step_wire_encode_step(step_wire_buf *out, uint32_t seq, const step_batch *st,
                          const int32_t *fixups, int n_fixups) {
    const int n = st->n_seqs, T = st->n_tokens;
    if (n < 0 || T < 0 || n_fixups < 0 || st->full_stride < 0 || st->swa_stride < 0)
        return err_set("step wire: a step of %d sequences, %d tokens, strides %d/%d and %d "
                       "fix-ups cannot be sent",
                       n, T, st->full_stride, st->swa_stride, n_fixups);
    out->len = 0;
    room(out, STEP_WIRE_HEADER_BYTES);
    put_i32(out, n), put_i32(out, T), put_i32(out, st->block_size);
    put_i32(out, st->full_stride), put_i32(out, st->swa_stride), put_i32(out, st->dp_size);
    put_i32s(out, st->dp_seq0, STEP_DP_MAX + 1);
    put_u8(out, st->prompt_next ? FLAG_PROMPT_NEXT : 0);
    put_i32s(out, st->token_ids, T);
    put_i32s(out, st->positions, T);
    for (int i = 0; i < n; i++) {
        put_i32(out, st->slot[i]);
        put_i32(out, st->start_pos[i]), put_i32(out, st->swa_first[i]);
        put_u8(out, st->sample[i]), put_u8(out, st->reset_slot ? st->reset_slot[i] : 0);
        put_i32(out, st->output_len[i]), put_i32(out, st->prompt_len[i]);
        if (st->prompt_next) put_i32(out, st->prompt_next[i]);
        put_params(out, &st->params[i]);
    }
    put_i32s(out, st->query_start, (int64_t)n + 1);
    for (int i = 0; i < n; i++)
        put_table(out, st->full_tables + (size_t)i * st->full_stride, st->full_stride);
    for (int i = 0; i < n; i++)
        put_table(out, st->swa_tables + (size_t)i * st->swa_stride, st->swa_stride);
    put_i32(out, n_fixups);
    put_i32s(out, fixups, 2 * (int64_t)n_fixups);
    if (out->len - STEP_WIRE_HEADER_BYTES > STEP_WIRE_MAX_PAYLOAD)
        return err_set("step wire: a step of %zu bytes is more than the %llu a message may carry",
                       out->len - STEP_WIRE_HEADER_BYTES,
                       (unsigned long long)STEP_WIRE_MAX_PAYLOAD);
    put_header(out, STEP_WIRE_STEP, seq);
    return 0;
}

void step_wire_encode_shutdown(step_wire_buf *out, uint32_t seq) {
    out->len = 0;
    room(out, STEP_WIRE_HEADER_BYTES);
    put_header(out, STEP_WIRE_SHUTDOWN, seq);
}

/* ---- reading ---- */

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p) {
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

int step_wire_header_read(const void *buf, size_t n, step_wire_header *h) {
    const unsigned char *p = buf;
    memset(h, 0, sizeof *h);
    if (n < STEP_WIRE_HEADER_BYTES)
        return err_set("step wire: a header of %zu bytes (expected %d)", n, STEP_WIRE_HEADER_BYTES);
    if (rd32(p) != STEP_WIRE_MAGIC)
        return err_set("step wire: not a step message (magic 0x%08x)", (unsigned)rd32(p));
    const unsigned version = p[4] | (unsigned)p[5] << 8, kind = p[6] | (unsigned)p[7] << 8;
    if (version != STEP_WIRE_VERSION)
        return err_set("step wire: version %u, this program reads version %d (every node must run "
                       "the same gptoss)",
                       version, STEP_WIRE_VERSION);
    if (kind != STEP_WIRE_STEP && kind != STEP_WIRE_SHUTDOWN)
        return err_set("step wire: unknown message kind %u", kind);
    if (rd64(p + 24) != 0) return err_set("step wire: the header's reserved field is not zero");
    const uint64_t len = rd64(p + 16);
    if (len > STEP_WIRE_MAX_PAYLOAD || (kind == STEP_WIRE_SHUTDOWN && len != 0))
        return err_set("step wire: a %s message of %llu payload bytes",
                       kind == STEP_WIRE_STEP ? "step" : "shutdown", (unsigned long long)len);
    h->kind = (int)kind, h->seq = rd32(p + 8), h->checksum = rd32(p + 12);
    h->payload_bytes = len;
    return 0;
}

typedef struct {
    const unsigned char *p;
    size_t n, off;
    const char *bad; /* the first field that did not fit or was out of range */
} reader;

static bool has(reader *r, uint64_t bytes, const char *what) {
    if (r->bad) return false;
    if (bytes > r->n - r->off) {
        r->bad = what;
        return false;
    }
    return true;
}

static uint32_t get_u32(reader *r, const char *what) {
    if (!has(r, 4, what)) return 0;
    const uint32_t v = rd32(r->p + r->off);
    r->off += 4;
    return v;
}

static int32_t get_i32(reader *r, const char *what) {
    return (int32_t)get_u32(r, what);
}

static float get_f32(reader *r, const char *what) {
    const uint32_t u = get_u32(r, what);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static uint64_t get_u64(reader *r, const char *what) {
    if (!has(r, 8, what)) return 0;
    const uint64_t v = rd64(r->p + r->off);
    r->off += 8;
    return v;
}

static bool get_bool(reader *r, const char *what) {
    if (!has(r, 1, what)) return false;
    const unsigned char v = r->p[r->off++];
    if (v > 1) r->bad = what;
    return v == 1;
}

static void get_i32s(reader *r, int32_t *dst, int64_t n, const char *what) {
    if (!has(r, (uint64_t)n * 4, what)) return;
    for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)rd32(r->p + r->off + 4 * i);
    r->off += (size_t)n * 4;
}

/* A range check on a field already read: the first failure is the one reported. */
static void need(reader *r, bool ok, const char *what) {
    if (!ok && !r->bad) r->bad = what;
}

/* One row of a block table: its sent entries, the rest -1. */
static void get_table(reader *r, int32_t *row, int stride, const char *what) {
    const int32_t n = get_i32(r, what);
    need(r, n >= 0 && n <= stride, what);
    if (r->bad) return;
    get_i32s(r, row, n, what);
    for (int j = n; j < stride; j++) row[j] = -1;
}

static void get_params(reader *r, sampling_params *p, int32_t *n_bias) {
    p->temperature = get_f32(r, "temperature"), p->top_p = get_f32(r, "top_p");
    p->top_k = get_i32(r, "top_k"), p->min_p = get_f32(r, "min_p");
    p->presence_penalty = get_f32(r, "presence_penalty");
    p->frequency_penalty = get_f32(r, "frequency_penalty");
    p->repetition_penalty = get_f32(r, "repetition_penalty");
    p->seed = get_u64(r, "seed"), p->has_seed = get_bool(r, "has_seed");
    p->logprobs = get_i32(r, "logprobs"), p->prompt_logprobs = get_i32(r, "prompt_logprobs");
    p->constrained = get_bool(r, "constrained");
    *n_bias = get_i32(r, "n_logit_bias");
    need(r, *n_bias >= 0 && (uint64_t)*n_bias * 8 <= r->n - r->off, "n_logit_bias");
    p->logit_bias = NULL, p->n_logit_bias = r->bad ? 0 : *n_bias;
}

void step_wire_step_free(step_wire_step *s) {
    step_batch *st = &s->st;
    free(st->token_ids), free(st->positions), free(st->slot), free(st->query_start);
    free(st->start_pos), free(st->swa_first), free(st->sample), free(st->reset_slot);
    free(st->params), free(st->output_len), free((void *)st->history), free(st->history_len);
    free(st->prompt_len), free(st->prompt_next), free(st->full_tables), free(st->swa_tables);
    free(s->fixups), free(s->bias);
    memset(s, 0, sizeof *s);
}

static void *alloc_n(int64_t n, size_t size) {
    return xcalloc((size_t)(n > 0 ? n : 1), size);
}

static int decode(reader *r, step_wire_step *out) {
    step_batch *st = &out->st;
    const int32_t n = get_i32(r, "n_seqs"), T = get_i32(r, "n_tokens");
    st->block_size = get_i32(r, "block_size");
    const int32_t fs = get_i32(r, "full_stride"), ss = get_i32(r, "swa_stride");
    st->dp_size = get_i32(r, "dp_size");
    get_i32s(r, st->dp_seq0, STEP_DP_MAX + 1, "dp_seq0");
    if (!has(r, 1, "flags")) return -1;
    const unsigned flags = r->p[r->off++];
    need(r, (flags & ~(unsigned)FLAG_PROMPT_NEXT) == 0, "flags");
    /* Counts against the bytes left before anything is allocated for them. */
    need(r, n >= 0 && (uint64_t)n * SEQ_MIN_BYTES <= r->n - r->off, "n_seqs");
    need(r, T >= 0 && (uint64_t)T * 8 <= r->n - r->off, "n_tokens");
    need(r, fs >= 0 && ss >= 0, "block table stride");
    need(r, (int64_t)n * fs <= STEP_WIRE_MAX_TABLE && (int64_t)n * ss <= STEP_WIRE_MAX_TABLE,
         "block table size");
    need(r, st->dp_size >= 0 && st->dp_size <= STEP_DP_MAX, "dp_size");
    if (r->bad) return -1;
    st->n_seqs = n, st->n_tokens = T, st->full_stride = fs, st->swa_stride = ss;
    if (st->dp_size > 1) { /* rank r's sequences are [dp_seq0[r], dp_seq0[r + 1]) */
        need(r, st->dp_seq0[0] == 0 && st->dp_seq0[st->dp_size] == n, "dp_seq0");
        for (int k = 1; k <= st->dp_size; k++)
            need(r, st->dp_seq0[k] >= st->dp_seq0[k - 1], "dp_seq0 (not rising)");
    }
    st->token_ids = alloc_n(T, 4), st->positions = alloc_n(T, 4);
    get_i32s(r, st->token_ids, T, "token_ids");
    get_i32s(r, st->positions, T, "positions");
    st->slot = alloc_n(n, 4), st->start_pos = alloc_n(n, 4), st->swa_first = alloc_n(n, 4);
    st->sample = alloc_n(n, 1), st->reset_slot = alloc_n(n, 1);
    st->output_len = alloc_n(n, 4), st->prompt_len = alloc_n(n, 4);
    st->history = alloc_n(n, sizeof *st->history), st->history_len = alloc_n(n, 4);
    st->params = alloc_n(n, sizeof *st->params);
    if (flags & FLAG_PROMPT_NEXT) st->prompt_next = alloc_n(n, 4);
    int64_t n_bias = 0, cap_bias = 0;
    int64_t *bias0 = alloc_n(n, sizeof *bias0); /* each row's first entry in out->bias */
    for (int i = 0; i < n && !r->bad; i++) {
        st->slot[i] = get_i32(r, "slot");
        st->start_pos[i] = get_i32(r, "start_pos"), st->swa_first[i] = get_i32(r, "swa_first");
        st->sample[i] = get_bool(r, "sample"), st->reset_slot[i] = get_bool(r, "reset_slot");
        st->output_len[i] = get_i32(r, "output_len"), st->prompt_len[i] = get_i32(r, "prompt_len");
        if (st->prompt_next) st->prompt_next[i] = get_i32(r, "prompt_next");
        need(r,
             st->start_pos[i] >= 0 && st->swa_first[i] >= 0 && st->output_len[i] >= 0 &&
                 st->prompt_len[i] >= 0,
             "a sequence's positions or lengths");
        int32_t nb = 0;
        get_params(r, &st->params[i], &nb);
        if (r->bad) break;
        if (n_bias + nb > cap_bias) {
            cap_bias = 2 * (n_bias + nb);
            out->bias = xrealloc(out->bias, (size_t)cap_bias * sizeof *out->bias);
        }
        bias0[i] = n_bias;
        for (int k = 0; k < nb; k++, n_bias++) {
            out->bias[n_bias].token = get_i32(r, "logit_bias token");
            out->bias[n_bias].bias = get_f32(r, "logit_bias value");
        }
    }
    for (int i = 0; i < n && !r->bad; i++) /* out->bias no longer moves */
        if (st->params[i].n_logit_bias > 0) st->params[i].logit_bias = out->bias + bias0[i];
    free(bias0);
    st->query_start = alloc_n((int64_t)n + 1, 4);
    get_i32s(r, st->query_start, (int64_t)n + 1, "query_start");
    for (int i = 0; i < n && !r->bad; i++)
        need(r, st->query_start[i] <= st->query_start[i + 1], "query_start (not rising)");
    need(r, st->query_start[0] == 0 && st->query_start[n] == T,
         "query_start (not from 0 to n_tokens)");
    st->full_tables = alloc_n((int64_t)n * fs, 4), st->swa_tables = alloc_n((int64_t)n * ss, 4);
    for (int i = 0; i < n && !r->bad; i++)
        get_table(r, st->full_tables + (size_t)i * fs, fs, "full block table");
    for (int i = 0; i < n && !r->bad; i++)
        get_table(r, st->swa_tables + (size_t)i * ss, ss, "sliding block table");
    const int32_t nf = get_i32(r, "n_fixups");
    need(r, nf >= 0 && (uint64_t)nf * 8 <= r->n - r->off, "n_fixups");
    if (r->bad) return -1;
    out->n_fixups = nf;
    out->fixups = alloc_n(2 * (int64_t)nf, 4);
    get_i32s(r, out->fixups, 2 * (int64_t)nf, "fixups");
    need(r, r->off == r->n, "the payload's length (bytes left over)");
    return r->bad ? -1 : 0;
}

int step_wire_decode_step(const step_wire_header *h, const void *payload, size_t n,
                          step_wire_step *out) {
    memset(out, 0, sizeof *out);
    if (h->kind != STEP_WIRE_STEP)
        return err_set("step wire: not a step message (kind %d)", h->kind);
    if (n != h->payload_bytes)
        return err_set("step wire: %zu payload bytes, the header says %llu", n,
                       (unsigned long long)h->payload_bytes);
    const uint32_t sum = step_wire_checksum(payload, n);
    if (sum != h->checksum)
        return err_set("step wire: checksum 0x%08x, the header says 0x%08x (a corrupt message)",
                       (unsigned)sum, (unsigned)h->checksum);
    reader r = {payload, n, 0, NULL};
    if (decode(&r, out) == 0) return 0;
    const size_t at = r.off;
    step_wire_step_free(out);
    return err_set("step wire: a bad step message: %s (at payload byte %zu of %zu)",
                   r.bad ? r.bad : "truncated", at, n);
}
