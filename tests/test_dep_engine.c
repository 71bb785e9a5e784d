/* DEP2's engine side (issue 17) on the CPU backend, in CI:
 *   1. the block manager with two ranks (block_manager.h): a new sequence goes to the rank with the
 *      most free blocks, its blocks come from that rank's pools only (one rank full does not stop
 *      the other), prefix hits are found only among its rank's blocks, the statistics add the
 *      ranks up, and bm_check holds each rank's books;
 *   2. the engine with --data-parallel-size 2 (--enable-expert-parallel) on a tiny synthetic model
 *      against one rank: greedy requests of different lengths, arriving over several steps, with
 *      chunked prefill, async scheduling and prefix caching, then with a KV pool so small that
 *      sequences are preempted: the same tokens, request by request. A wrapper around the backend
 *      checks every step's layout (step/batch.h: the sequences grouped by rank) and counts the
 *      steps where both ranks had rows, which must be most of them (the split is real);
 *   3. the backend refuses a step whose DEP layout does not match it: a split step on one rank, an
 *      unsplit step on two, parts that do not cover the sequences in order (step/batch_split.h). */
#include "check.h"

#include "base/error.h"
#include "base/rng.h"
#include "engine/block_manager.h"
#include "engine/engine.h"
#include "model/synthetic.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- 1. the block manager's ranks ---- */

static void test_block_manager_ranks(void) {
    bm_options o = {.block_size = 4,
                    .num_full_blocks = 4,
                    .num_swa_blocks = 0,
                    .window = 8,
                    .prefix_caching = true,
                    .n_ranks = 2};
    block_manager *bm = bm_create(&o);
    CHECK(bm && bm_n_ranks(bm) == 2, "two ranks: %s", bm ? "" : err_msg());
    if (!bm) return;
    int32_t toks[16];
    for (int i = 0; i < 16; i++) toks[i] = 100 + i;
    bm_seq a = {0}, b = {0}, c = {0}, d = {0};
    a.rank = bm_pick_rank(bm);
    CHECK(a.rank == 0, "the first sequence on rank 0 (equal free blocks), got %d", a.rank);
    CHECK(bm_grow(bm, &a, 12, 0) == 0, "A grows to 3 blocks on rank 0: %s", err_msg());
    b.rank = bm_pick_rank(bm);
    CHECK(b.rank == 1, "the second on rank 1 (4 free against 1), got %d", b.rank);
    CHECK(bm_grow(bm, &b, 16, 0) == 0, "B takes all 4 blocks of rank 1: %s", err_msg());
    c.rank = bm_pick_rank(bm);
    CHECK(c.rank == 0, "the third on rank 0 (1 free against 0), got %d", c.rank);
    CHECK(!bm_can_grow(bm, &c, 8, 0), "2 blocks on rank 0, which has 1 left: refused");
    CHECK(bm_can_grow(bm, &c, 4, 0) && bm_grow(bm, &c, 4, 0) == 0, "1 block on rank 0");
    bm_stats s = bm_get_stats(bm);
    CHECK(s.free_full == 0, "every block of both ranks taken, %d free", s.free_full);
    CHECK(bm_usage(bm) > 0.99, "usage %.2f with every block taken", bm_usage(bm));
    const bm_seq *all[3] = {&a, &b, &c};
    CHECK(bm_check(bm, all, 3) == 0, "books: %s", err_msg());
    /* A's two complete blocks committed on rank 0: findable there only */
    bm_commit(bm, &a, toks, 12);
    bm_free(bm, &c);
    d.rank = 1;
    CHECK(bm_match_prefix(bm, &d, toks, 13) == 0, "rank 1 must not find rank 0's prefix");
    bm_free(bm, &d);
    d.rank = 0;
    CHECK(bm_match_prefix(bm, &d, toks, 13) == 12, "rank 0 finds A's 3 blocks");
    CHECK(d.n_full == 3 && d.full[0] == a.full[0], "the hit shares A's blocks");
    const bm_seq *now[3] = {&a, &b, &d};
    CHECK(bm_check(bm, now, 3) == 0, "books after the hit: %s", err_msg());
    bm_free(bm, &a), bm_free(bm, &b), bm_free(bm, &d);
    s = bm_get_stats(bm);
    CHECK(s.free_full == 8 && s.prefix_hits_tokens == 12, "after freeing: %d free, %llu hit tokens",
          s.free_full, (unsigned long long)s.prefix_hits_tokens);
    bm_destroy(bm);
    o.n_ranks = BM_MAX_RANKS + 1;
    CHECK(bm_create(&o) == NULL, "%d ranks must be refused", o.n_ranks);
}

