/* The tail-split trial's work map (backend/cuda/moe_tail_plan.h), checked on the host, where the
 * kernel cannot run: over n items, `slots` resident blocks and S K-split slots, a grid of n + slots
 * blocks gives every item's K range [0, KK) exactly once — one whole block, or f consecutive splits
 * whose ranges (s·KK/f … (s+1)·KK/f, as small_begin_tail takes them) meet end to end — with
 * 1 ≤ f ≤ S; items of the full waves are whole; the split items are those of the last partial wave
 * and fit in one wave of blocks; and every block past the map has nothing to do. */
#include "check.h"

#include "backend/cuda/moe_tail_plan.h"

#include <stdlib.h>

enum { KK = 45 }; /* the 120b down projection's k steps (2,880 / 64) */

static void check_map(int n, int slots, int S) {
    int *next = calloc((size_t)n + 1, sizeof *next),
        *splits = calloc((size_t)n + 1, sizeof *splits);
    const int W = n / slots * slots;
    int used = 0, split_blocks = 0, last_item = -1;
    for (int b = 0; b < n + slots; b++) {
        int item, s, f;
        if (!mtp_block(b, n, slots, S, &item, &s, &f)) continue;
        used++;
        CHECK(item >= 0 && item < n, "n=%d slots=%d S=%d block %d: item %d", n, slots, S, b, item);
        if (item < 0 || item >= n) continue;
        CHECK(f >= 1 && f <= S && s >= 0 && s < f, "n=%d slots=%d S=%d block %d: split %d of %d", n,
              slots, S, b, s, f);
        CHECK(item >= last_item, "n=%d slots=%d S=%d block %d: item %d after %d", n, slots, S, b,
              item, last_item);
        last_item = item;
        CHECK(item < W ? f == 1 : 1, "n=%d slots=%d S=%d: item %d of a full wave split %d ways", n,
              slots, S, item, f);
        if (f > 1) split_blocks++;
        const int lo = s * KK / f, hi = (s + 1) * KK / f;
        CHECK(lo == next[item] && hi > lo,
              "n=%d slots=%d S=%d item %d split %d/%d: k [%d, %d), "
              "expected from %d",
              n, slots, S, item, s, f, lo, hi, next[item]);
        next[item] = hi;
        splits[item] = f;
    }
    for (int i = 0; i < n; i++)
        CHECK(next[i] == KK, "n=%d slots=%d S=%d item %d: k steps covered to %d of %d", n, slots, S,
              i, next[i], KK);
    CHECK(split_blocks <= slots, "n=%d slots=%d S=%d: %d split blocks (more than a wave)", n, slots,
          S, split_blocks);
    CHECK(used <= n + slots, "n=%d slots=%d S=%d: %d blocks used", n, slots, S, used);
    /* Where the last wave is at most half the slots and S ≥ 2, its items are split. */
    const int R = n - W;
    if (S >= 2 && R > 0 && 2 * R <= slots)
        CHECK(splits[n - 1] >= 2, "n=%d slots=%d S=%d: the last wave (%d items) not split", n,
              slots, S, R);
    free(next);
    free(splits);
}

int main(void) {
    const int slots[] = {1, 2, 132, 264, 528, 660};
    const int items[] = {0, 1, 2, 45, 180, 264, 356, 527, 528, 529, 698, 1278, 1440, 4986, 9972};
    for (size_t s = 0; s < sizeof slots / sizeof *slots; s++)
        for (size_t i = 0; i < sizeof items / sizeof *items; i++)
            for (int S = 1; S <= 5; S++) check_map(items[i], slots[s], S);
    return check_report("test_moe_tail_plan");
}
