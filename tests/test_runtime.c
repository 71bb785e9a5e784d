/* The runtime builder (src/engine/runtime.h) that serve, generate and bench sweep share: serve's
 * defaults, the checks that need no model (KV dtype, backend), the backend options it derives, and
 * the model-length check against the KV pool, on the CPU backend with a tiny synthetic model. The
 * CUDA fp8 refusal is checked here directly because a CPU-only build has no CUDA backend to ask. */
#include "check.h"

#include "base/error.h"
#include "engine/runtime.h"
#include "model/synthetic.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void test_defaults(void) {
    runtime_args a;
    runtime_args_default(&a);
    CHECK(!strcmp(a.backend, "cpu"), "backend %s", a.backend);
    CHECK(a.eng.max_num_seqs == 256 && a.eng.max_num_batched_tokens == 8192, "engine defaults");
    CHECK(a.eng.max_model_len == 0, "max_model_len %d: the model's by default",
          a.eng.max_model_len);
    CHECK(a.eng.enable_prefix_caching && a.eng.async_scheduling, "prefix caching and async on");
    CHECK(a.block_size == 32 && a.num_kv_blocks == 0, "KV geometry defaults");
    CHECK(a.gpu_memory_utilization == 0.9, "gpu_memory_utilization %g", a.gpu_memory_utilization);
    CHECK(!strcmp(a.kv_cache_dtype, "auto"), "kv dtype %s", a.kv_cache_dtype);
    CHECK(!a.enforce_eager && a.max_cudagraph_capture_size == BACKEND_CUDAGRAPH_CAPTURE_DEFAULT &&
              BACKEND_CUDAGRAPH_CAPTURE_DEFAULT == 512,
          "graphs default to batch 512 (the backend's old limit)");
}

static void test_checks(void) {
    CHECK(runtime_check_kv_cache_dtype("cuda", "auto") == 0, "auto");
    CHECK(runtime_check_kv_cache_dtype("cuda", "bf16") == 0, "bf16");
    /* fp8 (and its long name) on both backends: the CUDA backend stores e4m3, the CPU backend
     * emulates it. Anything else is refused, naming the flag and the accepted values. */
    const char *backends[] = {"cuda", "cpu"};
    for (int i = 0; i < 2; i++) {
        CHECK(runtime_check_kv_cache_dtype(backends[i], "fp8") == 0, "%s fp8 refused: %s",
              backends[i], err_msg());
        CHECK(runtime_check_kv_cache_dtype(backends[i], "fp8_e4m3") == 0, "%s fp8_e4m3 refused",
              backends[i]);
    }
    const char *bad[] = {"fp16", "fp8_e5m2", "FP8", "", "float32", "int8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(runtime_check_kv_cache_dtype("cpu", bad[i]) == -1, "'%s' accepted", bad[i]);
        CHECK_MSG_HAS(err_msg(), "expected auto, bf16, fp8 or fp8_e4m3");
        CHECK(runtime_kv_dtype(bad[i]) == -1, "runtime_kv_dtype('%s')", bad[i]);
    }
    CHECK_MSG_HAS(err_msg(), "--kv-cache-dtype int8: expected auto, bf16, fp8 or fp8_e4m3");
    CHECK(runtime_kv_dtype(NULL) == BACKEND_KV_AUTO &&
              runtime_kv_dtype("auto") == BACKEND_KV_AUTO &&
              runtime_kv_dtype("bf16") == BACKEND_KV_AUTO,
          "auto/bf16 map to the backend's own dtype");
    CHECK(runtime_kv_dtype("fp8") == BACKEND_KV_FP8 &&
              runtime_kv_dtype("fp8_e4m3") == BACKEND_KV_FP8,
          "fp8 names");

    runtime_args a;
    runtime_args_default(&a);
    CHECK(runtime_check(&a) == 0, "defaults refused: %s", err_msg());
    /* The dtype check comes before "not in this build", so a CPU-only build says the same. */
    a.backend = "cuda", a.kv_cache_dtype = "fp16";
    CHECK(runtime_check(&a) == -1, "cuda fp16 passed runtime_check");
    CHECK_MSG_HAS(err_msg(), "--kv-cache-dtype fp16: expected auto, bf16, fp8 or fp8_e4m3");
    a.backend = "nosuch", a.kv_cache_dtype = "auto";
    CHECK(runtime_check(&a) == -1, "unknown backend passed");
    CHECK_MSG_HAS(err_msg(), "--backend nosuch: unknown backend");
    a.backend = "cuda";
    if (!backend_find("cuda")) {
        CHECK(runtime_check(&a) == -1, "cuda passed in a build without it");
        CHECK_MSG_HAS(err_msg(), "this build has no cuda backend");
    }
    a.backend = "cpu", a.model = NULL;
    CHECK(runtime_resolve_model(&a) == NULL, "no model resolved");
    CHECK_MSG_HAS(err_msg(), "--model is required");
}

