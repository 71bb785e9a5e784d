/* The attention stream kernel's work partition (backend/cuda/attn_stream_plan.h), checked on the
 * host, where the kernel itself cannot run: every QKV row pair and O row belongs to exactly one
 * block, with shares that differ by at most one; every visible key of a sequence is read by exactly
 * one split, there are at most SL splits, and a split past the count reads nothing. Over
 * grids of 1-200 blocks, 1-6000 items, contexts 1-20000 with and without the 128-key window, and
 * 1-40 split slots. */
#include "check.h"

#include "backend/cuda/attn_stream_plan.h"

#include <stdlib.h>

static void check_shares(int G, int n) {
    int next = 0, min = n, max = 0;
    for (int b = 0; b < G; b++) {
        int lo;
        const int c = asp_share(b, G, n, &lo);
        CHECK(lo == next && c >= 0, "G=%d n=%d block %d: starts at %d, expected %d", G, n, b, lo,
              next);
        next = lo + c;
        min = c < min ? c : min, max = c > max ? c : max;
    }
    CHECK(next == n, "G=%d n=%d: the shares cover %d items", G, n, next);
    CHECK(max - min <= 1, "G=%d n=%d: shares of %d to %d items", G, n, min, max);
}

static void check_splits(int pos, int window, int SL) {
    int k_lo;
    const int n = asp_chunks(pos, window, &k_lo);
    const int want_lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    CHECK(k_lo == want_lo && n == (pos + 1 - k_lo + ASP_KEYS - 1) / ASP_KEYS && n >= 1,
          "pos=%d window=%d: keys from %d in %d chunks", pos, window, k_lo, n);
    int next = 0, S = -1;
    for (int split = 0; split < SL; split++) {
        int c0, c1;
        const int s = asp_split(n, SL, split, &c0, &c1);
        if (S < 0) S = s;
        CHECK(s == S, "n=%d SL=%d: the split count depends on the split", n, SL);
        if (split >= S) continue;
        CHECK(c0 == next && c1 > c0 && c1 <= n, "n=%d SL=%d split %d: chunks [%d, %d), next %d", n,
              SL, split, c0, c1, next);
        next = c1;
    }
    CHECK(S >= 1 && S <= SL && S <= n, "n=%d SL=%d: %d splits", n, SL, S);
    CHECK(next == n, "n=%d SL=%d: the splits cover %d of %d chunks", n, SL, next, n);
}

int main(void) {
    const int grids[] = {1, 2, 7, 66, 78, 114, 132, 200};
    const int items[] = {1, 16, 128, 131, 132, 133, 1280, 2560, 2880, 6000};
    for (size_t g = 0; g < sizeof grids / sizeof *grids; g++)
        for (size_t i = 0; i < sizeof items / sizeof *items; i++) check_shares(grids[g], items[i]);
    const int positions[] = {0, 1, 63, 64, 65, 127, 128, 129, 999, 1023, 1024, 4999, 19999};
    for (size_t p = 0; p < sizeof positions / sizeof *positions; p++)
        for (int window = 0; window <= 128; window += 128)
            for (int SL = 1; SL <= 40; SL++) check_splits(positions[p], window, SL);
    return check_report("test_attn_stream_plan");
}
