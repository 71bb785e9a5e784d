/* Loading what the server serves: the checkpoint (a synthetic one is written into the cache folder
 * the first time), the tokenizer, the backend and the engine. Runs on the main thread while the
 * loops already answer /health with 503. */
#include "server/server_internal.h"

#include "base/error.h"
#include "base/files.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "model/synthetic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *token_bytes(void *ctx, int32_t id, size_t *len) {
    return tokenizer_token_bytes(ctx, id, len);
}

int server_load_model(server *s) {
    const server_options *o = &s->opt;
    double t0 = now_seconds();
    s->model_dir = synthetic_resolve(o->model, o->backend);
    if (!s->model_dir) return err_prefix("--model %s", o->model);
    s->tok = tokenizer_load_for_model(s->model_dir);
    if (!s->tok) return -1;
    const backend_ops *ops = backend_find(o->backend);
    if (!ops) return err_set("--backend %s: not available in this build", o->backend);
    backend_options bo = {.model = s->model_dir,
                          .block_size = o->block_size > 0 ? o->block_size : 32,
                          .num_full_blocks = o->num_kv_blocks,
                          .num_swa_blocks = o->num_kv_blocks,
                          .max_slots = o->eng.max_num_seqs,
                          .max_model_len = o->eng.max_model_len,
                          .gpu_memory_utilization = o->gpu_memory_utilization};
    backend *b = NULL;
    if (ops->create(&bo, &b) != 0) {
        if (b) ops->destroy(b);
        return err_prefix("loading %s", s->model_dir);
    }
    int max_pos = ops->config(b)->max_position;
    engine_options eo = o->eng;
    /* A sequence longer than the whole full-attention KV pool could never be scheduled: the
     * default model length is what the pool holds, and a larger --max-model-len is refused (as
     * vLLM does) instead of leaving such requests waiting forever. */
    int n_full = 0, n_swa = 0, block_size = 0;
    ops->kv_blocks(b, &n_full, &n_swa, &block_size);
    long capacity = n_full > 0 ? (long)n_full * block_size : (long)max_pos;
    if (eo.max_model_len <= 0)
        eo.max_model_len = (int)(capacity < max_pos ? capacity : max_pos);
    else if (eo.max_model_len > capacity) {
        ops->destroy(b);
        return err_set(
            "--max-model-len %d is more than the KV cache holds (%ld tokens); lower it or raise "
            "--num-kv-blocks",
            eo.max_model_len, capacity);
    }
    eo.token_bytes = token_bytes;
    eo.token_bytes_ctx = s->tok;
    if (engine_create(&eo, ops, b, &s->eng) != 0) return -1;
    s->max_model_len =
        eo.max_model_len > 0 && eo.max_model_len < max_pos ? eo.max_model_len : max_pos;
    s->api.served_model_name = s->model_name;
    s->api.max_model_len = s->max_model_len;
    s->api.default_max_tokens = 0; /* up to the model length */
    s->api.current_date = NULL;
    log_info("loaded %s (%s backend, max_model_len %d) in %.1f s", s->model_dir, ops->name,
             s->max_model_len, now_seconds() - t0);
    return 0;
}
