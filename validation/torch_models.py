"""PyTorch twins of mpitrain's models, and a replica of its data order.

The modules have mpitrain's parameter names and layouts, so a state_dict
and an mpitrain HDF5 model file (model_final.h5, an -init_from file) hold
the same tensors under the same names:

  MLP  (src/models/mlp.c)  layers = Sequential(Linear, ReLU, ..., Linear)
  CNN  (src/models/cnn.c)  features = Sequential(Conv2d(k, padding k//2),
                           ReLU, MaxPool2d(2)) per block, classifier =
                           Sequential(Flatten, Linear, ReLU, Linear)
  GPT  (src/models/gpt.c)  nanoGPT / GPT-2: transformer.{wte, wpe, h.{l}.
                           {ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
                           mlp.c_proj}, ln_f}; lm_head tied to wte

The data order (src/core/util.c, src/data/sampler.c, src/data/loader.c):
every epoch is a permutation of the N samples drawn by Fisher-Yates from a
counter-based generator keyed by (seed, epoch); global step s takes
positions [sB, (s+1)B), and the loader sorts each micro-batch's indices.
train_batches() gives the same index lists (one rank, no accumulation).

Needs torch and numpy (Debian: /usr/bin/python3 with python3-torch).
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------
# the sampler (bit-exact replica of mt_rand64 / mt_key / the permutation)

M64 = (1 << 64) - 1
PURPOSE_SAMPLER = 1  # MT_PURPOSE_SAMPLER in src/data/sampler.c


def mix64(z):
    """splitmix64's finaliser on a 64-bit unsigned integer."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mt_rand64(key, counter):
    z = (counter * 0x9E3779B97F4A7C15 + mix64(key ^ 0x632BE59BD9B4E019)) & M64
    return mix64(mix64(z) ^ key)


def mt_key(seed, purpose, a):
    return mix64(mix64(mix64(seed) ^ ((purpose * 0xD6E8FEB86659FD93) & M64)) ^ (a & M64))


def _mix64_np(z):
    # numpy uint64 arithmetic wraps modulo 2^64, as C's does
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def permutation(seed, epoch, n):
    """mt_sampler_permutation(seed, epoch, n): a list of n sample indices."""
    key = mt_key(seed, PURPOSE_SAMPLER, epoch)
    with np.errstate(over="ignore"):
        i = np.arange(n, dtype=np.uint64)
        z = i * np.uint64(0x9E3779B97F4A7C15) + np.uint64(mix64(key ^ 0x632BE59BD9B4E019))
        r = _mix64_np(_mix64_np(z) ^ np.uint64(key)).tolist()
    perm = list(range(n))
    for k in range(n - 1, 0, -1):
        j = (r[k] * (k + 1)) >> 64  # the high half of the 128-bit product
        perm[k], perm[j] = perm[j], perm[k]
    return perm


def train_batches(seed, n, batch, steps, epoch=0):
    """Sorted sample indices of each of the first `steps` global steps of
    `epoch` (one rank, micro-batch = batch), as mpitrain reads them."""
    perm = permutation(seed, epoch, n)
    assert steps * batch <= n, "fewer samples than steps x batch"
    return [sorted(perm[s * batch:(s + 1) * batch]) for s in range(steps)]


def token_windows(tokens, idx, T):
    """(len(idx), T + 1) int64 windows: window i is tokens[iT .. iT + T]."""
    tok = np.asarray(tokens)
    return torch.from_numpy(np.stack([tok[i * T:i * T + T + 1] for i in idx]).astype(np.int64))


def n_windows(m, T):
    """Samples of a token file of m tokens with context T."""
    return (m - 1) // T if m > 1 else 0


# --------------------------------------------------------------------------
# the models


