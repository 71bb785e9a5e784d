/* Process-wide switches read from the environment once (the GPU kernels' measurement knobs:
 * GPTOSS_MOE_WGMMA, GPTOSS_MOE_TMA_RS, …). One parser for all of them, so each switch is a line. */
#ifndef GPTOSS_BASE_ENV_SWITCH_H
#define GPTOSS_BASE_ENV_SWITCH_H

#ifdef __cplusplus
extern "C" {
#endif

/* The switch in *slot: if *slot < 0 (not read yet, or reset by a test), the environment variable
 * `name` is read: its value if it is a whole decimal integer in [lo, hi] (lo >= 0), else dflt (also
 * when unset). The result is stored in *slot and returned; later calls return *slot. */
int env_switch(int *slot, const char *name, int dflt, int lo, int hi);

/* A test's setter: on < 0 makes the next env_switch read the environment again; otherwise on,
 * clamped to [lo, hi]. */
void env_switch_set(int *slot, int on, int lo, int hi);

#ifdef __cplusplus
}
#endif

#endif
