/* The one runtime builder: `gptoss serve`, `gptoss generate` (--prompts-file, or a prompt on a
 * backend other than the CPU reference) and `gptoss bench sweep` turn their engine and backend
 * options plus the model into backend options, an engine configuration, a loaded backend and an
 * engine here, with the same defaults, the same limits and the same checks.
 *
 * Why in src/engine/: the three callers sit at two layers — src/server/ and src/bench/ are siblings
 * (neither may include the other) and src/cli/ is above both — so the builder must live below
 * server/ and bench/. What it needs is the step contract (backend_find, backend_options), the
 * engine and model/ (synthetic presets), which is exactly what engine/ may include; it knows no
 * HTTP, no text and no CUDA (a backend is a name and a backend_ops). Parsing the command line stays
 * in src/cli/engine_args.c (the command line is cli's business): it fills a runtime_args and hands
 * it down, and each command adds only its own options and, for bench sweep, its workload's
 * defaults. */
#ifndef GPTOSS_ENGINE_RUNTIME_H
#define GPTOSS_ENGINE_RUNTIME_H

#include "engine/engine.h"
#include "step/backend.h"

#include <stdbool.h>

typedef struct {
    const char *model;   /* --model: a checkpoint folder or synthetic:NAME */
    const char *backend; /* --backend: "cpu" or "cuda" */
    /* --max-num-seqs, --max-num-batched-tokens, --max-model-len (0: what the model and the KV pool
     * hold), --stream-interval, --[no-]enable-prefix-caching, --[no-]async-scheduling; the caller
     * sets token_bytes when it has a tokenizer (stop strings need it). */
    engine_options eng;
    /* --num-kv-blocks: blocks of each KV pool, full-attention and sliding (vLLM's
     * --num-gpu-blocks-override also gives every layer the same count); 0 = the backend sizes them. */
    int num_kv_blocks;
    int block_size;                 /* --block-size: tokens per KV block */
    double gpu_memory_utilization;  /* --gpu-memory-utilization (GPU backends) */
    const char *kv_cache_dtype;     /* --kv-cache-dtype: auto, bf16, fp8 or fp8_e4m3 */
    bool enforce_eager;             /* --enforce-eager: no CUDA graphs */
    int max_cudagraph_capture_size; /* --max-cudagraph-capture-size: 0 = no graphs */
    int tensor_parallel_size;       /* --tensor-parallel-size / -tp (1) */
    bool enable_expert_parallel;    /* --enable-expert-parallel */
    /* Tensor parallelism across machines (vLLM's flags): --nnodes (1), --node-rank (0),
     * --master-addr (node 0's address; needed with --nnodes > 1), --master-port (0: 29500,
     * RUNTIME_MASTER_PORT_DEFAULT), --headless (every node but 0: its GPU ranks only, no engine,
     * no API server). -tp counts the ranks of every node. */
    int nnodes, node_rank;
    const char *master_addr;
    int master_port;
    bool headless;
} runtime_args;

enum { RUNTIME_MASTER_PORT_DEFAULT = 29500 };

/* serve's defaults, which every command starts from: the cpu backend, engine_options_default()
 * with the model length left to the model and the pool, blocks of 32 tokens sized by the backend,
 * 0.9 of GPU memory, KV dtype auto, CUDA graphs up to batch BACKEND_CUDAGRAPH_CAPTURE_DEFAULT. */
void runtime_args_default(runtime_args *a);

/* The checks that need no model, for a command to run right after parsing: a known backend, a KV
 * dtype the backend implements, a backend built into this program. -1 + err_set() naming the
 * option. */
int runtime_check(const runtime_args *a);
/* The --data-parallel-size part of it: 1 (or unset) always; 2 only with --enable-expert-parallel
 * and one tensor-parallel rank; anything else refused, naming the flag. */
int runtime_check_data_parallel(const runtime_args *a);
/* The nodes part of it: --nnodes 1 (or unset) takes none of the other node flags; more nodes
 * need the cuda backend, --master-addr, a -tp that divides evenly over the nodes with at most
 * TP_MAX_NODE ranks a node (one node too), no --data-parallel-size, and --headless on exactly the
 * nodes other than 0. Each refusal names the flag. */
int runtime_check_nodes(const runtime_args *a);
/* The KV dtype part of it: auto, bf16, fp8 and fp8_e4m3 are accepted (by every backend: the CUDA one
 * stores e4m3, the CPU one emulates it), anything else is refused naming the option. */
int runtime_check_kv_cache_dtype(const char *backend_name, const char *kv_cache_dtype);
/* --kv-cache-dtype as backend_options.kv_dtype: BACKEND_KV_AUTO (NULL, auto, bf16), BACKEND_KV_FP8
 * (fp8, fp8_e4m3), or -1 for anything else. */
int runtime_kv_dtype(const char *kv_cache_dtype);

/* runtime_check, then the folder (or preset string) the backend loads: synthetic presets are
 * resolved as synthetic_resolve() does. Heap string; NULL + err_set() naming --model. */
char *runtime_resolve_model(const runtime_args *a);

/* What the backend is created with, for the model runtime_resolve_model() gave. */
void runtime_backend_options(const runtime_args *a, const char *model_dir, backend_options *out);

typedef struct {
    const backend_ops *ops;
    engine *eng;        /* owns the backend (engine_destroy frees both) */
    engine_options opt; /* what the engine was created with */
    int max_model_len;  /* the longest sequence the engine accepts */
} runtime;

/* Loads the backend and creates the engine: runtime_check, the backend, then the model length — by
 * default what the full-attention KV pool holds (at most the model's), and a larger --max-model-len
 * is refused (as vLLM does) rather than leaving such requests waiting forever. -1 + err_set(). */
int runtime_build(const runtime_args *a, const char *model_dir, runtime *rt);

/* A headless node (--headless): loads the backend, with its share of the model, and runs the steps
 * node 0 sends (backend_ops.follow) until node 0 stops; then frees it. 0 on node 0's stop, -1 +
 * err_set() otherwise. runtime_build refuses --headless: such a node has no engine. */
int runtime_run_headless(const runtime_args *a, const char *model_dir);

#endif
