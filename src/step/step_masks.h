/* Token masks of constrained rows (structured output), handed from the engine to the sampler.
 *
 * Why a gate: the mask of step N+1 depends on the token sampled in step N, which the engine only
 * knows once step N is collected — just before step N+1 is launched. Computing the masks then would
 * leave the device idle for their whole cost. Instead the engine launches step N+1 first, fills the
 * masks while the forward pass runs, and publishes them; the sampler of a constrained row (on the
 * CPU worker thread, or on the engine thread inside the CUDA backend's wait) waits on the gate, which
 * is normally open long before the logits exist.
 *
 * A row is constrained when params[i].constrained is set; its mask may still be NULL (the sequence
 * is in a free part of its output, e.g. harmony's analysis channel, or it stopped meanwhile), and
 * then it is sampled as if unconstrained. */
#ifndef GPTOSS_STEP_STEP_MASKS_H
#define GPTOSS_STEP_STEP_MASKS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct step_masks {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool ready;
    int n_rows;            /* rows[] entries valid once ready */
    const uint32_t **rows; /* [n_rows]: bit t of word t / 32 set = token t allowed; NULL = none */
    size_t words;          /* uint32 words of a row */
} step_masks;

void step_masks_init(step_masks *m);
void step_masks_destroy(step_masks *m);
/* Closes the gate (the engine, before launching the step that uses it). */
void step_masks_reset(step_masks *m);
/* Opens it: rows[0..n_rows) are final (the engine, after filling them). */
void step_masks_publish(step_masks *m);
/* Row i's mask once published (waits until then); NULL when row i has none. */
const uint32_t *step_masks_row(step_masks *m, int i);

/* logits[t] = -inf for every token the mask does not allow (tokens at or past words * 32 included).
 * A mask that allows nothing is not applied (the sampler would otherwise draw uniformly from the
 * whole vocabulary); the engine never produces one. */
void step_mask_apply(float *logits, int vocab, const uint32_t *mask, size_t words);

#endif
