#include "model/tensors.h"

#include <stdio.h>
#include <string.h>

static const char *const LAYER_SUFFIX[TK_LAYER_KINDS] = {
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.q_proj.bias",
    "self_attn.k_proj.weight",
    "self_attn.k_proj.bias",
    "self_attn.v_proj.weight",
    "self_attn.v_proj.bias",
    "self_attn.o_proj.weight",
    "self_attn.o_proj.bias",
    "self_attn.sinks",
    "post_attention_layernorm.weight",
    "mlp.router.weight",
    "mlp.router.bias",
    "mlp.experts.gate_up_proj_blocks",
    "mlp.experts.gate_up_proj_scales",
    "mlp.experts.gate_up_proj_bias",
    "mlp.experts.down_proj_blocks",
    "mlp.experts.down_proj_scales",
    "mlp.experts.down_proj_bias",
};

int tensor_count(const model_config *c) {
    return 3 + c->n_layers * TK_LAYER_KINDS;
}

int tensor_kind_is_mxfp4(enum tensor_kind k) {
    return k == TK_GATE_UP_BLOCKS || k == TK_GATE_UP_SCALES || k == TK_DOWN_BLOCKS ||
           k == TK_DOWN_SCALES;
}

static void set_shape(tensor_spec *t, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    t->ndim = ndim;
    t->shape[0] = a, t->shape[1] = b, t->shape[2] = c, t->shape[3] = d;
}

void tensor_spec_at(const model_config *c, int i, tensor_spec *t) {
    memset(t, 0, sizeof *t);
    t->dtype = ST_BF16;
    t->layer = -1;
    const int64_t H = c->hidden, I = c->intermediate, E = c->n_experts, V = c->vocab;
    const int64_t Q = (int64_t)c->n_heads * c->head_dim, KV = (int64_t)c->n_kv_heads * c->head_dim;
    int last = tensor_count(c) - 1;
    if (i == 0) {
        t->kind = TK_EMBED;
        snprintf(t->name, sizeof t->name, "model.embed_tokens.weight");
        set_shape(t, 2, V, H, 0, 0);
        return;
    }
    if (i == last - 1) {
        t->kind = TK_FINAL_NORM;
        snprintf(t->name, sizeof t->name, "model.norm.weight");
        set_shape(t, 1, H, 0, 0, 0);
        return;
    }
    if (i == last) {
        t->kind = TK_LM_HEAD;
        snprintf(t->name, sizeof t->name, "lm_head.weight");
        set_shape(t, 2, V, H, 0, 0);
        return;
    }
    int j = i - 1;
    t->layer = j / TK_LAYER_KINDS;
    t->kind = (enum tensor_kind)(TK_FIRST_LAYER_KIND + j % TK_LAYER_KINDS);
    snprintf(t->name, sizeof t->name, "model.layers.%d.%s", t->layer,
             LAYER_SUFFIX[j % TK_LAYER_KINDS]);
    switch (t->kind) {
    case TK_ATTN_NORM:
    case TK_MLP_NORM:
    case TK_O_B:
        set_shape(t, 1, H, 0, 0, 0);
        break;
    case TK_Q_W:
        set_shape(t, 2, Q, H, 0, 0);
        break;
    case TK_Q_B:
        set_shape(t, 1, Q, 0, 0, 0);
        break;
    case TK_K_W:
    case TK_V_W:
        set_shape(t, 2, KV, H, 0, 0);
        break;
    case TK_K_B:
    case TK_V_B:
        set_shape(t, 1, KV, 0, 0, 0);
        break;
    case TK_O_W:
        set_shape(t, 2, H, Q, 0, 0);
        break;
    case TK_SINKS:
        set_shape(t, 1, c->n_heads, 0, 0, 0);
        break;
    case TK_ROUTER_W:
        set_shape(t, 2, E, H, 0, 0);
        break;
    case TK_ROUTER_B:
        set_shape(t, 1, E, 0, 0, 0);
        break;
    case TK_GATE_UP_BLOCKS:
        set_shape(t, 4, E, 2 * I, H / 32, 16), t->dtype = ST_U8;
        break;
    case TK_GATE_UP_SCALES:
        set_shape(t, 3, E, 2 * I, H / 32, 0), t->dtype = ST_U8;
        break;
    case TK_GATE_UP_BIAS:
        set_shape(t, 2, E, 2 * I, 0, 0);
        break;
    case TK_DOWN_BLOCKS:
        set_shape(t, 4, E, H, I / 32, 16), t->dtype = ST_U8;
        break;
    case TK_DOWN_SCALES:
        set_shape(t, 3, E, H, I / 32, 0), t->dtype = ST_U8;
        break;
    case TK_DOWN_BIAS:
        set_shape(t, 2, E, H, 0, 0);
        break;
    default:
        break;
    }
}