class MLP(nn.Module):
    def __init__(self, inputs, hidden, classes):
        super().__init__()
        dims = [inputs] + list(hidden) + [classes]
        mods = []
        for i in range(len(dims) - 1):
            mods.append(nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                mods.append(nn.ReLU())
        self.layers = nn.Sequential(*mods)

    def forward(self, x):
        return self.layers(x.flatten(1))


class CNN(nn.Module):
    """features = (Conv2d, [BatchNorm2d,] ReLU, MaxPool2d) per block;
    classifier = (Flatten, Linear, ReLU, Linear) with dropout (functional,
    so no index moves) after the ReLU, as mpitrain's -cnn_dropout."""

    def __init__(self, in_shape, channels, kernel, hidden, classes, batchnorm=False, dropout=0.0):
        super().__init__()
        c, h, w = in_shape if len(in_shape) == 3 else (1,) + tuple(in_shape)
        mods = []
        for oc in channels:
            mods += [nn.Conv2d(c, oc, kernel, padding=kernel // 2)]
            if batchnorm:
                mods += [nn.BatchNorm2d(oc)]
            mods += [nn.ReLU(), nn.MaxPool2d(2)]
            c, h, w = oc, h // 2, w // 2
        self.features = nn.Sequential(*mods)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, hidden), nn.ReLU(),
                                        nn.Linear(hidden, classes))
        self.dropout = dropout
        self.in_shape = (1, h, w) if len(in_shape) == 2 else tuple(in_shape)

    def forward(self, x):
        if x.dim() == 3:  # (B,H,W) samples read as one channel
            x = x.unsqueeze(1)
        c = self.classifier
        x = c[2](c[1](c[0](self.features(x))))
        x = F.dropout(x, self.dropout, self.training)
        return c[3](x)


class CausalSelfAttention(nn.Module):
    # True: F.scaled_dot_product_attention, PyTorch's fused (flash) kernel
    # (torch >= 2.1; bench/torch_gpt_cuda.py --attn sdpa); False: the
    # arithmetic of mpitrain's attention, for the references
    sdpa = False

    def __init__(self, C, heads):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.nh = heads

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.nh
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.nh, hs).transpose(1, 2)
        k = k.view(B, T, self.nh, hs).transpose(1, 2)
        v = v.view(B, T, self.nh, hs).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(hs))
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class GPTMLP(nn.Module):
    def __init__(self, C, gelu):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh" if gelu == "tanh" else "none")
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, C, heads, gelu):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = CausalSelfAttention(C, heads)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = GPTMLP(C, gelu)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, embd, gelu="tanh"):
        super().__init__()
        assert embd % heads == 0
        self.block = block
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, embd),
            wpe=nn.Embedding(block, embd),
            h=nn.ModuleList([Block(embd, heads, gelu) for _ in range(layers)]),
            ln_f=nn.LayerNorm(embd, eps=1e-5)))
        self.lm_head = nn.Linear(embd, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in mpitrain
        self.layers = layers

    def init_gpt2(self, generator=None):
        """GPT-2's initialisation (as mpitrain's gpt_init, other numbers):
        N(0, 0.02) weights, N(0, 0.02/sqrt(2L)) for c_proj, zero biases,
        LayerNorm (1, 0)."""
        for name, p in self.named_parameters():
            with torch.no_grad():
                if ".ln_" in name or name.startswith("transformer.ln_f"):
                    p.fill_(1.0 if name.endswith("weight") else 0.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    std = 0.02 / math.sqrt(2 * self.layers) if name.endswith("c_proj.weight") else 0.02
                    p.normal_(0.0, std, generator=generator)
        return self

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for blk in self.transformer.h:
            x = blk(x)
        return self.lm_head(self.transformer.ln_f(x))


# --------------------------------------------------------------------------
# losses as mpitrain reports them


def cached_step(model, idx, past, pos0, last=False):
    """A GPT's forward of tokens idx (n) at positions [pos0, pos0 + n) given
    the blocks' cached keys and values of [0, pos0) (lists of (NH, pos0, hs)
    tensors, None at first): the logits (n, V), or with last only the last
    row's (1, V), and the cache extended by their keys and values. The
    arithmetic of GPT.forward, the query rows against the cached keys (what
    mpitrain's key/value cache computes: validation/gen_refs_generate.py,
    bench/torch_generate.py)."""
    tr = model.transformer
    n = idx.shape[0]
    x = tr.wte(idx) + tr.wpe(torch.arange(pos0, pos0 + n))
    new = []
    for l, blk in enumerate(tr.h):
        C = x.shape[-1]
        nh = blk.attn.nh
        hs = C // nh
        q, k, v = blk.attn.c_attn(blk.ln_1(x)).split(C, dim=1)
        q, k, v = (t.view(n, nh, hs).transpose(0, 1) for t in (q, k, v))
        if past is not None:
            k = torch.cat([past[l][0], k], dim=1)
            v = torch.cat([past[l][1], v], dim=1)
        new.append((k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        # query row t (position pos0 + t) sees keys [0, pos0 + t]
        mask = torch.ones(n, pos0 + n, dtype=torch.bool).tril(diagonal=pos0)
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(0, 1).contiguous().view(n, C)
        x = x + blk.attn.c_proj(y)
        x = x + blk.mlp(blk.ln_2(x))
    return model.lm_head(tr.ln_f(x[-1:] if last else x)), new


def batch_loss(model, kind, batch):
    """Mean loss of a batch: (x, y) for mlp/cnn, (B, T+1) windows for gpt
    (mean over all B*T tokens, which is the mean of the per-window means)."""
    if kind == "gpt":
        logits = model(batch[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    x, y = batch
    return F.cross_entropy(model(x), y)


def mpitrain_names(model):
    """Parameters as mpitrain stores them: named_parameters() lists a tied
    tensor once, so gpt's lm_head.weight is left out (it is wte)."""
    return [(n, p) for n, p in model.named_parameters()]


def mpitrain_buffers(model):
    """Buffers as mpitrain stores them (batch norm's running statistics);
    num_batches_tracked is not kept (it only matters for momentum=None)."""
    return [(n, b) for n, b in model.named_buffers() if not n.endswith("num_batches_tracked")]


def load_state_from_h5(model, path):
    """Fill `model` from an mpitrain HDF5 model or -init_from file (every
    parameter and buffer a float32 dataset at the root under its PyTorch
    name)."""
    import h5py
    sd = dict(model.state_dict())
    with h5py.File(path, "r") as f:
        for name, _ in mpitrain_names(model) + mpitrain_buffers(model):
            if name not in f:
                raise KeyError(f"{path} has no tensor {name}")
            sd[name] = torch.from_numpy(np.asarray(f[name], dtype=np.float32))
    if isinstance(model, GPT):
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
    model.load_state_dict(sd, strict=True)
    return model


def save_state_to_h5(model, path):
    import h5py
    with h5py.File(path, "w") as f:
        for name, p in mpitrain_names(model) + mpitrain_buffers(model):
            f.create_dataset(name, data=p.detach().cpu().numpy().astype(np.float32))
