/* The step as bytes (src/step/step_wire.h), which node 0 broadcasts to the headless nodes under
 * --nnodes > 1: representative steps (a prefill chunk with prompt logprobs, decode rows reading
 * their token from the device, every sampling parameter, logit bias, constrained rows, DEP parts,
 * block tables with trailing -1s, fix-ups) come back field for field; the shutdown message; and
 * every kind of bad message (short or foreign header, other version, unknown kind, wrong length,
 * corrupt payload, counts and indices out of range, bytes left over) is refused with a message
 * naming the problem, never read past its end. */
#include "check.h"

#include "base/error.h"
#include "step/step_wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A step with owned arrays, filled by the cases below. */
typedef struct {
    step_batch st;
    int32_t tok[64], pos[64], slot[8], qs[9], sp[8], swf[8], olen[8], plen[8], pnext[8];
    bool sample[8], reset[8];
    sampling_params params[8];
    int32_t full[8 * 6], swa[8 * 3];
    logit_bias_entry bias[3];
    const int32_t *hist[8];
    int32_t hist_len[8];
} case_step;

static void case_init(case_step *c, int n, const int *n_new, int fs, int ss, bool with_next) {
    memset(c, 0, sizeof *c);
    step_batch *st = &c->st;
    st->n_seqs = n, st->block_size = 16, st->full_stride = fs, st->swa_stride = ss;
    st->token_ids = c->tok, st->positions = c->pos, st->slot = c->slot, st->query_start = c->qs;
    st->start_pos = c->sp, st->swa_first = c->swf, st->sample = c->sample,
    st->reset_slot = c->reset;
    st->params = c->params, st->output_len = c->olen, st->prompt_len = c->plen;
    st->history = c->hist, st->history_len = c->hist_len;
    st->prompt_next = with_next ? c->pnext : NULL;
    st->full_tables = c->full, st->swa_tables = c->swa;
    int t = 0;
    for (int i = 0; i < n; i++) {
        c->qs[i] = t;
        c->slot[i] = 7 * i + 3, c->sp[i] = 40 * i + (n_new[i] > 1 ? 0 : 33);
        c->swf[i] = i % 2, c->olen[i] = n_new[i] > 1 ? 0 : 12 + i, c->plen[i] = 33 + i;
        c->pnext[i] = n_new[i] > 1 ? 500 + i : -1;
        c->sample[i] = i % 3 != 1, c->reset[i] = n_new[i] > 1;
        c->params[i] = sampling_params_default();
        for (int j = 0; j < n_new[i]; j++, t++) {
            c->tok[t] = n_new[i] > 1 ? 1000 + t : STEP_TOKEN_FROM_DEVICE;
            c->pos[t] = c->sp[i] + j;
        }
        for (int j = 0; j < fs; j++) c->full[i * fs + j] = j <= i ? 100 * i + j : -1;
        for (int j = 0; j < ss; j++) c->swa[i * ss + j] = j < ss - 1 ? 50 + i + j : -1;
        c->hist[i] = c->tok, c->hist_len[i] = 2; /* not carried: decoded as none */
    }
    c->qs[n] = t;
    st->n_tokens = t;
}

static void same_params(const sampling_params *a, const sampling_params *b, int i) {
    CHECK(a->temperature == b->temperature && a->top_p == b->top_p && a->top_k == b->top_k &&
              a->min_p == b->min_p && a->presence_penalty == b->presence_penalty &&
              a->frequency_penalty == b->frequency_penalty &&
              a->repetition_penalty == b->repetition_penalty,
          "row %d: the filters and penalties differ", i);
    CHECK(a->seed == b->seed && a->has_seed == b->has_seed, "row %d: seed", i);
    CHECK(a->logprobs == b->logprobs && a->prompt_logprobs == b->prompt_logprobs,
          "row %d: logprobs", i);
    CHECK(a->constrained == b->constrained, "row %d: constrained", i);
    const int na = a->logit_bias ? a->n_logit_bias : 0, nb = b->logit_bias ? b->n_logit_bias : 0;
    CHECK(na == nb, "row %d: %d logit bias entries, %d sent", i, nb, na);
    for (int k = 0; k < na && k < nb; k++)
        CHECK(a->logit_bias[k].token == b->logit_bias[k].token &&
                  a->logit_bias[k].bias == b->logit_bias[k].bias,
              "row %d: bias entry %d", i, k);
}

