/* Loading what the server serves: the checkpoint (a synthetic one is written into the cache folder
 * the first time), the tokenizer, then the backend and the engine through runtime_build (the
 * builder generate and bench sweep use too). Runs on the main thread while the loops already
 * answer /health with 503. */
#include "server/server_internal.h"

#include "base/log.h"
#include "base/timeutil.h"

static const char *token_bytes(void *ctx, int32_t id, size_t *len) {
    /* Special tokens are not text a client sees: stop strings never match them. */
    if (tokenizer_is_special(ctx, id)) {
        *len = 0;
        return NULL;
    }
    return tokenizer_token_bytes(ctx, id, len);
}

int server_load_model(server *s) {
    const server_options *o = &s->opt;
    double t0 = now_seconds();
    s->model_dir = runtime_resolve_model(&o->rt);
    if (!s->model_dir) return -1;
    s->tok = tokenizer_load_for_model(s->model_dir);
    if (!s->tok) return -1;
    runtime_args ra = o->rt;
    ra.eng.token_bytes = token_bytes;
    ra.eng.token_bytes_ctx = s->tok;
    /* Built once (about a second for o200k): every constrained request's masks read it. */
    double tv = now_seconds();
    s->gvocab = grammar_vocab_new(s->tok);
    if (!s->gvocab) return -1;
    log_info("structured output: vocabulary trie of %d tokens in %.2f s",
             grammar_vocab_size(s->gvocab), now_seconds() - tv);
    ra.eng.grammar_vocab = s->gvocab;
    runtime rt;
    if (runtime_build(&ra, s->model_dir, &rt) != 0) return -1;
    s->eng = rt.eng;
    s->max_model_len = rt.max_model_len;
    s->api.served_model_name = s->model_name;
    s->api.max_model_len = s->max_model_len;
    s->api.default_max_tokens = 0; /* up to the model length */
    s->api.max_echo_bytes = s->opt.max_echo_bytes;
    s->api.current_date = NULL;
    if (o->responses_store_size > 0) {
        resp_store_limits lim = {o->responses_store_size, o->responses_store_bytes,
                                 o->responses_store_ttl};
        s->api.store = resp_store_new(&lim);
    }
    log_info("loaded %s (%s backend, max_model_len %d) in %.1f s", s->model_dir, rt.ops->name,
             s->max_model_len, now_seconds() - t0);
    return 0;
}
