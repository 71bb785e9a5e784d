/* gptoss bench serve|sweep|plot: the throughput–interactivity benchmarks (bench/README.md); also
 * dispatches `bench latency` (src/cli/cmd_bench_latency.c) and `bench tokenizer` (= bench-tokenizer). */
#include "base/error.h"
#include "bench/bench_plot.h"
#include "bench/bench_serve.h"
#include "bench/bench_sweep.h"
#include "bench/roofline.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "usage: gptoss bench SUBCOMMAND [options]\n"
    "  serve    the concurrency sweep against an OpenAI-compatible server (InferenceMAX's "
    "workload)\n"
    "  sweep    the same sweep in-process, straight into the engine (no HTTP)\n"
    "  plot     throughput per GPU against tokens/s per user, with the roofline and published "
    "points\n"
    "  latency  decode and prefill speed of the engine against the roofline\n"
    "  tokenizer  tokenizer encoding speed (the same as bench-tokenizer)\n"
    "`gptoss bench SUBCOMMAND --help` lists a subcommand's options.\n";

static const char SERVE_USAGE[] =
    "usage: gptoss bench serve --url http://HOST:PORT [options]\n"
    "InferenceMAX's workload, measured as `vllm bench serve` measures it: per concurrency C, 2*C "
    "warm-up\n"
    "requests, then 10*C streamed requests with at most C in flight (request rate inf); prompts of "
    "random\n"
    "token ids; input and output lengths uniform in [0.8*L, L]; ignore_eos; max_tokens = the drawn "
    "output.\n"
    "  --url URL               the server (http://host:port, optionally with a /v1 prefix)\n"
    "  --model NAME            model name to send (default: the first of GET /v1/models)\n"
    "  --isl N --osl N         input / output length L (default 1024 / 1024)\n"
    "  --random-range-ratio R  lengths uniform in [int(R*L), L] (default 0.8)\n"
    "  --concurrency 1,4,16    the concurrency levels (default 1,4,8,16,32,64)\n"
    "  --num-prompts N         measured requests per level (default 10*C)\n"
    "  --num-warmups N         warm-up requests per level, not counted (default 2*C)\n"
    "  --prompts-per-concurrency K, --warmups-per-concurrency K   the multiples of C (default 10, "
    "2)\n"
    "  --endpoint completions|chat  /v1/completions with token ids (default) or "
    "/v1/chat/completions\n"
    "                          with text (the ids decoded by the tokenizer, or random words)\n"
    "  --num-gpus G            GPUs behind the server, for the per-GPU figures (default 1)\n"
    "  --output-json PATH      write the results (a JSON array, one object per level, vLLM's "
    "keys)\n"
    "  --label TEXT            stored in the results (the plot's legend)\n"
    "  --seed S                prompts and lengths (default 0)\n"
    "  --temperature T         sent with every request (default 0, as InferenceMAX; -1: not sent)\n"
    "  --api-key KEY           Authorization: Bearer KEY (default: $OPENAI_API_KEY)\n"
    "  --timeout S             a request with no byte for S seconds fails (default 600)\n"
    "  --no-progress           no progress bar (it is drawn only on a terminal anyway)\n"
    "Exit status: 0 when every measured request succeeded, 1 when some failed (counts and the "
    "first\n"
    "error are printed; the results are still written), 2 for bad options.\n";

static const char SWEEP_USAGE[] =
    "usage: gptoss bench sweep --model DIR|synthetic:NAME [options]\n"
    "The `bench serve` sweep run in-process: requests go straight to the engine (no HTTP, no\n"
    "tokenizer), timed from the engine's output callbacks. Same workload, metrics and JSON.\n"
    "  --model DIR|synthetic:NAME  a checkpoint, or a synthetic preset (tiny, 20b, 120b)\n"
    "  --isl N --osl N --random-range-ratio R --concurrency LIST --num-prompts N --num-warmups N\n"
    "  --prompts-per-concurrency K --warmups-per-concurrency K\n"
    "  --num-gpus G --output-json PATH --label TEXT --seed S --no-progress   as for `bench serve`\n"
    "  --temperature T         sampling temperature (default 0, greedy)\n"
    "Engine defaults that differ from serve's (what InferenceMAX gives vLLM): --max-num-seqs the\n"
    "largest concurrency, --max-model-len ISL + OSL + 20, prefix caching off; on the cpu backend\n"
    "--num-kv-blocks defaults to room for every sequence.\n" ENGINE_ARGS_HELP;