/* Encode, decode, compare every field the wire carries. */
static void round_trip(const char *what, const case_step *c, const int32_t *fix, int n_fix,
                       uint32_t seq) {
    step_wire_buf buf = {0};
    const step_batch *a = &c->st;
    CHECK(step_wire_encode_step(&buf, seq, a, fix, n_fix) == 0, "%s: encode: %s", what, err_msg());
    step_wire_header h;
    CHECK(step_wire_header_read(buf.data, buf.len, &h) == 0, "%s: header: %s", what, err_msg());
    CHECK(h.kind == STEP_WIRE_STEP && h.seq == seq &&
              h.payload_bytes == buf.len - STEP_WIRE_HEADER_BYTES,
          "%s: header kind %d seq %u bytes %llu", what, h.kind, (unsigned)h.seq,
          (unsigned long long)h.payload_bytes);
    step_wire_step m;
    const int rc = step_wire_decode_step(&h, buf.data + STEP_WIRE_HEADER_BYTES,
                                         buf.len - STEP_WIRE_HEADER_BYTES, &m);
    CHECK(rc == 0, "%s: decode: %s", what, err_msg());
    if (rc) {
        step_wire_buf_free(&buf);
        return;
    }
    const step_batch *b = &m.st;
    const int n = a->n_seqs, T = a->n_tokens;
    CHECK(b->n_seqs == n && b->n_tokens == T && b->block_size == a->block_size &&
              b->full_stride == a->full_stride && b->swa_stride == a->swa_stride,
          "%s: counts %d/%d/%d/%d/%d", what, b->n_seqs, b->n_tokens, b->block_size, b->full_stride,
          b->swa_stride);
    CHECK(b->dp_size == a->dp_size && !memcmp(b->dp_seq0, a->dp_seq0, sizeof a->dp_seq0),
          "%s: DEP parts", what);
    CHECK(!memcmp(b->token_ids, a->token_ids, (size_t)T * 4) &&
              !memcmp(b->positions, a->positions, (size_t)T * 4),
          "%s: tokens or positions", what);
    CHECK(!memcmp(b->query_start, a->query_start, (size_t)(n + 1) * 4), "%s: query_start", what);
    for (int i = 0; i < n; i++) {
        CHECK(b->slot[i] == a->slot[i] && b->start_pos[i] == a->start_pos[i] &&
                  b->swa_first[i] == a->swa_first[i] && b->sample[i] == a->sample[i] &&
                  b->reset_slot[i] == a->reset_slot[i] && b->output_len[i] == a->output_len[i] &&
                  b->prompt_len[i] == a->prompt_len[i],
              "%s: sequence %d", what, i);
        CHECK(b->history[i] == NULL && b->history_len[i] == 0,
              "%s: sequence %d: a history arrived (it is not carried)", what, i);
        same_params(&b->params[i], &a->params[i], i);
    }
    CHECK(!a->prompt_next == !b->prompt_next, "%s: prompt_next present/absent", what);
    if (a->prompt_next && b->prompt_next)
        CHECK(!memcmp(b->prompt_next, a->prompt_next, (size_t)n * 4), "%s: prompt_next", what);
    CHECK(!memcmp(b->full_tables, a->full_tables, (size_t)n * a->full_stride * 4) &&
              !memcmp(b->swa_tables, a->swa_tables, (size_t)n * a->swa_stride * 4),
          "%s: block tables", what);
    CHECK(b->masks == NULL, "%s: masks arrived (they are not carried)", what);
    CHECK(m.n_fixups == n_fix && (!n_fix || !memcmp(m.fixups, fix, (size_t)n_fix * 8)),
          "%s: %d fix-ups, %d sent", what, m.n_fixups, n_fix);
    step_wire_step_free(&m);
    step_wire_buf_free(&buf);
}

