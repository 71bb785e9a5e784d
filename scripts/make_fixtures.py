#!/usr/bin/env python3
"""Reference fixtures from Hugging Face transformers' own GptOss implementation.

Run on the GPU machine (it has torch and transformers); writes into OUTDIR:
  tiny/reference.safetensors     logits for tests/fixtures/tiny (written by `gptoss make-model`)
  pyckpt/config.json, pyckpt/model.safetensors, pyckpt/reference.safetensors
                                 a second checkpoint written here by safetensors' own writer (single
                                 file, `rope_parameters` spelling, other shapes), and its logits
  rope_reference.safetensors     transformers' YaRN inv_freq and attention factor for the real config
  tiny64/, tiny64_reference.safetensors
                                 like pyckpt with the real head geometry (head_dim 64, 16 q / 2 kv
                                 heads), for the CUDA kernels, and its logits

The checkpoints are loaded with GptOssForCausalLM.from_pretrained(..., quantization_config=
Mxfp4Config(dequantize=True)) so the MXFP4 decoding is transformers' own, in float32 with eager
attention (sinks), and the logits of every prompt position are recorded together with an 8-token greedy
continuation and its top-1 margins.
"""
import json
import os
import sys
import traceback

import torch
from safetensors.torch import save_file
from transformers import GptOssForCausalLM, Mxfp4Config
import transformers

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
PROMPT_LENGTHS = [1, 7, 16, 17, 40, 100]
GREEDY = 8


def load(path):
    q = Mxfp4Config(dequantize=True)
    try:
        m = GptOssForCausalLM.from_pretrained(path, quantization_config=q, dtype=torch.float32,
                                              attn_implementation="eager")
    except TypeError:
        m = GptOssForCausalLM.from_pretrained(path, quantization_config=q, torch_dtype=torch.float32,
                                              attn_implementation="eager")
    # transformers dequantises MXFP4 experts into bf16 parameters (exact: every MXFP4 value is a bf16
    # value) and may then run the experts in bf16. Widen every parameter to float32 so the whole
    # reference runs in float32, and say which ones were not.
    narrow = sorted({f"{n.split('.')[-1]}:{p.dtype}" for n, p in m.named_parameters() if p.dtype != torch.float32})
    print("  parameters not float32 after loading (widened now):", narrow or "none")
    for p in m.parameters():
        p.data = p.data.float()
    for b_name, b in m.named_buffers():
        if b.is_floating_point() and b.dtype != torch.float32:
            print("  buffer", b_name, b.dtype)
    print("  experts implementation:", getattr(m.config, "_experts_implementation", None),
          "attention:", getattr(m.config, "_attn_implementation", None))
    return m.to(DEV).eval()


@torch.no_grad()
def logits_of(model, ids):
    out = model(input_ids=torch.tensor([ids], device=DEV), use_cache=False)
    return out.logits[0].float().cpu()


