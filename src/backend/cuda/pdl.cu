/* pdl_enabled: read GPTOSS_PDL once (see pdl.cuh). */
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
