/* Structured output's constrained rows sampled on the device (the default,
 * src/backend/cuda/runner_masked.c) against the host path (GPTOSS_GPU_MASKS=0: a copy of the row, step_mask_apply and
 * sampler.c), through the engine on the CUDA backend with the random-weight tiny model (the real
 * vocabulary, so the real tokenizer's masks apply).
 *
 * Checks: the device path really ran (the backend's counters: constrained rows on the device, none
 * on the host) and the host path really ran; both give the same greedy tokens; seeded temperature
 * draws agree too (a draw may differ where u * z lies within rounding of a boundary, sampling.h: at
 * most one request may then diverge); every output is accepted by its grammar, token by token; and
 * the requests end by themselves (the grammars are finite: a complete output stops the sequence).
 * The engine runs several constrained sequences in one step, with and without CUDA graphs, so that
 * the rows' logits are copied aside from both the eager and the replayed lm_head.
 *
 * Needs the tokenizer (GPTOSS_CACHE/tokenizer/tokenizer.json, as scripts/device/prepare.sh carries
 * it); without it the test says SKIP and exits 77. --seed N reproduces a run; --cpu runs the same
 * requests on the CPU backend only (the grammar checks, on a machine without a GPU). */
#include "gpu_check.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
extern "C" {
#include "base/error.h"
#include "engine/constraint.h"
#include "engine/engine.h"
#include "tokenizer/grammar/grammar.h"
#include "model/synthetic.h"
#include "step/backend.h"
#include "tokenizer/bpe.h"
}
#pragma GCC diagnostic pop
#include "backend/cuda/cuda_backend.h"

#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

static grammar_vocab *g_vocab;

/* The constrained requests: a regex, a JSON schema (a pattern, an enum, an array) and a choice, each
 * greedy and at temperature 0.9. All are finite, so that even the random model's outputs end. */
static const char *const REGEX = "[a-z]{1,8}( [a-z]{1,8}){0,5}\\.";
static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"pattern\":"
    "\"^[a-z]{1,10}$\"},\"kind\":{\"enum\":[\"cat\",\"dog\",\"fox\"]},\"tags\":{\"type\":"
    "\"array\",\"items\":{\"enum\":[1,2,3]},\"maxItems\":3}},\"required\":[\"name\",\"kind\","
    "\"tags\"],\"additionalProperties\":false}";
static const char *const CHOICES[] = {"alpha", "beta gamma", "delta"};

static grammar *make_grammar(int kind) {
    if (kind == 0) return grammar_compile_regex(REGEX, strlen(REGEX));
    if (kind == 1) return grammar_compile_json_schema(SCHEMA, strlen(SCHEMA), NULL);
    size_t lens[3];
    for (int i = 0; i < 3; i++) lens[i] = strlen(CHOICES[i]);
    return grammar_compile_choice(CHOICES, lens, 3);
}

typedef struct {
    std::vector<int32_t> toks;
    std::string finish;
    bool done;
} req_out;

static void on_out(const engine_output *o, void *user) {
    req_out *r = (req_out *)user;
    for (int i = 0; i < o->n_tokens; i++) r->toks.push_back(o->tokens[i]);
    if (o->finished) r->done = true, r->finish = o->finish_reason ? o->finish_reason : "";
}

enum { N_REQ = 6 };

/* One engine run of the N_REQ requests on the CUDA backend, the device path on or off (or on the
 * CPU backend: stats NULL). */
static std::vector<req_out> run(const char *dir, bool device_masks, bool graphs,
                                const std::vector<std::vector<int32_t>> &prompts,
                                cuda_backend_stats *stats) {
    const backend_ops *ops = stats ? &cuda_backend_ops : &cpu_backend_ops;
    std::vector<req_out> outs(N_REQ);
    if (device_masks)
        unsetenv("GPTOSS_GPU_MASKS"); /* the default */
    else
        setenv("GPTOSS_GPU_MASKS", "0", 1);
    backend_options bo;
    memset(&bo, 0, sizeof bo);
    bo.model = dir, bo.block_size = 32, bo.num_full_blocks = 256, bo.num_swa_blocks = 256;
    bo.max_slots = 8, bo.max_model_len = 512;
    bo.enforce_eager = !graphs;
    backend *b = NULL;
    if (ops->create(&bo, &b) != 0) {
        CHECK(false, "%s backend: %s", ops->name, err_msg());
        return outs;
    }
    engine_options eo;
    engine_options_default(&eo);
    eo.max_num_seqs = 8, eo.max_num_batched_tokens = 256, eo.max_model_len = 512;
    eo.grammar_vocab = g_vocab;
    engine *e = NULL;
    if (engine_create(&eo, ops, b, &e) != 0) {
        CHECK(false, "engine: %s", err_msg());
        return outs;
    }
    for (int k = 0; k < N_REQ; k++) {
        engine_request r;
        memset(&r, 0, sizeof r);
        r.id = (uint64_t)k + 1;
        r.prompt = prompts[k].data(), r.n_prompt = (int)prompts[k].size();
        r.params = sampling_params_default();
        r.params.temperature = k % 2 ? 0.9f : 0.0f;
        r.params.has_seed = true, r.params.seed = 1000 + (uint64_t)k;
        r.params.logprobs = k == 3 ? 2 : 0; /* a top-K list on one masked row */
        r.max_tokens = 120, r.n = 1;
        r.constraint = constraint_new_root(make_grammar(k / 2));
        r.on_output = on_out, r.user = &outs[k];
        CHECK(engine_submit(e, &r) == 0, "submit %d: %s", k, err_msg());
        constraint_unref(r.constraint);
    }
    CHECK(engine_run_until_idle(e) == 0, "run: %s", err_msg());
    if (stats) cuda_backend_get_stats(b, stats);
    engine_destroy(e);
    unsetenv("GPTOSS_GPU_MASKS");
    return outs;
}

