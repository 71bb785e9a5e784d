#include "model/synthetic.h"

#include "base/error.h"
#include "base/files.h"
#include "base/log.h"
#include "base/numfmt.h"
#include "base/rng.h"
#include "base/xalloc.h"
#include "model/safetensors_write.h"
#include "model/tensors.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void config_preset_tiny(model_config *c) {
    config_preset_20b(c);
    c->n_layers = 4;
    c->n_experts = 8;
    c->hidden = 64;
    c->intermediate = 64;
    c->n_heads = 8;
    c->n_kv_heads = 2;
    c->head_dim = 16;
    c->sliding_window = 16;
    for (int i = 0; i < c->n_layers; i++) c->layer_sliding[i] = (i % 2 == 0);
}

int config_preset(const char *name, model_config *c) {
    if (!strcmp(name, "tiny"))
        config_preset_tiny(c);
    else if (!strcmp(name, "20b"))
        config_preset_20b(c);
    else if (!strcmp(name, "120b"))
        config_preset_120b(c);
    else
        return err_set("unknown preset '%s' (expected tiny, 20b or 120b)", name);
    return 0;
}

/* The table of synthetic.h's synthetic_draw_for. */
synthetic_draw synthetic_draw_for(const model_config *c, enum tensor_kind k) {
    double H = c->hidden, Q = (double)c->n_heads * c->head_dim, I = c->intermediate;
    switch (k) {
    case TK_EMBED:
        return (synthetic_draw){0, 1.0};
    case TK_ATTN_NORM:
    case TK_MLP_NORM:
    case TK_FINAL_NORM:
        return (synthetic_draw){1.0, 0.1};
    case TK_Q_W:
    case TK_K_W:
    case TK_V_W:
        return (synthetic_draw){0, 1.0 / sqrt(H)};
    case TK_Q_B:
    case TK_K_B:
    case TK_V_B:
        return (synthetic_draw){0, 0.1};
    case TK_O_W:
        return (synthetic_draw){0, 0.5 / sqrt(Q)};
    case TK_O_B:
        return (synthetic_draw){0, 0.02};
    case TK_SINKS:
        return (synthetic_draw){0.5, 1.0};
    case TK_ROUTER_W:
        return (synthetic_draw){0, 2.0 / sqrt(H)};
    case TK_ROUTER_B:
        return (synthetic_draw){0, 0.1};
    case TK_GATE_UP_BLOCKS:
        return (synthetic_draw){0, 1.0 / sqrt(H)};
    case TK_DOWN_BLOCKS:
        return (synthetic_draw){0, 0.5 / sqrt(I)};
    case TK_GATE_UP_BIAS:
        return (synthetic_draw){0, 0.05};
    case TK_DOWN_BIAS:
        return (synthetic_draw){0, 0.02};
    case TK_LM_HEAD:
        return (synthetic_draw){0, 3.0 / sqrt(H)};
    default:
        return (synthetic_draw){0, 0};
    }
}

/* Approximately standard normal from 64 random bits: the sum of four 16-bit uniforms (Irwin-Hall),
 * centred and scaled to unit variance. Cheap enough to write 20 GB at disk speed. */
static inline float approx_normal(uint64_t bits) {
    uint32_t s = (uint32_t)(bits & 0xffff) + (uint32_t)((bits >> 16) & 0xffff) +
                 (uint32_t)((bits >> 32) & 0xffff) + (uint32_t)(bits >> 48);
    return ((float)s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

enum { CHUNK = 1 << 16 };

static void fill_dense(uint16_t *out, uint64_t n, uint64_t key, synthetic_draw d) {
    uint64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 16)
    for (uint64_t ch = 0; ch < chunks; ch++) {
        uint64_t end = (ch + 1) * CHUNK < n ? (ch + 1) * CHUNK : n;
        for (uint64_t i = ch * CHUNK; i < end; i++)
            out[i] = f32_to_bf16((float)d.mean + (float)d.std * approx_normal(rng_hash2(key, i)));
    }
}

/* MXFP4 codes: uniformly random nibbles (RMS of the e2m1 values is sqrt(8.5625) = 2.926), so the scale
 * exponent that gives a target standard deviation is log2(std / 2.926), jittered by ±1 per block so
 * blocks differ as in real checkpoints. */
static void fill_blocks(uint8_t *out, uint64_t n, uint64_t key) {
    uint64_t words = n / 8, chunks = (words + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 16)
    for (uint64_t ch = 0; ch < chunks; ch++) {
        uint64_t end = (ch + 1) * CHUNK < words ? (ch + 1) * CHUNK : words;
        for (uint64_t i = ch * CHUNK; i < end; i++) {
            uint64_t bits = rng_hash2(key, i);
            memcpy(out + 8 * i, &bits, 8);
        }
    }
    for (uint64_t i = words * 8; i < n; i++) out[i] = (uint8_t)rng_hash2(key, i);
}

static void fill_scales(uint8_t *out, uint64_t n, uint64_t key, double std) {
    int base = 127 + (int)lround(log2(std / 2.926));
    uint64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 16)
    for (uint64_t ch = 0; ch < chunks; ch++) {
        uint64_t end = (ch + 1) * CHUNK < n ? (ch + 1) * CHUNK : n;
        for (uint64_t i = ch * CHUNK; i < end; i++) {
            uint64_t r = rng_hash2(key, i) & 3;
            int s = base + (r == 0 ? -1 : r == 1 ? 1 : 0);
            out[i] = (uint8_t)(s < 0 ? 0 : s > 254 ? 254 : s);
        }
    }
}

static uint64_t elements(const tensor_spec *s) {
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (uint64_t)s->shape[d];
    return n;
}

