/* env_switch.h: one parser for the environment switches. */
#include "base/env_switch.h"

#include <errno.h>
#include <stdlib.h>

int env_switch(int *slot, const char *name, int dflt, int lo, int hi) {
    if (*slot >= 0) return *slot;
    const char *v = getenv(name);
    int r = dflt;
    if (v && *v) {
        char *end;
        errno = 0;
        const long x = strtol(v, &end, 10);
        if (!*end && errno == 0 && x >= lo && x <= hi) r = (int)x;
    }
    *slot = r;
    return r;
}

void env_switch_set(int *slot, int on, int lo, int hi) {
    *slot = on < 0 ? -1 : on < lo ? lo : on > hi ? hi : on;
}