/* The grammar accepts the output token by token, and the output is complete: a sequence that
 * stopped by itself ("stop") ended where the grammar allows nothing more. */
static void check_grammar(const char *what, int k, const req_out &o) {
    grammar *g = make_grammar(k / 2);
    grammar_matcher *m = grammar_matcher_new(g, g_vocab);
    /* a stop token (<|return|>, <|call|>, ...) may end an output the grammar accepts */
    const int n =
        !o.toks.empty() && o.toks.back() >= 199998 ? (int)o.toks.size() - 1 : (int)o.toks.size();
    int i = 0;
    for (; i < n; i++)
        if (grammar_matcher_advance_token(m, o.toks[i]) < 0) break;
    CHECK(i == n && n > 0, "%s request %d: token %d of %d (%d) is outside the grammar", what, k, i,
          n, i < n ? o.toks[i] : -1);
    CHECK(o.done && o.finish == "stop", "%s request %d finished '%s' after %zu tokens", what, k,
          o.finish.c_str(), o.toks.size());
    grammar_matcher_free(m);
    grammar_free(g);
}

int main(int argc, char **argv) {
    const uint64_t seed = gpu_test_seed(argc, argv);
    printf("test_masked_sampling: seed %llu\n", (unsigned long long)seed);
    char *path = tokenizer_find_json(NULL);
    if (!path) {
        printf("SKIP: %s\n", err_msg());
        return 77;
    }
    tokenizer *tok = tokenizer_load(path);
    free(path);
    if (!tok) return fprintf(stderr, "tokenizer: %s\n", err_msg()), 1;
    g_vocab = grammar_vocab_new(tok);
    if (!g_vocab) return fprintf(stderr, "vocabulary: %s\n", err_msg()), 1;

    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/gptoss-test-masked-%d", (int)getpid());
    model_config c;
    config_preset_tiny(
        &c); /* the real vocabulary, and the attention shape the CUDA kernels take: */
    c.hidden = 128, c.n_heads = 16, c.n_kv_heads = 2, c.head_dim = 64, c.intermediate = 128;
    if (synthetic_write(&c, dir, seed, 1) != 0) return fprintf(stderr, "%s\n", err_msg()), 1;

    rng_t rng;
    rng_seed(&rng, seed);
    std::vector<std::vector<int32_t>> prompts(N_REQ);
    for (auto &p : prompts) {
        p.resize(5 + (size_t)rng_below(&rng, 60));
        for (auto &t : p) t = rng_below(&rng, 100000);
    }
    if (gpu_test_flag(argc, argv, "--cpu")) {
        std::vector<req_out> cpu = run(dir, false, false, prompts, NULL);
        for (int k = 0; k < N_REQ; k++) {
            check_grammar("cpu", k, cpu[k]);
            printf("  cpu request %d: %zu tokens, %s\n", k, cpu[k].toks.size(),
                   cpu[k].finish.c_str());
        }
    }
    for (int graphs = 0; graphs < 2 && !gpu_test_flag(argc, argv, "--cpu"); graphs++) {
        cuda_backend_stats sh, sd;
        std::vector<req_out> host = run(dir, false, graphs, prompts, &sh);
        std::vector<req_out> dev = run(dir, true, graphs, prompts, &sd);
        const char *mode = graphs ? "graphs" : "eager";
        printf("%s: host path %ld rows on the host, %ld on the device; device path %ld on the "
               "host, %ld on the device\n",
               mode, sh.host_sampled_rows, sh.device_masked_rows, sd.host_sampled_rows,
               sd.device_masked_rows);
        CHECK(sh.device_masked_rows == 0 && sh.host_sampled_rows > 0,
              "%s: the host path sampled %ld rows on the device", mode, sh.device_masked_rows);
        CHECK(sd.host_sampled_rows == 0 && sd.device_masked_rows > 0,
              "%s: the device path sampled %ld rows on the host", mode, sd.host_sampled_rows);
        int diverged = 0, equal = 0;
        for (int k = 0; k < N_REQ; k++) {
            check_grammar("host", k, host[k]);
            check_grammar("device", k, dev[k]);
            size_t i = 0;
            while (i < host[k].toks.size() && i < dev[k].toks.size() &&
                   host[k].toks[i] == dev[k].toks[i])
                i++;
            equal += (int)i;
            const bool same = host[k].toks == dev[k].toks;
            if (!same) {
                diverged++;
                printf("  %s request %d (%s): host and device differ at token %zu\n", mode, k,
                       k % 2 ? "temperature" : "greedy", i);
            }
            CHECK(same || k % 2 == 1, "%s request %d (greedy): host and device tokens differ", mode,
                  k);
        }
        printf("%s: %d tokens equal, %d of %d requests diverged\n", mode, equal, diverged, N_REQ);
        CHECK(diverged <= 1, "%s: %d requests differ between the host and the device path", mode,
              diverged);
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    grammar_vocab_free(g_vocab);
    tokenizer_free(tok);
    return check_report("test_masked_sampling");
}