static const char PLOT_USAGE[] =
    "usage: gptoss bench plot RESULTS.json... --out FILE.svg [options]\n"
    "Throughput per GPU (y) against interactivity, tokens/s per user = 1000 / median TPOT (x): one "
    "line\n"
    "per results file, the Pareto envelope over all of them, the roofline frontier and the "
    "published\n"
    "anchor points. Hand-written SVG.\n"
    "  --out FILE.svg          the chart\n"
    "  --title TEXT            its title\n"
    "  --y total|output        total (input + output, InferenceMAX's headline) or output "
    "tokens/s/GPU\n"
    "                          (default total)\n"
    "  --labels A,B,...        legend names of the files (default: their label, else the file "
    "name)\n"
    "  --roofline-model 120b|20b|DIR  draw the decode roofline of that model (default: none)\n"
    "  --roofline-tp N         tensor parallelism of the roofline (default 1)\n"
    "  --kv-dtype bf16|fp8|fp8_e4m3  KV bytes of the roofline (default bf16)\n"
    "  --bandwidth GB/s --flops TFLOP/s  the roofline's hardware (default the H200 here: 4200, "
    "790)\n"
    "  --isl N --osl N         workload of the roofline (default: from the results)\n"
    "  --anchors PATH|none     anchor file or folder (default bench/anchors when it exists)\n"
    "  --anchor-gpu NAME       anchors measured on this GPU (default H200; 'all' for every one)\n"
    "  --linear                linear axes instead of logarithmic\n";

static bool want_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
    return false;
}

/* The plan's options (bench/bench_plan.h), which serve and sweep share; returns 1 when it matched
 * one, 0 when not, -1 on a bad value. *conc owns the parsed --concurrency list (the caller frees it). */
static int plan_opt(args_t *a, bench_plan *p, int32_t **conc) {
    const char *v;
    long x;
    if (args_opt(a, "--isl", &v)) {
        if (args_int("--isl", v, 1, 1 << 24, &x)) return -1;
        p->isl = (int)x;
    } else if (args_opt(a, "--osl", &v)) {
        if (args_int("--osl", v, 1, 1 << 24, &x)) return -1;
        p->osl = (int)x;
    } else if (args_opt(a, "--random-range-ratio", &v)) {
        if (args_double("--random-range-ratio", v, 0, 1, &p->range_ratio)) return -1;
    } else if (args_opt(a, "--concurrency", &v) || args_opt(a, "--max-concurrency", &v)) {
        free(*conc);
        *conc = NULL;
        p->concurrency = NULL;
        int n = 0;
        if (args_int_list("--concurrency", v, conc, &n)) return -1;
        for (int i = 0; i < n; i++)
            if ((*conc)[i] < 1 || (*conc)[i] > 1000000)
                return err_set("option --concurrency: %d is out of range [1, 1000000]", (*conc)[i]);
        if (n == 0) return err_set("option --concurrency: empty list");
        p->concurrency = *conc, p->n_concurrency = n;
    } else if (args_opt(a, "--num-prompts", &v)) {
        if (args_int("--num-prompts", v, 1, 100000000, &x)) return -1;
        p->num_prompts = (int)x;
    } else if (args_opt(a, "--num-warmups", &v)) {
        if (args_int("--num-warmups", v, 0, 100000000, &x)) return -1;
        p->num_warmups = (int)x;
    } else if (args_opt(a, "--prompts-per-concurrency", &v)) {
        if (args_int("--prompts-per-concurrency", v, 1, 1000000, &x)) return -1;
        p->prompts_per_c = (int)x;
    } else if (args_opt(a, "--warmups-per-concurrency", &v)) {
        if (args_int("--warmups-per-concurrency", v, 0, 1000000, &x)) return -1;
        p->warmups_per_c = (int)x;
    } else if (args_opt(a, "--num-gpus", &v)) {
        if (args_int("--num-gpus", v, 1, 4096, &x)) return -1;
        p->num_gpus = (int)x;
    } else if (args_opt(a, "--output-json", &v)) {
        if (!v) return -1;
        p->output_json = v;
    } else if (args_opt(a, "--label", &v)) {
        if (!v) return -1;
        p->label = v;
    } else if (args_opt(a, "--seed", &v)) {
        if (args_int("--seed", v, 0, 0x7fffffffffffffffL, &x)) return -1;
        p->seed = (uint64_t)x;
    } else if (args_opt(a, "--temperature", &v)) {
        if (args_double("--temperature", v, -1, 100, &p->temperature)) return -1;
    } else if (args_flag(a, "--no-progress")) {
        p->progress = false;
    } else {
        return 0;
    }
    return 1;
}

