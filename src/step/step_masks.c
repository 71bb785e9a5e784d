/* The mask gate between the engine and the samplers (step_masks.h). */
#include "step/step_masks.h"

#include <math.h>

void step_masks_init(step_masks *m) {
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->ready = false;
    m->n_rows = 0;
    m->rows = NULL;
    m->words = 0;
}

void step_masks_destroy(step_masks *m) {
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
}

void step_masks_reset(step_masks *m) {
    pthread_mutex_lock(&m->mu);
    m->ready = false;
    pthread_mutex_unlock(&m->mu);
}

void step_masks_publish(step_masks *m) {
    pthread_mutex_lock(&m->mu);
    m->ready = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

const uint32_t *step_masks_row(step_masks *m, int i) {
    pthread_mutex_lock(&m->mu);
    while (!m->ready) pthread_cond_wait(&m->cv, &m->mu);
    const uint32_t *r = i >= 0 && i < m->n_rows ? m->rows[i] : NULL;
    pthread_mutex_unlock(&m->mu);
    return r;
}

void step_mask_apply(float *logits, int vocab, const uint32_t *mask, size_t words) {
    bool any = false;
    for (size_t w = 0; w < words && !any; w++) any = mask[w] != 0;
    if (!any) return;
    /* Branch-free per word (the compiler vectorises it); whole words of allowed tokens skipped. */
    const float ninf = -INFINITY;
    const int full = vocab / 32;
    for (int w = 0; w < full; w++) {
        const uint32_t bits = (size_t)w < words ? mask[w] : 0;
        if (bits == 0xffffffffu) continue;
        float *l = logits + (size_t)w * 32;
        for (int k = 0; k < 32; k++) l[k] = (bits >> k & 1u) ? l[k] : ninf;
    }
    const uint32_t tail = (size_t)full < words ? mask[full] : 0;
    for (int t = full * 32; t < vocab; t++)
        if (!(tail >> (t - full * 32) & 1u)) logits[t] = ninf;
}