static void test_round_trips(void) {
    case_step c;
    /* A prefill chunk (prompt logprobs, the next chunk's first token) beside decode rows. */
    const int mixed[4] = {5, 1, 1, 3};
    case_init(&c, 4, mixed, 6, 3, true);
    c.params[0].prompt_logprobs = 5, c.params[0].temperature = 0;
    c.params[1].temperature = 0.7f, c.params[1].top_p = 0.9f, c.params[1].top_k = 40;
    c.params[1].min_p = 0.05f, c.params[1].seed = 0xfedcba9876543210ull,
    c.params[1].has_seed = true;
    c.params[1].logprobs = 3;
    c.params[2].presence_penalty = 0.5f, c.params[2].frequency_penalty = -0.25f;
    c.params[2].repetition_penalty = 1.1f, c.params[2].constrained = true;
    c.bias[0] = (logit_bias_entry){17, -100.0f}, c.bias[1] = (logit_bias_entry){201087, 2.5f};
    c.params[3].logit_bias = c.bias, c.params[3].n_logit_bias = 2;
    const int32_t fix[6] = {3, 42, 10, 7, 24, 201087};
    round_trip("prefill + decode", &c, fix, 3, 0);
    round_trip("the same, later in the run", &c, fix, 3, 4000000000u);

    /* Decode only, no prompt_next, no fix-ups; every table entry used (nothing trimmed). */
    const int dec[3] = {1, 1, 1};
    case_init(&c, 3, dec, 2, 2, false);
    for (int i = 0; i < 6; i++) c.full[i] = 9 + i, c.swa[i] = 3 + i;
    round_trip("decode rows", &c, NULL, 0, 1);

    /* A table row of -1s only (a sequence without full layers' blocks yet) and a stride of 0. */
    case_init(&c, 3, dec, 2, 0, false);
    c.full[2] = c.full[3] = -1;
    round_trip("empty table rows", &c, NULL, 0, 2);

    /* DEP: two ranks' parts. */
    case_init(&c, 4, mixed, 6, 3, true);
    c.st.dp_size = 2, c.st.dp_seq0[0] = 0, c.st.dp_seq0[1] = 1, c.st.dp_seq0[2] = 4;
    round_trip("DEP parts", &c, NULL, 0, 3);

    /* An empty step (a DEP rank's part may have none). */
    case_init(&c, 0, mixed, 6, 3, false);
    round_trip("empty step", &c, fix, 1, 5);

    step_wire_buf buf = {0};
    step_wire_encode_shutdown(&buf, 77);
    step_wire_header h;
    CHECK(buf.len == STEP_WIRE_HEADER_BYTES && step_wire_header_read(buf.data, buf.len, &h) == 0 &&
              h.kind == STEP_WIRE_SHUTDOWN && h.seq == 77 && h.payload_bytes == 0,
          "shutdown: %s", err_msg());
    step_wire_step m;
    CHECK(step_wire_decode_step(&h, NULL, 0, &m) == -1, "a shutdown decoded as a step");
    CHECK_MSG_HAS(err_msg(), "not a step message");
    step_wire_buf_free(&buf);
}

/* ---- bad messages ---- */