@torch.no_grad()
def reference(model, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for i, n in enumerate(PROMPT_LENGTHS):
        ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        lg = logits_of(model, ids)
        assert torch.isfinite(lg).all(), "non-finite logits"
        seq, greedy, margins = list(ids), [], []
        for _ in range(GREEDY):
            last = logits_of(model, seq)[-1]
            top = torch.topk(last, 2)
            greedy.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            seq.append(greedy[-1])
        hs = model(input_ids=torch.tensor([ids], device=DEV), use_cache=False, output_hidden_states=True).hidden_states
        tensors[f"p{i}.hidden"] = torch.stack([h[0].float().cpu() for h in hs]).contiguous()
        tensors[f"p{i}.ids"] = torch.tensor(ids, dtype=torch.int64)
        tensors[f"p{i}.logits"] = lg.contiguous()
        tensors[f"p{i}.greedy"] = torch.tensor(greedy, dtype=torch.int64)
        tensors[f"p{i}.greedy_margin"] = torch.tensor(margins, dtype=torch.float32)
        print(f"  prompt {i}: len {n}, max|logit| {lg.abs().max():.3f}, std {lg.std():.3f}, "
              f"greedy {greedy}, min margin {min(margins):.4f}")
    return tensors


def mxfp4_random(g, shape_rows, nblocks, std):
    """Random MXFP4 codes (uniform nibbles, RMS 2.926) with scales giving about `std`."""
    import math
    blocks = torch.randint(0, 256, (*shape_rows, nblocks, 16), generator=g, dtype=torch.int64).to(torch.uint8)
    base = 127 + round(math.log2(std / 2.926))
    scales = (base + torch.randint(-1, 2, (*shape_rows, nblocks), generator=g)).to(torch.uint8)
    return blocks, scales


def write_pyckpt(path, dims=(3, 6, 2, 96, 64, 4, 1, 24, 777, 8), seed=1234):
    """A checkpoint written independently of gptoss: one file, the new config spelling. The default
    dims differ from every preset; tiny64 has the real head geometry (head_dim 64, 8 query heads per
    KV head) that the CUDA kernels require, at a tiny width."""
    os.makedirs(path, exist_ok=True)
    L, E, K, H, I, NH, NKV, D, V, W = dims
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, std=1.0, mean=0.0):
        return (torch.randn(*shape, generator=g) * std + mean).to(torch.bfloat16)

    t = {"model.embed_tokens.weight": randn(V, H), "model.norm.weight": randn(H, std=0.1, mean=1.0),
         "lm_head.weight": randn(V, H, std=3 / H ** 0.5)}
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = randn(H, std=0.1, mean=1.0)
        t[p + "post_attention_layernorm.weight"] = randn(H, std=0.1, mean=1.0)
        t[p + "self_attn.q_proj.weight"] = randn(NH * D, H, std=H ** -0.5)
        t[p + "self_attn.q_proj.bias"] = randn(NH * D, std=0.1)
        t[p + "self_attn.k_proj.weight"] = randn(NKV * D, H, std=H ** -0.5)
        t[p + "self_attn.k_proj.bias"] = randn(NKV * D, std=0.1)
        t[p + "self_attn.v_proj.weight"] = randn(NKV * D, H, std=H ** -0.5)
        t[p + "self_attn.v_proj.bias"] = randn(NKV * D, std=0.1)
        t[p + "self_attn.o_proj.weight"] = randn(H, NH * D, std=0.5 * (NH * D) ** -0.5)
        t[p + "self_attn.o_proj.bias"] = randn(H, std=0.02)
        t[p + "self_attn.sinks"] = randn(NH, std=1.0, mean=0.5)
        t[p + "mlp.router.weight"] = randn(E, H, std=2 * H ** -0.5)
        t[p + "mlp.router.bias"] = randn(E, std=0.1)
        b, s = mxfp4_random(g, (E, 2 * I), H // 32, H ** -0.5)
        t[p + "mlp.experts.gate_up_proj_blocks"], t[p + "mlp.experts.gate_up_proj_scales"] = b, s
        t[p + "mlp.experts.gate_up_proj_bias"] = randn(E, 2 * I, std=0.05)
        b, s = mxfp4_random(g, (E, H), I // 32, 0.5 * I ** -0.5)
        t[p + "mlp.experts.down_proj_blocks"], t[p + "mlp.experts.down_proj_scales"] = b, s
        t[p + "mlp.experts.down_proj_bias"] = randn(E, H, std=0.02)
    save_file(t, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    cfg = {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH,
        "num_key_value_heads": NKV, "head_dim": D, "num_local_experts": E, "num_experts_per_tok": K,
        "experts_per_token": K, "vocab_size": V, "sliding_window": W, "rms_norm_eps": 1e-5,
        "swiglu_limit": 7.0, "max_position_embeddings": 131072, "tie_word_embeddings": False,
        "layer_types": ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(L)],
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                            "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False},
        "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
        "eos_token_id": 200002, "pad_token_id": 0,
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return V


def rope_reference(out):
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding
    cfg = GptOssConfig(hidden_size=2880, num_attention_heads=64, head_dim=64, num_key_value_heads=8,
                       rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                        "beta_fast": 32.0, "beta_slow": 1.0,
                                        "original_max_position_embeddings": 4096, "truncate": False})
    rot = GptOssRotaryEmbedding(cfg)
    pos = torch.tensor([[0, 1, 5, 127, 128, 4095, 4096, 65535, 131071]])
    x = torch.zeros(1, 1, 64)
    cos, sin = rot(x, pos)
    save_file({"inv_freq": rot.inv_freq.float().contiguous(),
               "attention_scaling": torch.tensor([float(rot.attention_scaling)]),
               "positions": pos[0].to(torch.int64), "cos": cos[0].float().contiguous(),
               "sin": sin[0].float().contiguous()}, out)
    print("  rope: attention_scaling", rot.attention_scaling, "inv_freq[:4]", rot.inv_freq[:4].tolist())


def pyckpt(path):
    vocab = write_pyckpt(path)
    save_file(reference(load(path), vocab, 12), os.path.join(path, "reference.safetensors"))


def tiny64(path):
    vocab = write_pyckpt(path, dims=(4, 8, 4, 128, 128, 16, 2, 64, 1024, 16), seed=64)
    save_file(reference(load(path), vocab, 13), os.path.join(os.path.dirname(path), "tiny64_reference.safetensors"))


def main():
    repo, outdir = sys.argv[1], sys.argv[2]
    print("transformers", transformers.__version__, "torch", torch.__version__, "device", DEV)
    ok = True
    steps = [
        ("tiny", lambda: save_file(reference(load(os.path.join(repo, "tests/fixtures/tiny")), 1024, 11),
                                   os.path.join(outdir, "tiny_reference.safetensors"))),
        ("pyckpt", lambda: pyckpt(os.path.join(outdir, "pyckpt"))),
        ("rope", lambda: rope_reference(os.path.join(outdir, "rope_reference.safetensors"))),
        ("tiny64", lambda: tiny64(os.path.join(outdir, "tiny64"))),
    ]
    only = sys.argv[3:]  # optional: run only the named steps
    for name, fn in steps:
        if only and name not in only:
            continue
        print(f"[{name}]")
        try:
            fn()
        except Exception:
            ok = False
            traceback.print_exc()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
