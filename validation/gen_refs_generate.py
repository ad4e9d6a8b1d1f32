#!/usr/bin/python3
"""Writes validation/refs/generate.txt: text generation by PyTorch's twin of
mpitrain's gpt (validation/torch_models.py) with a key/value cache, which
tests/test_generate.c compares mpitrain's (src/models/gpt_generate.c)
against.

Run from anywhere with an interpreter that has torch and numpy:

    /usr/bin/python3 validation/gen_refs_generate.py

The weights are not in the file: both sides compute them from a formula over
mpitrain's counter-based generator (fill_params, the C test's twin), exact in
float32, so the file stays small. For each case NAME:

  NAME.hp           V T L NH C gelu_tanh fill_seed
  NAME.prompt       the prompt's tokens
  NAME.greedy       the greedy tokens decoded with the cache; the script
                    checks that each is also the argmax of a full forward of
                    the sequence so far, and that the top two logits are far
                    apart (no tie for rounding to break)
  NAME.logit_steps  the steps whose logits follow
  NAME.logits       (steps, V) the logits those tokens were picked from
  NAME.sample       temperature, top_k, seed
  NAME.sampled      tokens drawn by mpitrain's rule (pick() below, the twin
                    of mt_gpt_pick) from the same generator; the script
                    checks every draw is far from a boundary of the
                    cumulative distribution, so float rounding cannot move it
"""

import math
import os
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True  # nothing written beside the sources
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_models as tm  # noqa: E402

OUT = os.path.join(HERE, "refs", "generate.txt")
PURPOSE_FILL = 0x67656E     # tests/test_generate.c's fill_params
PURPOSE_GENERATE = 31       # MT_PURPOSE_GENERATE, src/models/gpt_generate.h


def fill_params(model, seed):
    """tensor k, element i: x = ((mt_rand64(mt_key(seed, PURPOSE_FILL, k), i)
    >> 44) - 2^19) / 2^19; LayerNorm weights 1 + x/8, biases x/8,
    embeddings x/2, other weights x / 2^e, 2^e ~ sqrt(fan_in)."""
    with torch.no_grad():
        for k, (name, p) in enumerate(tm.mpitrain_names(model)):
            key = tm.mt_key(seed, PURPOSE_FILL, k)
            n = p.numel()
            r = np.array([tm.mt_rand64(key, i) >> 44 for i in range(n)], dtype=np.int64)
            x = ((r - (1 << 19)) / float(1 << 19)).astype(np.float32)
            bias, ln = name.endswith(".bias"), "ln_" in name
            if ln and not bias:
                v = np.float32(1) + x / np.float32(8)
            elif bias:
                v = x / np.float32(8)
            elif "wte" in name or "wpe" in name:
                v = x / np.float32(2)
            else:
                e, f = 0, p.shape[1]
                while f >= 4:
                    e, f = e + 1, f // 4
                v = x / np.float32(2 ** e)
            p.copy_(torch.from_numpy(v.astype(np.float32)).view_as(p))


def pick(logits, temperature, top_k, seed, pos):
    """mt_gpt_pick: greedy at temperature 0 or top_k 1; else softmax in
    double of logits / temperature cut to the top k, one draw keyed by
    (seed, pos). Returns the token and the draw's distance from the nearest
    boundary of the cumulative distribution, relative to the sum."""
    lg = [float(v) for v in logits.numpy().astype(np.float32)]
    best = int(np.argmax(np.array(lg)))  # the first of equal maxima
    if temperature == 0 or top_k == 1:
        return best, 1.0
    z = [v / temperature for v in lg]
    kth = sorted(z, reverse=True)[top_k - 1] if 0 < top_k < len(z) else -math.inf
    s = [math.exp(v - z[best]) if v >= kth else 0.0 for v in z]
    total = sum(s)
    key = tm.mt_key(seed, PURPOSE_GENERATE, 0)
    u = (tm.mt_rand64(key, pos) >> 11) * (1.0 / 9007199254740992.0)
    target = u * total
    cum, tok, dist = 0.0, best, math.inf
    for i, v in enumerate(s):
        if v == 0:
            continue
        prev = cum
        cum += v
        tok = i
        dist = min(abs(target - prev), abs(cum - target))
        if cum > target:
            break
    return tok, dist / total


def case(out, name, V, T, L, NH, C, gelu, fill_seed, prompt, N, sample, logit_steps):
    torch.manual_seed(0)  # construction's default init, overwritten
    model = tm.GPT(V, T, L, NH, C, gelu)
    fill_params(model, fill_seed)
    model.eval()
    with torch.no_grad():
        P = len(prompt)
        seq = list(prompt)
        logits, past = tm.cached_step(model, torch.tensor(seq), None, 0)
        last = logits[-1]
        greedy, kept = [], []
        for i in range(N):
            full = model(torch.tensor([seq]))[0, -1]  # the full forward of the sequence so far
            assert torch.allclose(full, last, atol=1e-5 * float(full.abs().max())), (name, i)
            top2 = torch.topk(full, 2).values
            assert float(top2[0] - top2[1]) > 1e-3, (name, i, "top two logits too close")
            tok = int(torch.argmax(last))
            assert tok == int(torch.argmax(full))
            greedy.append(tok)
            kept.append(last.clone())
            seq.append(tok)
            if i + 1 < N:
                logits, past = tm.cached_step(model, torch.tensor([tok]), past, P + i)
                last = logits[-1]
        temperature, top_k, seed = sample
        seq = list(prompt)
        logits, past = tm.cached_step(model, torch.tensor(seq), None, 0)
        sampled = []
        for i in range(N):
            tok, margin = pick(logits[-1], temperature, top_k, seed, P + i)
            assert margin > 1e-4, (name, i, "draw too near a boundary", margin)
            sampled.append(tok)
            if i + 1 < N:
                logits, past = tm.cached_step(model, torch.tensor([tok]), past, P + i)
    assert sampled != greedy, name
    out.append((name + ".hp", [V, T, L, NH, C, 1 if gelu == "tanh" else 0, fill_seed]))
    out.append((name + ".prompt", prompt))
    out.append((name + ".greedy", greedy))
    out.append((name + ".logit_steps", logit_steps))
    out.append((name + ".logits", np.stack([kept[s].numpy() for s in logit_steps])))
    out.append((name + ".sample", [temperature, top_k, seed]))
    out.append((name + ".sampled", sampled))


def write(items):
    with open(OUT, "w") as f:
        f.write("# generate.txt: generated by validation/gen_refs_generate.py (torch %s)\n"
                % torch.__version__)
        for name, v in items:
            arr = np.asarray(v)
            f.write("%s %d%s\n" % (name, arr.ndim, "".join(" %d" % d for d in arr.shape)))
            flat = arr.reshape(-1)
            fmt = "%.9g" if arr.dtype == np.float32 else "%.17g"
            for i in range(0, flat.size, 8):
                f.write(" ".join(fmt % x for x in flat[i:i + 8]) + "\n")


def main():
    items = []
    # bytes: the vocabulary of a byte-level model, a prompt of text
    case(items, "bytes", 256, 32, 2, 4, 16, "tanh", 21, list(b"Hello, "), 25, (0.8, 20, 1234),
         [0, 12, 24])
    # small: one-token prompt filling the window, three blocks, exact GELU
    case(items, "small", 50, 16, 3, 2, 8, "erf", 22, [7], 15, (1.5, 0, 99), [0, 7, 14])
    write(items)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