static void le32_at(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Rewrites the header's length and checksum after the payload was changed, so that the change
 * reaches the field checks. */
static void reseal(step_wire_buf *b) {
    unsigned char *p = b->data;
    const size_t n = b->len - STEP_WIRE_HEADER_BYTES;
    le32_at(p + 12, step_wire_checksum(p + STEP_WIRE_HEADER_BYTES, n));
    le32_at(p + 16, (uint32_t)n), le32_at(p + 20, 0);
}

/* Decodes buf whole; expects a refusal naming `frag`. */
static void refused(const char *what, const step_wire_buf *b, const char *frag) {
    step_wire_header h;
    step_wire_step m;
    memset(&m, 0, sizeof m);
    int rc = step_wire_header_read(b->data, b->len, &h);
    if (rc == 0)
        rc = step_wire_decode_step(&h, b->data + STEP_WIRE_HEADER_BYTES,
                                   b->len - STEP_WIRE_HEADER_BYTES, &m);
    CHECK(rc == -1, "%s: accepted", what);
    if (rc == 0) step_wire_step_free(&m);
    CHECK_MSG_HAS(err_msg(), frag);
    CHECK(rc == -1 && m.st.token_ids == NULL, "%s: a refused message left arrays behind", what);
}

static void encode(step_wire_buf *b, const case_step *c) {
    const int32_t fix[2] = {3, 42};
    CHECK(step_wire_encode_step(b, 9, &c->st, fix, 1) == 0, "encode: %s", err_msg());
}

/* Payload offsets of the first fields (step_wire.h's layout). */
enum { OFF_N_SEQS = 0, OFF_N_TOKENS = 4, OFF_FULL_STRIDE = 12, OFF_FLAGS = 36, OFF_TOKENS = 37 };

static void test_bad_messages(void) {
    case_step c;
    const int mixed[4] = {5, 1, 1, 3};
    case_init(&c, 4, mixed, 6, 3, true);
    c.params[3].logit_bias = c.bias, c.params[3].n_logit_bias = 1;
    step_wire_buf good = {0}, b = {0};
    encode(&good, &c);
    const size_t P = good.len - STEP_WIRE_HEADER_BYTES;
    unsigned char *hdr = good.data;
/* b = a copy of good, with room for one more byte */
#define FRESH()                                                                                    \
    (b.data = realloc(b.data, good.len + 1), memcpy(b.data, good.data, good.len),                  \
     b.len = good.len, b.cap = good.len + 1)

    /* The header. */
    step_wire_header h;
    CHECK(step_wire_header_read(hdr, STEP_WIRE_HEADER_BYTES - 1, &h) == -1, "short header");
    CHECK_MSG_HAS(err_msg(), "a header of 31 bytes");
    FRESH(), b.data[0] ^= 0xff;
    refused("bad magic", &b, "not a step message (magic");
    FRESH(), b.data[4] = STEP_WIRE_VERSION + 1;
    refused("other version", &b, "every node must run the same gptoss");
    FRESH(), b.data[6] = 9;
    refused("unknown kind", &b, "unknown message kind 9");
    FRESH(), b.data[30] = 1;
    refused("reserved field", &b, "reserved field");
    FRESH(), le32_at(b.data + 20, 1);
    refused("huge payload", &b, "payload bytes");

    /* The payload as a whole: truncated, padded, corrupt. */
    CHECK(step_wire_header_read(hdr, good.len, &h) == 0, "good header: %s", err_msg());
    step_wire_step m;
    CHECK(step_wire_decode_step(&h, hdr + STEP_WIRE_HEADER_BYTES, P - 1, &m) == -1,
          "truncated payload");
    CHECK_MSG_HAS(err_msg(), "the header says");
    FRESH(), b.data[b.len - 5] ^= 1;
    refused("a flipped bit", &b, "checksum");
    FRESH(), b.len -= 4, reseal(&b);
    refused("truncated and resealed", &b, "n_fixups");
    FRESH(), b.data[b.len++] = 0, reseal(&b);
    refused("a byte left over", &b, "bytes left over");
    for (size_t cut = 0; cut < P; cut += 7) { /* every prefix of the payload: refused, in bounds */
        FRESH(), b.len = STEP_WIRE_HEADER_BYTES + cut, reseal(&b);
        refused("a prefix", &b, "step wire: a bad step message");
    }

    /* Counts and fields out of range (resealed, so the field checks see them). */
    FRESH(), le32_at(b.data + STEP_WIRE_HEADER_BYTES + OFF_N_SEQS, 0x7fffffff), reseal(&b);
    refused("n_seqs past the payload", &b, "n_seqs");
    FRESH(), le32_at(b.data + STEP_WIRE_HEADER_BYTES + OFF_N_SEQS, (uint32_t)-1), reseal(&b);
    refused("negative n_seqs", &b, "n_seqs");
    FRESH(), le32_at(b.data + STEP_WIRE_HEADER_BYTES + OFF_N_TOKENS, 1u << 30), reseal(&b);
    refused("n_tokens past the payload", &b, "n_tokens");
    FRESH(), le32_at(b.data + STEP_WIRE_HEADER_BYTES + OFF_FULL_STRIDE, 1u << 30), reseal(&b);
    refused("a huge table", &b, "block table size");
    FRESH(), b.data[STEP_WIRE_HEADER_BYTES + OFF_FLAGS] = 0x80, reseal(&b);
    refused("unknown flags", &b, "flags");

    /* Through the encoder: steps the reader must not take. */
    case_init(&c, 4, mixed, 6, 3, true);
    c.qs[2] = c.qs[1] - 1;
    encode(&b, &c);
    refused("query_start falling", &b, "query_start (not rising)");
    case_init(&c, 4, mixed, 6, 3, true);
    c.qs[0] = 1;
    encode(&b, &c);
    refused("query_start not from 0", &b, "query_start (not from 0 to n_tokens)");
    case_init(&c, 4, mixed, 6, 3, true);
    c.sp[1] = -3;
    encode(&b, &c);
    refused("a negative position", &b, "positions or lengths");
    case_init(&c, 4, mixed, 6, 3, true);
    c.st.dp_size = 2, c.st.dp_seq0[1] = 3, c.st.dp_seq0[2] = 2;
    encode(&b, &c);
    refused("DEP parts out of order", &b, "dp_seq0");
    case_init(&c, 4, mixed, 6, 3, true);
    c.st.dp_size = 3;
    encode(&b, &c);
    refused("too many DEP ranks", &b, "dp_size");
    /* a boolean that is neither 0 nor 1: the first row's sample flag */
    case_init(&c, 4, mixed, 6, 3, true);
    encode(&b, &c);
    const size_t sample_at = STEP_WIRE_HEADER_BYTES + OFF_TOKENS + (size_t)c.st.n_tokens * 8 + 12;
    b.data[sample_at] = 2, reseal(&b);
    refused("a boolean of 2", &b, "sample");
    /* a table row longer than its stride: the first full table's length comes after the tokens,
     * the rows (each its fixed fields, prompt_next, the fixed parameters; good's row 3 has one
     * logit bias entry) and query_start */
    FRESH();
    const int n = 4, T = 10;
    const size_t table_at = STEP_WIRE_HEADER_BYTES + OFF_TOKENS + (size_t)T * 8 +
                            (size_t)n * (5 * 4 + 2 + 4 + 50) + 8 + (size_t)(n + 1) * 4;
    CHECK(b.data[table_at] == 1, "the first full table's length is %d, expected 1",
          b.data[table_at]);
    le32_at(b.data + table_at, 7), reseal(&b);
    refused("a table longer than its stride", &b, "full block table");
    /* the encoder refuses what it cannot describe */
    case_init(&c, 4, mixed, 6, 3, true);
    CHECK(step_wire_encode_step(&b, 0, &c.st, NULL, -1) == -1, "negative fix-ups encoded");
    CHECK_MSG_HAS(err_msg(), "cannot be sent");
#undef FRESH
    step_wire_buf_free(&good);
    free(b.data);
}

int main(void) {
    test_round_trips();
    test_bad_messages();
    return check_report("test_step_wire");
}