static const int32_t DEFAULT_CONC[] = {1, 4, 8, 16, 32, 64};

/* The default levels when --concurrency was not given. */
static void plan_finish(bench_plan *p) {
    if (p->concurrency) return;
    p->concurrency = DEFAULT_CONC;
    p->n_concurrency = (int)(sizeof DEFAULT_CONC / sizeof DEFAULT_CONC[0]);
}

static int bench_serve_cmd(int argc, char **argv) {
    if (want_help(argc, argv)) {
        fputs(SERVE_USAGE, stdout);
        return 0;
    }
    args_t a;
    args_init(&a, argc, argv);
    a.cmd = "bench serve";
    bench_serve_opts o;
    bench_serve_defaults(&o);
    int32_t *conc = NULL;
    int rc = 2;
    const char *v;
    long x;
    while (a.i < argc) {
        int m = plan_opt(&a, &o.plan, &conc);
        if (m < 0) goto fail;
        if (m > 0) continue;
        if (args_opt(&a, "--url", &v) || args_opt(&a, "--base-url", &v)) {
            if (!(o.url = v)) goto fail;
        } else if (args_opt(&a, "--model", &v)) {
            if (!(o.model = v)) goto fail;
        } else if (args_opt(&a, "--api-key", &v)) {
            if (!(o.api_key = v)) goto fail;
        } else if (args_opt(&a, "--endpoint", &v)) {
            if (!v) goto fail;
            if (!strcmp(v, "chat") || !strcmp(v, "/v1/chat/completions"))
                o.chat = true;
            else if (!strcmp(v, "completions") || !strcmp(v, "/v1/completions"))
                o.chat = false;
            else {
                err_set("option --endpoint: '%s' is not completions or chat", v);
                goto fail;
            }
        } else if (args_opt(&a, "--timeout", &v)) {
            if (args_int("--timeout", v, 1, 86400 * 7, &x)) goto fail;
            o.timeout = (double)x;
        } else {
            free(conc);
            return args_unknown(&a, SERVE_USAGE);
        }
    }
    if (!o.url) {
        free(conc);
        return args_usage_error(&a, "--url is required", SERVE_USAGE);
    }
    plan_finish(&o.plan);
    rc = bench_serve(&o);
    if (rc < 0) rc = args_error_exit(&a, 1);
    free(conc);
    return rc;
fail:
    free(conc);
    return args_fail(&a);
}

static int bench_sweep_cmd(int argc, char **argv) {
    if (want_help(argc, argv)) {
        fputs(SWEEP_USAGE, stdout);
        return 0;
    }
    args_t a;
    args_init(&a, argc, argv);
    a.cmd = "bench sweep";
    bench_sweep_opts o;
    bench_sweep_defaults(&o);
    int32_t *conc = NULL;
    int rc = 2;
    while (a.i < argc) {
        int m = plan_opt(&a, &o.plan, &conc);
        if (m < 0) goto fail;
        if (m > 0) continue;
        if ((m = engine_args_parse(&a, &o.rt)) < 0) goto fail;
        if (m > 0) continue;
        free(conc);
        return args_unknown(&a, SWEEP_USAGE);
    }
    if (!o.rt.model) {
        free(conc);
        return args_usage_error(&a, "--model is required", SWEEP_USAGE);
    }
    if (runtime_check(&o.rt) != 0) goto fail;
    plan_finish(&o.plan);
    rc = bench_sweep(&o);
    if (rc < 0) rc = args_error_exit(&a, 1);
    free(conc);
    return rc;
fail:
    free(conc);
    return args_fail(&a);
}