static void test_backend_options(void) {
    runtime_args a;
    runtime_args_default(&a);
    a.num_kv_blocks = 40, a.eng.max_num_seqs = 7, a.eng.max_model_len = 300, a.block_size = 16;
    backend_options bo;
    runtime_backend_options(&a, "/some/dir", &bo);
    CHECK(!strcmp(bo.model, "/some/dir"), "model %s", bo.model);
    /* --num-kv-blocks sizes both pools, everywhere (bench sweep used to leave the sliding pool 0). */
    CHECK(bo.num_full_blocks == 40 && bo.num_swa_blocks == 40, "pools %d/%d", bo.num_full_blocks,
          bo.num_swa_blocks);
    CHECK(bo.block_size == 16 && bo.max_slots == 7 && bo.max_model_len == 300, "geometry");
    CHECK(bo.gpu_memory_utilization == 0.9, "util %g", bo.gpu_memory_utilization);
    CHECK(bo.max_cudagraph_capture_size == 512 && !bo.enforce_eager, "graphs %d",
          bo.max_cudagraph_capture_size);
    a.max_cudagraph_capture_size = 0; /* the flag's 0 = no graphs; the backend's 0 = its default */
    runtime_backend_options(&a, "/some/dir", &bo);
    CHECK(bo.max_cudagraph_capture_size < 0, "capture size 0 gave %d",
          bo.max_cudagraph_capture_size);
    a.max_cudagraph_capture_size = 64, a.enforce_eager = true;
    runtime_backend_options(&a, "/some/dir", &bo);
    CHECK(bo.max_cudagraph_capture_size == 64 && bo.enforce_eager, "eager / 64");
    CHECK(bo.kv_dtype == BACKEND_KV_AUTO, "default kv dtype %d", bo.kv_dtype);
    a.kv_cache_dtype = "fp8_e4m3";
    runtime_backend_options(&a, "/some/dir", &bo);
    CHECK(bo.kv_dtype == BACKEND_KV_FP8, "fp8_e4m3 gave kv dtype %d", bo.kv_dtype);
}

static void test_build(const char *dir) {
    runtime_args a;
    runtime_args_default(&a);
    a.model = dir;
    a.num_kv_blocks = 8, a.block_size = 16, a.eng.max_num_seqs = 4;
    runtime rt;
    /* Default model length: what the full pool holds (8 x 16), below the model's. */
    CHECK(runtime_build(&a, dir, &rt) == 0, "build: %s", err_msg());
    if (rt.eng) {
        CHECK(rt.max_model_len == 128 && rt.opt.max_model_len == 128, "max_model_len %d",
              rt.max_model_len);
        CHECK(!strcmp(rt.ops->name, "cpu"), "backend %s", rt.ops->name);
        engine_destroy(rt.eng);
    }
    a.eng.max_model_len = 129;
    CHECK(runtime_build(&a, dir, &rt) == -1 && !rt.eng, "a model length beyond the pool was built");
    CHECK_MSG_HAS(err_msg(), "--max-model-len 129 is more than the KV cache holds (128 tokens)");
    a.eng.max_model_len = 100;
    CHECK(runtime_build(&a, dir, &rt) == 0, "build 100: %s", err_msg());
    if (rt.eng) {
        CHECK(rt.max_model_len == 100, "max_model_len %d", rt.max_model_len);
        engine_destroy(rt.eng);
    }
    /* fp8 on the CPU backend: built (it emulates e4m3 rounding); the same pool geometry. */
    a.kv_cache_dtype = "fp8";
    CHECK(runtime_build(&a, dir, &rt) == 0, "fp8 build: %s", err_msg());
    if (rt.eng) {
        CHECK(rt.max_model_len == 100, "fp8 max_model_len %d", rt.max_model_len);
        engine_destroy(rt.eng);
    }
    a.kv_cache_dtype = "e5m2";
    CHECK(runtime_build(&a, dir, &rt) == -1 && !rt.eng, "e5m2 built");
    CHECK_MSG_HAS(err_msg(), "--kv-cache-dtype e5m2");
}

