#include "bench/roofline.h"

#include <math.h>
#include <string.h>

void roofline_decode(const model_config *c, const roofline_in *in, roofline_out *o) {
    const double H = c->hidden, I = c->intermediate, E = c->n_experts, K = c->experts_per_tok,
                 L = c->n_layers;
    const double Q = (double)c->n_heads * c->head_dim, KV = (double)c->n_kv_heads * c->head_dim,
                 V = c->vocab;
    const double B = in->batch, C = in->context, tp = in->tp > 0 ? in->tp : 1;

    /* bf16 dense weights, read once per step */
    double attn =
        H * (Q + 2 * KV) + Q * H + (Q + 2 * KV + H) + c->n_heads; /* weights, biases, sinks */
    double router = E * H + E, norms = 2 * H;
    double dense_params = L * (attn + router + norms) + V * H /* lm_head */ + H /* final norm */;
    o->weight_bytes = dense_params * 2 + B * H * 2 /* embedding rows */;

    /* MXFP4 experts touched: 4.25 bits per weight, plus bf16 biases */
    double expert_weights = 2 * I * H + H * I;
    double expert_bytes = expert_weights * 17.0 / 32.0 + (2 * I + H) * 2;
    o->distinct_experts = E * (1 - pow(1 - K / E, B));
    o->expert_bytes = L * o->distinct_experts * expert_bytes;

    /* KV: K and V of every visible position, per layer */
    double full_layers = 0, sliding_layers = 0;
    for (int l = 0; l < c->n_layers; l++) c->layer_sliding[l] ? sliding_layers++ : full_layers++;
    double visible_sliding = C < c->sliding_window ? C : c->sliding_window;
    double kv_per_token_layer = 2 * KV * in->kv_bytes;
    o->kv_bytes = B * kv_per_token_layer * (full_layers * C + sliding_layers * visible_sliding);

    o->bytes_per_step = (o->weight_bytes + o->expert_bytes + o->kv_bytes) / tp;

    /* FLOPs: 2 per active weight per token, and QK^T + PV over the visible keys */
    double active = L * (attn + router + K * expert_weights) + V * H;
    double attention = 4 * Q * (full_layers * C + sliding_layers * visible_sliding);
    o->flops_per_step = B * (2 * active + attention) / tp;

    double t_mem = o->bytes_per_step / in->bandwidth, t_flop = o->flops_per_step / in->flops;
    o->memory_bound = t_mem >= t_flop;
    o->seconds_per_step = o->memory_bound ? t_mem : t_flop;
    o->tokens_per_second = B / o->seconds_per_step;
}

int roofline_kv_bytes(const char *kv) {
    if (!kv || !strcmp(kv, "auto") || !strcmp(kv, "bf16")) return 2;
    if (!strcmp(kv, "fp8") || !strcmp(kv, "fp8_e4m3")) return 1;
    return -1;
}
