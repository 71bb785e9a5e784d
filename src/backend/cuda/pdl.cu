/* pdl_enabled: read GPTOSS_PDL once; pdl_carveout: the shared-memory carveout asked of every launch
 * (see pdl.cuh). */
#include "backend/cuda/pdl.cuh"

#include <stdlib.h>
#include <string.h>

extern "C" int pdl_enabled(void) {
    static int cached = -1; /* benign race: every thread computes the same value */
    if (cached < 0) {
        const char *v = getenv("GPTOSS_PDL");
        cached = v && strcmp(v, "1") == 0; /* off unless asked for: see pdl.cuh */
    }
    return cached;
}

static int g_carveout = -1; /* pdl_set_carveout's value; -1: none asked */

extern "C" void pdl_set_carveout(int percent) {
    g_carveout = percent >= 0 && percent <= 100 ? percent : -1;
}

extern "C" int pdl_carveout(void) {
    static int env = -2; /* -2: GPTOSS_CARVEOUT not read yet; -1: not set */
    if (env == -2) {
        const char *v = getenv("GPTOSS_CARVEOUT");
        env = !v ? -1 : strcmp(v, "none") == 0 ? -3 : atoi(v) < 0 || atoi(v) > 100 ? -1 : atoi(v);
    }
    return env == -3 ? -1 : env >= 0 ? env : g_carveout;
}
