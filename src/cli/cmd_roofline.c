/* gptoss roofline: DESIGN.md's performance model as a command. */
#include "base/error.h"
#include "bench/roofline.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/synthetic.h"

#include <stdio.h>
#include <string.h>

static const char USAGE[] =
    "usage: gptoss roofline --model 120b|20b|DIR --batch B --context C [--kv-dtype "
    "bf16|fp8|fp8_e4m3] [--tp "
    "N]\n"
    "                       [--bandwidth GB/s] [--flops TFLOP/s] [--json]\n"
    "The least time a decode step can take: max(bytes / bandwidth, FLOPs / matrix rate), per GPU.\n"
    "Defaults are the H200 figures measured here: 4200 GB/s and 790 TFLOP/s.\n";

int cmd_roofline(int argc, char **argv) {
    args_t a;
    args_init(&a, argc, argv);
    const char *model = NULL, *kv = "bf16", *v;
    long batch = 1, context = 1024, tp = 1;
    double bw = ROOFLINE_H200_BANDWIDTH / 1e9, fl = ROOFLINE_H200_FLOPS / 1e12;
    int json = 0;
    while (a.i < argc) {
        if (args_flag(&a, "--help") || args_flag(&a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (args_flag(&a, "--json")) {
            json = 1;
        } else if (args_opt(&a, "--model", &model)) {
            if (!model) return args_fail(&a);
        } else if (args_opt(&a, "--kv-dtype", &kv)) {
            if (!kv) return args_fail(&a);
        } else if (args_opt(&a, "--batch", &v)) {
            if (args_int("--batch", v, 1, 1 << 20, &batch)) return args_fail(&a);
        } else if (args_opt(&a, "--context", &v)) {
            if (args_int("--context", v, 0, 1 << 24, &context)) return args_fail(&a);
        } else if (args_opt(&a, "--tp", &v)) {
            if (args_int("--tp", v, 1, 64, &tp)) return args_fail(&a);
        } else if (args_opt(&a, "--bandwidth", &v)) {
            if (args_double("--bandwidth", v, 1, 1e6, &bw)) return args_fail(&a);
        } else if (args_opt(&a, "--flops", &v)) {
            if (args_double("--flops", v, 1, 1e6, &fl)) return args_fail(&a);
        } else {
            return args_unknown(&a, USAGE);
        }
    }
    if (!model) {
        return args_usage_error(&a, "--model is required", USAGE);
    }
    if (roofline_kv_bytes(kv) < 0) {
        fprintf(stderr,
                "gptoss roofline: option --kv-dtype: '%s' is not auto, bf16, fp8 or fp8_e4m3\n",
                kv);
        return 2;
    }
    model_config c;
    if (strcmp(model, "120b") && strcmp(model, "20b") ? config_load(model, &c)
                                                      : config_preset(model, &c))
        return args_error_exit(&a, 1);
    roofline_in in = {(int)batch, (int)context, roofline_kv_bytes(kv),
                      (int)tp,    bw * 1e9,     fl * 1e12};
    roofline_out o;
    roofline_decode(&c, &in, &o);
    if (json) {
        printf("{\"bytes_per_step\":%.0f,\"flops_per_step\":%.0f,\"seconds_per_step\":%.9g,"
               "\"tokens_per_second\":%.6g,"
               "\"bound\":\"%s\",\"weight_bytes\":%.0f,\"expert_bytes\":%.0f,\"kv_bytes\":%.0f,"
               "\"distinct_experts\":%.3f}\n",
               o.bytes_per_step, o.flops_per_step, o.seconds_per_step, o.tokens_per_second,
               o.memory_bound ? "memory" : "compute", o.weight_bytes / in.tp,
               o.expert_bytes / in.tp, o.kv_bytes / in.tp, o.distinct_experts);
    } else {
        printf("model %s, batch %ld, context %ld, kv %s, tp %ld, %.0f GB/s, %.0f TFLOP/s\n", model,
               batch, context, kv, tp, bw, fl);
        printf("bytes/step per GPU  %.3f GB (dense weights %.3f, experts %.3f over %.1f "
               "distinct/layer, KV %.3f)\n",
               o.bytes_per_step / 1e9, o.weight_bytes / tp / 1e9, o.expert_bytes / tp / 1e9,
               o.distinct_experts, o.kv_bytes / tp / 1e9);
        printf("FLOPs/step per GPU  %.3f TFLOP\n", o.flops_per_step / 1e12);
        printf("bound               %s, %.3f ms/step, %.1f tokens/s (%.1f tokens/s per sequence)\n",
               o.memory_bound ? "memory" : "compute", o.seconds_per_step * 1e3, o.tokens_per_second,
               o.tokens_per_second / batch);
    }
    return 0;
}
