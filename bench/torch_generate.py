#!/usr/bin/env python3
"""PyTorch peer of bench/generate_bench.c for bench/bench_generate.sh: greedy
generation at batch 1 with a key/value cache, tokens/s.

    torch_generate.py --layers L --embd C --heads NH --block T --prompt P --new N [--reps R]

The model is validation/torch_models.py's GPT (mpitrain's gpt: vocabulary
256, tanh GELU, tied head) with GPT-2's initialisation, in eval mode under
torch.inference_mode(). The cache is plain torch, no transformers library:
each block keeps its keys and values (NH, positions, hs); a step embeds the
new tokens at their positions, appends their keys and values and attends
with the references' arithmetic (q k^T / sqrt(hs), masked softmax, att v),
the prompt in one pass and then one token at a time, the argmax picked as
mpitrain does. One untimed run, then R timed ones, each printing

    RESULT torch tokens_per_s=X prefill_ms=P

tokens_per_s: N over the whole generation (prefill included). Threads:
--threads (1 by default; torch.set_num_threads, set before the import
through OMP_NUM_THREADS and MKL_NUM_THREADS as well).
"""

import argparse
import os
import sys
import time

ap = argparse.ArgumentParser()
for name, default in (("layers", 4), ("embd", 256), ("heads", 4), ("block", 256), ("prompt", 16),
                      ("new", 200), ("reps", 5), ("threads", 1)):
    ap.add_argument("--" + name, type=int, default=default)
args = ap.parse_args()
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)

import torch  # noqa: E402

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "validation"))
import torch_models as tm  # noqa: E402


def generate(model, prompt, N):
    logits, past = tm.cached_step(model, prompt, None, 0, last=True)
    out = []
    for i in range(N):
        tok = int(torch.argmax(logits))
        out.append(tok)
        if i + 1 < N:
            logits, past = tm.cached_step(model, torch.tensor([tok]), past, prompt.shape[0] + i,
                                          last=True)
    return out


def main():
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = tm.GPT(256, args.block, args.layers, args.heads, args.embd, "tanh").init_gpt2().eval()
    text = b"The quick brown fox jumps over the lazy dog. "
    prompt = torch.tensor([text[i % len(text)] for i in range(args.prompt)])
    assert args.prompt + args.new <= args.block
    with torch.inference_mode():
        for r in range(args.reps + 1):
            t0 = time.perf_counter()
            generate(model, prompt, args.new)
            t = time.perf_counter() - t0
            t0 = time.perf_counter()
            tm.cached_step(model, prompt, None, 0, last=True)
            pre = time.perf_counter() - t0
            if r:
                print("RESULT torch tokens_per_s=%.1f prefill_ms=%.3f" % (args.new / t, 1e3 * pre),
                      flush=True)


main()
