#include "cli/presets.h"

#include "base/error.h"

#include <string.h>

/* The points each preset stands on are gpt-oss-120b's measured 1k/1k frontier on one H200: the
 * README's "Presets" table names the commits and result files. min-latency caps the batch where a
 * user still gets most of the batch-1 speed (373 tokens/s a user at 1 user, 224 at 4); balanced
 * holds the 40 tokens/s-a-user line that vLLM's published H200 point is measured at (49.9 tokens/s
 * a user at 64 users); max-throughput runs the widest batch measured (256 users: 28.8 tokens/s a
 * user, 14,317 per GPU) and streams every 4 tokens (fewer SSE writes at a TPOT of ~35 ms).
 * No preset sets --target-tpot-ms: at 64 users it left the median TPOT where it was (23.0 ms with
 * a 35 ms target) and nearly tripled the median TTFT (291 -> 806 ms), and at 256 users a 35 ms
 * target held the TPOT (33 ms, p99 34.9) at the cost of 37 % of the throughput and a 24 s median
 * TTFT (bench/results/sweep-120b-2026-12-01-s4.md): a trade a user should choose, not a default. */
typedef struct {
    const char *name;
    int max_num_seqs, max_num_batched_tokens, stream_interval;
    double target_tpot_ms;
} preset;

static const preset PRESETS[] = {
    {"min-latency", 8, 8192, 1, 0},
    {"balanced", 64, 8192, 1, 0},
    {"max-throughput", 256, 8192, 4, 0},
};

int preset_apply(const char *name, runtime_args *r) {
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++) {
        const preset *p = &PRESETS[i];
        if (!name || strcmp(name, p->name)) continue;
        r->eng.max_num_seqs = p->max_num_seqs;
        r->eng.max_num_batched_tokens = p->max_num_batched_tokens;
        r->eng.stream_interval = p->stream_interval;
        r->eng.target_tpot_ms = p->target_tpot_ms;
        return 0;
    }
    return err_set("--preset %s: expected min-latency, balanced or max-throughput",
                   name ? name : "(none)");
}