/* A runtime_args for node r of nn with -tp tp, the cuda backend and node 0 at 10.0.0.1. */
static runtime_args node_args(int nn, int r, int tp) {
    runtime_args a;
    runtime_args_default(&a);
    a.backend = "cuda", a.nnodes = nn, a.node_rank = r, a.tensor_parallel_size = tp;
    a.master_addr = nn > 1 ? "10.0.0.1" : NULL, a.headless = r > 0;
    return a;
}

/* Expects runtime_check_nodes to refuse a, naming frag. */
static void nodes_refused(const runtime_args *a, const char *frag) {
    CHECK(runtime_check_nodes(a) == -1, "accepted (wanted '%s')", frag);
    CHECK_MSG_HAS(err_msg(), frag);
}

/* --nnodes, --node-rank, --master-addr, --master-port, --headless (issue 17 item 5): the
 * combinations that run, and each bad one refused naming its flag; the backend options they give;
 * NCCL_COMM_ID's form. */
static void test_nodes(void) {
    runtime_args a;
    runtime_args_default(&a);
    CHECK(a.nnodes == 0 && a.node_rank == 0 && !a.master_addr && a.master_port == 0 && !a.headless,
          "one node by default");
    CHECK(runtime_check_nodes(&a) == 0, "defaults: %s", err_msg());
    backend_options bo;
    runtime_backend_options(&a, "/m", &bo);
    CHECK(bo.nnodes == 1 && bo.node_rank == 0 && !bo.master_addr && bo.master_port == 0 &&
              !bo.headless,
          "one node's backend options");

    /* The README's two 8-GPU nodes. */
    a = node_args(2, 0, 16);
    CHECK(runtime_check_nodes(&a) == 0, "node 0 of 2, -tp 16: %s", err_msg());
    runtime_backend_options(&a, "/m", &bo);
    CHECK(bo.nnodes == 2 && bo.node_rank == 0 && !strcmp(bo.master_addr, "10.0.0.1") &&
              bo.master_port == RUNTIME_MASTER_PORT_DEFAULT && bo.master_port == 29500 &&
              !bo.headless && bo.tensor_parallel_size == 16,
          "node 0's backend options");
    a = node_args(2, 1, 16);
    a.master_port = 29511;
    CHECK(runtime_check_nodes(&a) == 0, "node 1 of 2, headless: %s", err_msg());
    runtime_backend_options(&a, "/m", &bo);
    CHECK(bo.node_rank == 1 && bo.headless && bo.master_port == 29511, "node 1's backend options");
    a = node_args(4, 3, 8); /* two GPUs a node */
    CHECK(runtime_check_nodes(&a) == 0, "node 3 of 4, -tp 8: %s", err_msg());
    a = node_args(2, 1, 2); /* one GPU a node */
    CHECK(runtime_check_nodes(&a) == 0, "-tp 2 over 2 nodes: %s", err_msg());

    /* One node: the other flags are refused, not ignored. */
    a = node_args(1, 1, 1);
    nodes_refused(&a, "--node-rank 1 needs --nnodes");
    a = node_args(1, 0, 1), a.headless = true;
    nodes_refused(&a, "--headless needs --nnodes > 1");
    a = node_args(1, 0, 1), a.master_addr = "10.0.0.1";
    nodes_refused(&a, "--master-addr is only used with --nnodes > 1");
    a = node_args(1, 0, 1), a.master_port = 29500;
    nodes_refused(&a, "--master-port is only used with --nnodes > 1");
    a = node_args(1, 0, 9);
    nodes_refused(&a, "--tensor-parallel-size 9: at most 8 ranks on one node");
    a = node_args(1, 0, 8);
    CHECK(runtime_check_nodes(&a) == 0, "-tp 8 on one node: %s", err_msg());

    /* Several nodes. */
    a = node_args(2, 2, 16);
    nodes_refused(&a, "--node-rank 2: expected 0 to 1 (--nnodes 2)");
    a = node_args(2, 0, 16), a.eng.data_parallel_size = 2, a.enable_expert_parallel = true;
    a.tensor_parallel_size = 1;
    nodes_refused(&a, "--data-parallel-size 2");
    a = node_args(2, 0, 16), a.eng.data_parallel_size = 2;
    nodes_refused(&a, "--nnodes 2 cannot be combined with --data-parallel-size 2");
    a = node_args(2, 0, 3);
    nodes_refused(&a, "--tensor-parallel-size 3 does not divide evenly over --nnodes 2");
    a = node_args(2, 0, 1);
    nodes_refused(&a, "--tensor-parallel-size 1 does not divide evenly over --nnodes 2");
    a = node_args(2, 0, 32);
    nodes_refused(&a, "--tensor-parallel-size 32 over --nnodes 2: 16 ranks a node, at most 8");
    a = node_args(4, 0, 32);
    nodes_refused(&a, "--tensor-parallel-size 32: at most 16 ranks in all");
    a = node_args(2, 0, 16), a.master_addr = NULL;
    nodes_refused(&a, "--nnodes 2 needs --master-addr");
    a = node_args(2, 0, 16), a.headless = true;
    nodes_refused(&a, "--headless is for the nodes other than node 0");
    a = node_args(2, 1, 16), a.headless = false;
    nodes_refused(&a, "--node-rank 1 needs --headless");
    a = node_args(2, 0, 16), a.backend = "cpu";
    nodes_refused(&a, "--nnodes 2 needs --backend cuda");
    a = node_args(2, 0, 16), a.master_addr = "10.0.0.1:29500";
    nodes_refused(&a, "give the address alone and the port with --master-port");
    a = node_args(2, 0, 16), a.master_addr = "";
    nodes_refused(&a, "--master-addr: empty");
    a = node_args(2, 0, 16), a.master_addr = "node 0";
    nodes_refused(&a, "has no spaces");
    a = node_args(2, 0, 16), a.master_port = 70000; /* the parser's range, held here too */
    nodes_refused(&a, "--master-port 70000: expected 1 to 65535");
    /* runtime_check refuses what runtime_check_nodes refuses, and runtime_build --headless */
    a = node_args(2, 1, 16), a.headless = false;
    CHECK(runtime_check(&a) == -1, "runtime_check took --node-rank 1 without --headless");
    CHECK_MSG_HAS(err_msg(), "--node-rank 1 needs --headless");
    a = node_args(2, 1, 16); /* refused before anything is loaded (or: no cuda backend built) */
    runtime r;
    CHECK(runtime_build(&a, "/m", &r) == -1, "a headless node built an engine");
    if (backend_find("cuda")) CHECK_MSG_HAS(err_msg(), "--headless: this node runs no engine");

    /* NCCL_COMM_ID: IPv4, a host name, IPv6 bracketed (given bare or bracketed). */
    char id[64];
    static const struct {
        const char *addr;
        int port;
        const char *want;
    } ok[] = {{"10.0.0.1", 29500, "10.0.0.1:29500"},
              {"node0.cluster", 1, "node0.cluster:1"},
              {"fe80::1", 29500, "[fe80::1]:29500"},
              {"[fe80::1]", 29500, "[fe80::1]:29500"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK(backend_nodes_comm_id(ok[i].addr, ok[i].port, id, sizeof id) == 0 &&
                  !strcmp(id, ok[i].want),
              "%s: %s, want %s", ok[i].addr, id, ok[i].want);
    CHECK(backend_nodes_comm_id("[fe80::1]:29500", 29500, id, sizeof id) == -1, "port twice");
    CHECK(backend_nodes_comm_id("10.0.0.1", 0, id, sizeof id) == -1, "port 0");
    char tiny[8];
    CHECK(backend_nodes_comm_id("10.0.0.100", 29500, tiny, sizeof tiny) == -1, "overflow");
    CHECK_MSG_HAS(err_msg(), "too long");
}

int main(void) {
    test_defaults();
    test_checks();
    test_backend_options();
    test_nodes();
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/gptoss-test-runtime-%d", (int)getpid());
    model_config c;
    config_preset_tiny(&c);
    if (synthetic_write(&c, dir, 11, 1) != 0) {
        fprintf(stderr, "make model: %s\n", err_msg());
        return 1;
    }
    test_build(dir);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report("test_runtime");
}