/* ---- 2. the engine, DEP2 against one rank ---- */

static char model_dir[256];

/* The CPU backend, with every launched step's DEP layout checked and counted. */
static int g_steps, g_both, g_bad_layout;
static int (*cpu_launch_fn)(backend *, const step_batch *);
static int checking_launch(backend *b, const step_batch *st) {
    g_steps++;
    if (st->dp_size == 2) {
        const int *s0 = st->dp_seq0;
        if (s0[0] != 0 || s0[1] < s0[0] || s0[2] != st->n_seqs) g_bad_layout++;
        g_both += s0[1] > 0 && s0[2] > s0[1];
    }
    return cpu_launch_fn(b, st);
}

typedef struct {
    int32_t tokens[64];
    int n;
    bool finished;
} out_t;

static void collect(const engine_output *o, void *user) {
    out_t *g = user;
    for (int i = 0; i < o->n_tokens && g->n < 64; i++) g->tokens[g->n++] = o->tokens[i];
    if (o->finished) g->finished = true;
}

enum { N_REQ = 10 };

/* Runs N_REQ greedy requests (prompt i of length lens[i], arriving at step i / 2) to the end. */
static void run(int dp, int kv_blocks, int32_t prompts[N_REQ][200], const int *lens, int gen,
                out_t *outs, engine_metrics *m) {
    backend_options bo = {.model = model_dir,
                          .block_size = 16,
                          .num_full_blocks = kv_blocks,
                          .num_swa_blocks = kv_blocks,
                          .max_slots = 8,
                          .max_model_len = 1024,
                          .enable_expert_parallel = dp > 1,
                          .data_parallel_size = dp};
    backend_ops ops = cpu_backend_ops;
    cpu_launch_fn = cpu_backend_ops.launch;
    ops.launch = checking_launch;
    backend *b;
    if (ops.create(&bo, &b) != 0) {
        CHECK(false, "backend dp %d: %s", dp, err_msg());
        return;
    }
    engine_options o;
    engine_options_default(&o);
    o.max_num_seqs = 8, o.max_num_batched_tokens = 96, o.max_model_len = 1024;
    o.async_scheduling = true, o.enable_prefix_caching = true;
    o.data_parallel_size = dp;
    engine *e;
    if (engine_create(&o, &ops, b, &e) != 0) {
        CHECK(false, "engine dp %d: %s", dp, err_msg());
        ops.destroy(b);
        return;
    }
    memset(outs, 0, N_REQ * sizeof *outs);
    int submitted = 0, rc = 1;
    for (int step = 0; (submitted < N_REQ || rc > 0) && step < 5000; step++) {
        for (; submitted < N_REQ && submitted / 2 <= step; submitted++) {
            engine_request r = {0};
            r.id = (uint64_t)submitted;
            r.prompt = prompts[submitted], r.n_prompt = lens[submitted];
            r.params = sampling_params_default();
            r.params.temperature = 0;
            r.max_tokens = gen + submitted % 5;
            r.ignore_eos = true, r.n = 1;
            r.on_output = collect, r.user = &outs[submitted];
            CHECK(engine_submit(e, &r) == 0, "submit: %s", err_msg());
        }
        rc = engine_step(e);
        CHECK(rc >= 0, "dp %d: engine_step: %s", dp, err_msg());
        if (rc < 0) break;
    }
    engine_get_metrics(e, m);
    engine_destroy(e);
}

