#include "model/weights.h"

#include "base/error.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dense_read(dense_ref r, size_t offset, size_t n, float *out) {
    if (r.dtype == ST_F32) {
        memcpy(out, (const float *)r.data + offset, n * sizeof *out);
        return;
    }
    const uint16_t *p = (const uint16_t *)r.data + offset;
    for (size_t j = 0; j < n; j++) out[j] = bf16_to_f32(p[j]);
}

static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Checks one tensor against its spec: dense tensors may be BF16 or F32, MXFP4 parts must be U8. */
static int check_tensor(const tensor_spec *s, const st_tensor *t) {
    int dtype_ok = tensor_kind_is_mxfp4(s->kind) ? t->dtype == ST_U8
                                                 : (t->dtype == ST_BF16 || t->dtype == ST_F32);
    int shape_ok = t->ndim == s->ndim;
    for (int d = 0; shape_ok && d < s->ndim; d++) shape_ok = t->shape[d] == s->shape[d];
    if (dtype_ok && shape_ok) return 0;
    char want[96], got[96];
    format_shape(want, sizeof want, s->ndim, s->shape);
    format_shape(got, sizeof got, t->ndim, t->shape);
    return err_set("tensor '%s' in %s: expected %s%s %s, found %s %s", s->name, t->file,
                   st_dtype_name(s->dtype), tensor_kind_is_mxfp4(s->kind) ? "" : " (or F32)", want,
                   st_dtype_name(t->dtype), got);
}

int weights_load(const char *dir, model_weights *w) {
    memset(w, 0, sizeof *w);
    if (config_load(dir, &w->cfg) != 0) return -1;
    if (st_model_open(dir, &w->st) != 0) return -1;
    const model_config *c = &w->cfg;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers) {
        weights_free(w);
        return err_set("out of memory binding %d layers", c->n_layers);
    }
    int n = tensor_count(c);
    for (int i = 0; i < n; i++) {
        tensor_spec s;
        tensor_spec_at(c, i, &s);
        const st_tensor *t = st_model_find(&w->st, s.name);
        if (!t) {
            weights_free(w);
            return err_set("%s: tensor '%s' is missing from the checkpoint", dir, s.name);
        }
        if (check_tensor(&s, t) != 0) {
            weights_free(w);
            return -1;
        }
        if (s.layer < 0)
            w->global[s.kind] = t;
        else
            w->layers[s.layer].t[s.kind] = t;
    }
    int total = 0;
    for (int f = 0; f < w->st.n_files; f++) total += w->st.files[f].n_tensors;
    if (total > n)
        log_warn("%s: %d tensors in the checkpoint are not used by the model", dir, total - n);
    return 0;
}

void weights_free(model_weights *w) {
    free(w->layers);
    st_model_close(&w->st);
    memset(w, 0, sizeof *w);
}
