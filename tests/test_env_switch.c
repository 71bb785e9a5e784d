/* env_switch (base/env_switch.h): the value when whole and in range, the default otherwise, read
 * once, re-read after a reset, and the setter's clamp. */
#include "check.h"

#include "base/env_switch.h"

#include <stdlib.h>

#define NAME "GPTOSS_TEST_ENV_SWITCH"

static int read_fresh(const char *value, int dflt, int lo, int hi) {
    int slot = -1;
    if (value)
        setenv(NAME, value, 1);
    else
        unsetenv(NAME);
    return env_switch(&slot, NAME, dflt, lo, hi);
}

int main(void) {
    CHECK(read_fresh(NULL, 3, 0, 5) == 3, "unset: the default");
    CHECK(read_fresh("", 3, 0, 5) == 3, "empty: the default");
    CHECK(read_fresh("0", 3, 0, 5) == 0, "0 in range");
    CHECK(read_fresh("5", 3, 0, 5) == 5, "the upper bound");
    CHECK(read_fresh("6", 3, 0, 5) == 3, "above the range: the default");
    CHECK(read_fresh("-1", 3, 0, 5) == 3, "below the range: the default");
    CHECK(read_fresh("2x", 3, 0, 5) == 3, "trailing characters: the default");
    CHECK(read_fresh("x", 3, 0, 5) == 3, "not a number: the default");
    CHECK(read_fresh("99999999999999999999", 3, 0, 5) == 3, "overflow: the default");

    int slot = -1;
    setenv(NAME, "1", 1);
    CHECK(env_switch(&slot, NAME, 0, 0, 2) == 1 && slot == 1, "read and stored");
    setenv(NAME, "2", 1);
    CHECK(env_switch(&slot, NAME, 0, 0, 2) == 1, "read once: a later change is not seen");
    env_switch_set(&slot, -1, 0, 2);
    CHECK(env_switch(&slot, NAME, 0, 0, 2) == 2, "a reset reads again");
    env_switch_set(&slot, 7, 0, 2);
    CHECK(slot == 2, "the setter clamps to the upper bound");
    env_switch_set(&slot, 0, 1, 2);
    CHECK(slot == 1, "the setter clamps to the lower bound");
    unsetenv(NAME);
    return check_report("test_env_switch");
}