static void test_engine_dep(void) {
    static int32_t prompts[N_REQ][200];
    int lens[N_REQ];
    rng_t r;
    rng_seed(&r, 17);
    for (int i = 0; i < N_REQ; i++) {
        lens[i] = 3 + (int)(rng_next(&r) % 150);
        for (int t = 0; t < lens[i]; t++)
            prompts[i][t] = i % 3 == 2 && t < 40 ? prompts[0][t] /* shared: prefix hits */
                                                 : (int32_t)(rng_next(&r) % 201088);
    }
    if (lens[0] < 40) lens[0] = 40;
    static out_t ref[N_REQ], got[N_REQ];
    /* Plenty of blocks; then so few (10 a rank, 160 tokens) that sequences of up to 104 tokens
     * (prompts cut to 60, 40-44 generated) are preempted as they grow. */
    const int pools[2] = {256, 10}, gens[2] = {12, 40};
    for (int k = 0; k < 2; k++) {
        if (k == 1)
            for (int i = 0; i < N_REQ; i++) lens[i] = lens[i] < 60 ? lens[i] : 60;
        g_steps = g_both = g_bad_layout = 0;
        engine_metrics m1, m2;
        run(1, pools[k] * 2, prompts, lens, gens[k], ref, &m1); /* one rank: both ranks' blocks */
        const int steps1 = g_steps;
        g_steps = g_both = g_bad_layout = 0;
        run(2, pools[k], prompts, lens, gens[k], got, &m2);
        int same = 0;
        for (int i = 0; i < N_REQ; i++) {
            const bool eq = ref[i].finished && got[i].finished && ref[i].n == got[i].n &&
                            !memcmp(ref[i].tokens, got[i].tokens, (size_t)ref[i].n * 4);
            same += eq;
            CHECK(eq, "pool %d: request %d: DEP2 gave %d tokens, one rank %d, not the same",
                  pools[k], i, got[i].n, ref[i].n);
            CHECK(ref[i].n == gens[k] + i % 5, "pool %d: request %d: %d tokens", pools[k], i,
                  ref[i].n);
        }
        printf("pool of %d blocks a rank: %d of %d requests equal; DEP2 %d steps (%d with rows on "
               "both ranks), %llu preemptions, %llu prefix-hit tokens; one rank %d steps\n",
               pools[k], same, N_REQ, g_steps, g_both, (unsigned long long)m2.num_preemptions,
               (unsigned long long)m2.prefix_cache_hits, steps1);
        if (k == 1)
            CHECK(m2.num_preemptions > 0, "a pool of %d blocks a rank preempted nothing", pools[k]);
        else
            CHECK(m2.prefix_cache_hits > 0, "the shared prompt prefix was never found cached");
        CHECK(g_bad_layout == 0, "pool %d: %d steps with a bad rank layout", pools[k],
              g_bad_layout);
        CHECK(g_both * 2 > g_steps, "pool %d: only %d of %d DEP2 steps had rows on both ranks",
              pools[k], g_both, g_steps);
    }
}

/* ---- 3. layouts the backend refuses ---- */

static void refused_step(backend *b, const step_batch *st, const char *what) {
    const int rc = cpu_backend_ops.launch(b, st);
    CHECK(rc < 0 && strstr(err_msg(), "data-parallel"),
          "%s: expected a refusal naming the "
          "data-parallel parts, got %d '%s'",
          what, rc, rc ? err_msg() : "");
    if (rc == 0) {
        step_result r;
        cpu_backend_ops.wait(b, &r);
        step_result_free(&r, st->n_seqs);
    }
}

static void test_refused_layouts(void) {
    for (int dp = 1; dp <= 2; dp++) {
        backend_options bo = {.model = model_dir,
                              .block_size = 16,
                              .num_full_blocks = 8,
                              .num_swa_blocks = 8,
                              .max_slots = 4,
                              .max_model_len = 128,
                              .enable_expert_parallel = dp > 1,
                              .data_parallel_size = dp};
        backend *b;
        if (cpu_backend_ops.create(&bo, &b) != 0) {
            CHECK(false, "backend dp %d: %s", dp, err_msg());
            continue;
        }
        step_batch st;
        memset(&st, 0, sizeof st);
        st.block_size = 16;
        if (dp == 1) {
            st.dp_size = 2; /* split, on one rank */
            refused_step(b, &st, "a DEP2 step on one rank");
        } else {
            refused_step(b, &st, "an unsplit step on DEP2"); /* dp_size 0 */
            st.dp_size = 2, st.n_seqs = 1;
            st.dp_seq0[0] = 0, st.dp_seq0[1] = 0, st.dp_seq0[2] = 2;
            refused_step(b, &st, "parts past the sequences");
            st.dp_seq0[1] = 2, st.dp_seq0[2] = 1;
            refused_step(b, &st, "parts out of order");
        }
        cpu_backend_ops.destroy(b);
    }
}

int main(void) {
    test_block_manager_ranks();
    snprintf(model_dir, sizeof model_dir, "/tmp/gptoss-test-dep-engine-%d", (int)getpid());
    model_config c;
    config_preset_tiny(&c);
    if (synthetic_write(&c, model_dir, 23, 1) != 0) {
        fprintf(stderr, "make model: %s\n", err_msg());
        return 1;
    }
    test_engine_dep();
    test_refused_layouts();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", model_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", model_dir);
    return check_report("test_dep_engine");
}
