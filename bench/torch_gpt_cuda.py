#!/usr/bin/env python3
"""PyTorch peer for bench/bench_gpu.sh: the gpt model trained on one GPU.

The model is validation/torch_models.py's GPT, the twin of mpitrain's gpt
(same layers, shapes, tied lm_head, tanh GELU), initialised as GPT-2, trained
with AdamW (lr 3e-4, PyTorch's defaults otherwise: foreach on CUDA) on
batches of --batch windows of --block + 1 random byte tokens (V = 256) that
sit on the GPU already (no data loading: this favours the peer).

  --amp none   fp32 (TF32 off, PyTorch's default for matmuls)
  --amp bf16   torch.autocast("cuda", dtype=torch.bfloat16): O1, bf16 GEMMs
  --attn twin  the twin's attention: softmax(QK^T / sqrt(hs) + causal mask) V,
               the same arithmetic as mpitrain's kernel
  --attn sdpa  F.scaled_dot_product_attention(is_causal=True): the fused
               (flash) attention a PyTorch user gets from nanoGPT's model

Only the --steps steps after --warmup steps are timed (CUDA synchronised at
both ends). The last line is machine-readable:

    RESULT torch_gpt_cuda amp=bf16 attn=sdpa tokens_per_s=123456.7
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "validation"))
import torch_models as tm  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--embd", type=int, default=384)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=35)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--amp", choices=("none", "bf16"), default="none")
    p.add_argument("--attn", choices=("twin", "sdpa"), default="twin")
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be at least 1 and --warmup at least 0")
    if not torch.cuda.is_available():
        print("skipped: torch sees no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    tm.CausalSelfAttention.sdpa = a.attn == "sdpa"
    torch.manual_seed(42)
    model = tm.GPT(256, a.block, a.layers, a.heads, a.embd, "tanh").init_gpt2().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator(device=dev)
    g.manual_seed(1)

    def step():
        w = torch.randint(0, 256, (a.batch, a.block + 1), device=dev, generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.amp == "bf16"):
            logits = model(w[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tps = a.steps * a.batch * a.block / dt
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}: loss {loss.item():.4f}")
    print(f"RESULT torch_gpt_cuda amp={a.amp} attn={a.attn} tokens_per_s={tps:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