static int bench_plot_cmd(int argc, char **argv) {
    if (want_help(argc, argv)) {
        fputs(PLOT_USAGE, stdout);
        return 0;
    }
    args_t a;
    args_init(&a, argc, argv);
    a.cmd = "bench plot";
    bench_plot_opts o;
    bench_plot_defaults(&o);
    const char **files = calloc((size_t)argc, sizeof *files);
    int n_files = 0, rc = 2;
    const char *v;
    long x;
    while (a.i < argc) {
        if (args_opt(&a, "--out", &v) || args_opt(&a, "-o", &v)) {
            if (!(o.out = v)) goto fail;
        } else if (args_opt(&a, "--title", &v)) {
            if (!(o.title = v)) goto fail;
        } else if (args_opt(&a, "--y", &v)) {
            if (!v) goto fail;
            if (strcmp(v, "total") && strcmp(v, "output")) {
                err_set("option --y: '%s' is not total or output", v);
                goto fail;
            }
            o.output_only = !strcmp(v, "output");
        } else if (args_opt(&a, "--labels", &v)) {
            if (!(o.labels = v)) goto fail;
        } else if (args_opt(&a, "--roofline-model", &v)) {
            if (!(o.roofline_model = v)) goto fail;
        } else if (args_opt(&a, "--roofline-tp", &v)) {
            if (args_int("--roofline-tp", v, 1, 64, &x)) goto fail;
            o.roofline_tp = (int)x;
        } else if (args_opt(&a, "--kv-dtype", &v)) {
            if (!v) goto fail;
            if (roofline_kv_bytes(v) < 0) {
                err_set("option --kv-dtype: '%s' is not auto, bf16, fp8 or fp8_e4m3", v);
                goto fail;
            }
            o.kv_bytes = roofline_kv_bytes(v);
        } else if (args_opt(&a, "--bandwidth", &v)) {
            if (args_double("--bandwidth", v, 1, 1e6, &o.bandwidth)) goto fail;
            o.bandwidth *= 1e9;
        } else if (args_opt(&a, "--flops", &v)) {
            if (args_double("--flops", v, 1, 1e6, &o.flops)) goto fail;
            o.flops *= 1e12;
        } else if (args_opt(&a, "--isl", &v)) {
            if (args_int("--isl", v, 1, 1 << 24, &x)) goto fail;
            o.isl = (int)x;
        } else if (args_opt(&a, "--osl", &v)) {
            if (args_int("--osl", v, 1, 1 << 24, &x)) goto fail;
            o.osl = (int)x;
        } else if (args_opt(&a, "--anchors", &v)) {
            if (!(o.anchors = v)) goto fail;
        } else if (args_opt(&a, "--anchor-gpu", &v)) {
            if (!(o.anchor_gpu = v)) goto fail;
        } else if (args_flag(&a, "--linear")) {
            o.linear = true;
        } else if (argv[a.i][0] == '-' && argv[a.i][1]) {
            free(files);
            return args_unknown(&a, PLOT_USAGE);
        } else {
            files[n_files++] = argv[a.i++];
        }
    }
    if (!o.out) {
        free(files);
        return args_usage_error(&a, "--out is required", PLOT_USAGE);
    }
    o.files = files;
    o.n_files = n_files;
    rc = bench_plot(&o) == 0 ? 0 : args_error_exit(&a, 1);
    free(files);
    return rc;
fail:
    free(files);
    return args_fail(&a);
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "serve")) return bench_serve_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sweep")) return bench_sweep_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plot")) return bench_plot_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "latency")) return cmd_bench_latency(argc - 1, argv + 1);
    if (!strcmp(argv[1], "tokenizer")) return cmd_bench_tokenizer(argc - 1, argv + 1);
    fprintf(stderr, "gptoss bench: unknown subcommand '%s'\n%s", argv[1], USAGE);
    return 2;
}
