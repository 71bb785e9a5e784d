/* What the three files of the step runner share, and nobody else needs:
 *
 *   runner.c            launch (check, pack, upload, enqueue) and collect (wait, host sampling)
 *   runner_forward.c    the forward pass as a sequence of kernel calls
 *   runner_workspace.c  the activation workspace: its plan (one allocation carved per array) and
 *                       the MoE plan the workspace is sized for
 *
 * The backend's other files see only runner.h. */
#ifndef GPTOSS_BACKEND_CUDA_RUNNER_INTERNAL_H
#define GPTOSS_BACKEND_CUDA_RUNNER_INTERNAL_H

#include "backend/cuda/runner.h"

/* moe_plan_for for a step of T tokens, with the down projection's K split kept within its K steps
 * (I / 64): the small-path kernel refuses more. The workspace's y_slots is sized from it, so the
 * launch must plan with it too. */
moe_plan runner_moe_plan(const struct backend *b, int T);

/* MoE rows per token in y_slots under plan p (k slots, times the K splits on the small path). */
int runner_moe_slots(const struct backend *b, const moe_plan *p);

#endif
