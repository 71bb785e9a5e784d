/* A long randomised run of the engine (CPU backend, a small synthetic model): requests arrive at
 * random with random lengths and sampling parameters, some with stop strings or n > 1, some are
 * cancelled at random moments, the KV pool is small enough to force preemption. Every request must
 * end with exactly one final event, no more tokens than asked, and at the end nothing may remain
 * in use (KV usage 0, nothing running or waiting). Run under ASan/UBSan in CI and under valgrind by
 * hand (GPTOSS_SOAK_STEPS lowers the length). */
#include "check.h"

#include "base/error.h"
#include "base/rng.h"
#include "engine/engine.h"
#include "model/synthetic.h"

#include <stdlib.h>
#include <unistd.h>

enum { MAX_REQ = 400 };

typedef struct {
    int finals, tokens, max_tokens, n, finals_per_index[4];
    const char *reason;
    bool aborted;
} req_state;

static req_state reqs[MAX_REQ];

static void on_output(const engine_output *o, void *user) {
    req_state *r = user;
    r->tokens += o->n_tokens;
    if (o->finished) {
        r->finals++;
        if (o->index >= 0 && o->index < 4) r->finals_per_index[o->index]++;
        r->reason = o->finish_reason;
        CHECK(o->completion_tokens <= r->max_tokens, "request %ld: %d tokens > max %d",
              (long)(r - reqs), o->completion_tokens, r->max_tokens);
    }
}

static const char *token_bytes(void *ctx, int32_t id, size_t *len) {
    static const char *letters = "abcdefghijklmnopqrstuvwxyz";
    (void)ctx;
    *len = 1;
    return letters + (id % 26);
}

int main(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/gptoss-soak-%d", (int)getpid());
    model_config c;
    config_preset_tiny(&c);
    c.n_layers = 2;
    c.vocab = 1024;
    c.pad_token = 1023;
    if (synthetic_write(&c, dir, 5, 1) != 0) return fprintf(stderr, "%s\n", err_msg()), 1;
    const char *env = getenv("GPTOSS_SOAK_STEPS");
    int steps = env ? atoi(env) : 1500;

    for (int variant = 0; variant < 2; variant++) {
        memset(reqs, 0, sizeof reqs);
        backend_options bo = {.model = dir,
                              .block_size = 16,
                              .num_full_blocks = 40,
                              .num_swa_blocks = 40,
                              .max_slots = 8,
                              .max_model_len = 512};
        backend *b;
        if (cpu_backend_ops.create(&bo, &b) != 0) return fprintf(stderr, "%s\n", err_msg()), 1;
        engine_options o;
        engine_options_default(&o);
        o.max_num_seqs = 8, o.max_num_batched_tokens = 96, o.max_model_len = 512,
        o.stream_interval = 3;
        o.async_scheduling = variant == 0;
        o.token_bytes = token_bytes;
        engine *e;
        if (engine_create(&o, &cpu_backend_ops, b, &e) != 0)
            return fprintf(stderr, "%s\n", err_msg()), 1;
        rng_t r;
        rng_seed(&r, 42 + variant);
        int n_req = 0;
        for (int s = 0; s < steps || engine_step(e) > 0; s++) {
            if (s >= steps) continue;
            if (n_req < MAX_REQ && rng_next(&r) % 3 == 0) {
                int32_t prompt[200];
                int len = 1 + (int)(rng_next(&r) % 200);
                for (int t = 0; t < len; t++)
                    prompt[t] = (int32_t)(rng_next(&r) % (t < 40 ? 4 : 1024));
                engine_request q = {0};
                q.id = (uint64_t)n_req;
                q.prompt = prompt, q.n_prompt = len;
                q.params = sampling_params_default();
                q.params.temperature = (rng_next(&r) % 2) ? 0.0f : 0.9f;
                q.params.top_p = 0.5f + 0.5f * (float)(rng_next(&r) % 2);
                q.params.top_k = (int)(rng_next(&r) % 3) * 10;
                q.params.repetition_penalty = (rng_next(&r) % 4 == 0) ? 1.2f : 1.0f;
                q.params.logprobs = (int)(rng_next(&r) % 3);
                q.params.prompt_logprobs = rng_next(&r) % 8 == 0 ? 2 : 0;
                q.max_tokens = 1 + (int)(rng_next(&r) % 40);
                q.n = 1 + (int)(rng_next(&r) % 8 == 0 ? 2 : 0);
                q.ignore_eos = true;
                const char *stops[] = {"ab", "zzz"};
                q.stop_strings = stops, q.n_stop_strings = rng_next(&r) % 4 == 0 ? 2 : 0;
                q.on_output = on_output, q.user = &reqs[n_req];
                reqs[n_req].max_tokens = q.max_tokens, reqs[n_req].n = q.n;
                CHECK(engine_submit(e, &q) == 0, "submit: %s", err_msg());
                n_req++;
            }
            if (n_req > 0 && rng_next(&r) % 7 == 0) {
                int victim = (int)(rng_next(&r) % (uint64_t)n_req);
                reqs[victim].aborted = true;
                engine_abort(e, (uint64_t)victim);
            }
            CHECK(engine_step(e) >= 0, "engine_step failed: %s", err_msg());
        }
        engine_metrics m;
        engine_get_metrics(e, &m);
        CHECK(m.num_requests_running == 0 && m.num_requests_waiting == 0,
              "left: %d running, %d waiting", m.num_requests_running, m.num_requests_waiting);
        CHECK(m.kv_cache_usage == 0, "KV still in use: %g", m.kv_cache_usage);
        if (steps >= 1000)
            CHECK(m.num_preemptions > 0, "variant %d: no preemption with a small pool", variant);
        for (int i = 0; i < n_req; i++) {
            for (int k = 0; k < reqs[i].n; k++)
                CHECK(reqs[i].finals_per_index[k] == 1, "request %d sample %d: %d final events", i,
                      k, reqs[i].finals_per_index[k]);
            CHECK(reqs[i].aborted || strcmp(reqs[i].reason ? reqs[i].reason : "", "abort") != 0,
                  "request %d aborted without being cancelled", i);
        }
        fprintf(stderr, "soak variant %d: %d requests, %llu preemptions, %llu generated tokens\n",
                variant, n_req, (unsigned long long)m.num_preemptions,
                (unsigned long long)m.generation_tokens);
        engine_destroy(e);
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report("test_engine_soak");
}