static void fill_tensor(const model_config *c, const tensor_spec *s, int index, uint64_t seed,
                        void *out) {
    uint64_t key = splitmix64(seed * 0x100000001b3ull + (uint64_t)index);
    uint64_t n = elements(s);
    switch (s->kind) {
    case TK_GATE_UP_BLOCKS:
    case TK_DOWN_BLOCKS:
        fill_blocks(out, n, key);
        break;
    case TK_GATE_UP_SCALES:
        fill_scales(out, n, key, synthetic_draw_for(c, TK_GATE_UP_BLOCKS).std);
        break;
    case TK_DOWN_SCALES:
        fill_scales(out, n, key, synthetic_draw_for(c, TK_DOWN_BLOCKS).std);
        break;
    default:
        fill_dense(out, n, key, synthetic_draw_for(c, s->kind));
        break;
    }
}

static char *shard_name(int i, int n) {
    return xasprintf("model-%05d-of-%05d.safetensors", i, n - 1);
}

static int write_text(const char *dir, const char *name, const char *text) {
    char *p = path_join(dir, name);
    int rc = file_write_all(p, text, strlen(text));
    free(p);
    return rc;
}

static int copy_file(const char *from, const char *to) {
    size_t n;
    char *data = file_read_all(from, &n);
    if (!data) return -1;
    int rc = file_write_all(to, data, n);
    free(data);
    return rc;
}

/* The tokenizer files sit beside the weights in real releases. They only make sense with the real
 * vocabulary; smaller test vocabularies get none (and are driven with --prompt-ids). */
static void copy_tokenizer(const model_config *c, const char *out_dir) {
    if (c->vocab != 201088) return;
    char *cache = cache_dir();
    const char *names[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char *tokdir = path_join(cache, "tokenizer");
        char *from = path_join(tokdir, names[i]);
        char *to = path_join(out_dir, names[i]);
        if (!file_exists(from))
            log_warn("%s not found (run scripts/setup.sh): the checkpoint has no %s", from,
                     names[i]);
        else if (copy_file(from, to) != 0)
            log_warn("copying the tokenizer: %s", err_msg());
        free(tokdir), free(from), free(to);
    }
    free(cache);
}

static int write_index(const st_writer *shards, int n_shards, const char *out_dir) {
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    uint64_t total = 0;
    for (int s = 0; s < n_shards; s++) {
        char *name = shard_name(s, n_shards);
        for (int i = 0; i < shards[s].n; i++)
            json_object_set_new(map, shards[s].entries[i].name, json_string(name));
        total += st_writer_data_bytes(&shards[s]);
        free(name);
    }
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "weight_map", map);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    char *text = xasprintf("%s\n", s);
    int rc = write_text(out_dir, "model.safetensors.index.json", text);
    free(s), free(text);
    return rc;
}

int synthetic_write(const model_config *c, const char *out_dir, uint64_t seed, int n_shards) {
    if (dir_make_p(out_dir) != 0) return -1;
    int n = tensor_count(c);
    tensor_spec *specs = xmalloc((size_t)n * sizeof *specs);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        tensor_spec_at(c, i, &specs[i]);
        total += elements(&specs[i]) * st_dtype_size(specs[i].dtype);
    }
    if (n_shards < 1) n_shards = 1;
    if (n_shards > n) n_shards = n;

    /* Tensors go to shards in checkpoint order, a new shard starting once the running total passes the
     * next equal share, as the release's converter packs them. */
    st_writer *shards = xcalloc((size_t)n_shards, sizeof *shards);
    int *shard_of = xmalloc((size_t)n * sizeof *shard_of),
        *index_in = xmalloc((size_t)n * sizeof *index_in);
    for (int s = 0; s < n_shards; s++) st_writer_init(&shards[s]);
    uint64_t running = 0;
    int cur = 0;
    for (int i = 0; i < n; i++) {
        if (cur < n_shards - 1 && running >= total / (uint64_t)n_shards * (uint64_t)(cur + 1) &&
            shards[cur].n > 0)
            cur++;
        shard_of[i] = cur;
        index_in[i] = st_writer_add(&shards[cur], specs[i].name, specs[i].dtype, specs[i].ndim,
                                    specs[i].shape);
        running += elements(&specs[i]) * st_dtype_size(specs[i].dtype);
    }
    int rc = 0;
    for (int s = 0; s < n_shards && rc == 0; s++) {
        char *name = shard_name(s, n_shards), *path = path_join(out_dir, name);
        rc = st_writer_open(&shards[s], path);
        free(name), free(path);
    }
    for (int i = 0; i < n && rc == 0; i++)
        fill_tensor(c, &specs[i], i, seed, st_writer_tensor(&shards[shard_of[i]], index_in[i]));
    for (int s = 0; s < n_shards; s++)
        if (st_writer_close(&shards[s]) != 0 && rc == 0) rc = -1;
    if (rc == 0) rc = write_index(shards, n_shards, out_dir);
    if (rc == 0) {
        char *cfg = config_to_json(c);
        rc = write_text(out_dir, "config.json", cfg);
        free(cfg);
    }
    if (rc == 0)
        rc = write_text(out_dir, "generation_config.json",
                        "{\n  \"bos_token_id\": 199998,\n  \"do_sample\": true,\n  "
                        "\"eos_token_id\": [\n    200002,\n"
                        "    199999,\n    200012\n  ],\n  \"pad_token_id\": 199999,\n  "
                        "\"transformers_version\": "
                        "\"4.55.0.dev0\"\n}\n");
    if (rc == 0) copy_tokenizer(c, out_dir);
    for (int s = 0; s < n_shards; s++) st_writer_free(&shards[s]);
    free(shards), free(shard_of), free(index_in), free(specs);
    return rc;
}
