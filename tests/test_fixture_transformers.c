/* The CPU reference backend against Hugging Face transformers' GptOss (float32, eager attention with
 * sinks, MXFP4 decoded by transformers itself). The fixtures were made on the GPU machine by
 * scripts/make_fixtures.py:
 *   tiny   — written by `gptoss make-model --preset tiny --vocab 1024 --seed 7` (sharded, rope_scaling),
 *   pyckpt — written by safetensors' own Python writer (one file, rope_parameters, other shapes).
 * For every prompt (lengths 1..100, past the sliding window) every position's logits must agree within
 * max|Δ| / max|logit| <= 1e-4, and the 8-token greedy continuation must be the same. */
#include "check.h"

#include "backend/cpu/cpu_model.h"
#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"
#include "step/sampler.h"
#include "model/weights.h"

#include <stdlib.h>

static const st_tensor *find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static void check_fixture(const char *name) {
    char dir[512], ref_path[512];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", GPTOSS_SOURCE_DIR, name);
    snprintf(ref_path, sizeof ref_path, "%s/tests/fixtures/%s_reference.safetensors",
             GPTOSS_SOURCE_DIR, name);
    model_weights w;
    int rc = weights_load(dir, &w);
    CHECK(rc == 0, "%s: load failed: %s", name, err_msg());
    if (rc) return;
    st_file ref;
    rc = st_file_open(ref_path, &ref);
    CHECK(rc == 0, "%s: reference: %s", name, err_msg());
    if (rc) {
        weights_free(&w);
        return;
    }
    cpu_model m;
    cpu_model_init(&m, &w);
    const int V = w.cfg.vocab;
    int prompts = 0;
    for (int p = 0;; p++) {
        char key[64];
        snprintf(key, sizeof key, "p%d.ids", p);
        const st_tensor *ids_t = find(&ref, key);
        if (!ids_t) break;
        snprintf(key, sizeof key, "p%d.logits", p);
        const st_tensor *lg_t = find(&ref, key);
        snprintf(key, sizeof key, "p%d.greedy", p);
        const st_tensor *gr_t = find(&ref, key);
        CHECK(lg_t && gr_t && lg_t->dtype == ST_F32 && ids_t->dtype == ST_I64,
              "%s: prompt %d entries", name, p);
        if (!lg_t || !gr_t) break;
        int T = (int)ids_t->shape[0];
        CHECK(lg_t->shape[0] == T && lg_t->shape[1] == V, "%s: prompt %d logits shape", name, p);
        int32_t *ids = xmalloc((size_t)T * sizeof *ids);
        for (int t = 0; t < T; t++) ids[t] = (int32_t)((const int64_t *)ids_t->data)[t];
        float *logits = xmalloc((size_t)T * V * sizeof *logits);
        cpu_kv_cache kv;
        cpu_kv_init(&kv, &w.cfg);
        CHECK(cpu_forward(&m, &kv, ids, T, CPU_LOGITS_ALL, logits) == 0, "forward: %s", err_msg());
        const float *ref_lg = (const float *)lg_t->data;
        double max_abs = 0, max_diff = 0;
        int nonfinite = 0;
        for (size_t i = 0; i < (size_t)T * V; i++) {
            if (!isfinite(logits[i])) nonfinite++;
            max_abs = fmax(max_abs, fabs(ref_lg[i]));
            max_diff = fmax(max_diff, fabs((double)logits[i] - ref_lg[i]));
        }
        CHECK(nonfinite == 0, "%s: prompt %d: %d non-finite logits", name, p, nonfinite);
        CHECK(max_diff / max_abs <= 1e-4,
              "%s: prompt %d (len %d): max|Δlogit| %.3g / max|logit| %.3g = %.3g > 1e-4", name, p,
              T, max_diff, max_abs, max_diff / max_abs);
        fprintf(stderr, "%s prompt %d len %3d: max|Δ|/max|logit| = %.2e\n", name, p, T,
                max_diff / max_abs);

        /* Greedy continuation through the KV cache (one token at a time), as generation runs. */
        const int64_t *greedy = (const int64_t *)gr_t->data;
        const float *last = logits + (size_t)(T - 1) * V;
        for (int i = 0; i < (int)gr_t->shape[0]; i++) {
            int32_t tok = sampler_pick(last, V, 0, 0, 0);
            CHECK(tok == greedy[i], "%s: prompt %d: greedy token %d is %d, transformers gave %lld",
                  name, p, i, tok, (long long)greedy[i]);
            if (tok != greedy[i]) break;
            CHECK(cpu_forward(&m, &kv, &tok, 1, CPU_LOGITS_LAST, logits) == 0, "decode: %s",
                  err_msg());
            last = logits;
        }
        cpu_kv_free(&kv);
        free(ids), free(logits);
        prompts++;
    }
    CHECK(prompts >= 5, "%s: only %d prompts in the reference", name, prompts);
    st_file_close(&ref);
    weights_free(&w);
}

int main(void) {
    check_fixture("tiny");
    check_fixture("pyckpt");
    /* tiny64 (the real head geometry, for the CUDA kernels) is made by the same script. */
    if (file_exists(GPTOSS_SOURCE_DIR "/tests/fixtures/tiny64_reference.safetensors"))
        check_fixture("tiny64");
    return check_report("test_fixture_transformers");
}
