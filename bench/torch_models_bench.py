#!/usr/bin/env python3
"""PyTorch peer for bench/bench_models.sh: train the cnn or gpt model and print its throughput.

The models are the PyTorch twins in validation/torch_models.py (same layers,
shapes and parameter layouts as mpitrain's src/models/cnn.c and gpt.c); the
training matches the mpitrain runs the bench compares against:

  cnn  Fashion-MNIST, conv 32, conv 64 (3x3, padding 1) each with ReLU and
       2x2 max-pool, hidden 128, softmax cross-entropy, SGD (momentum 0.9,
       lr 0.02), batch 128 per rank, the 60,000 images held in memory as one
       float tensor (N,1,28,28).
  gpt  the fortunes example (inputs/fortunes-gpt.opts): byte-level GPT, 4
       layers, 4 heads, embedding 128, block 64, tanh GELU, tied lm_head,
       AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on the
       2-d tensors only), cosine schedule with 100 warm-up steps, gradient
       clipping to norm 1.0, batch 32 windows of 65 bytes per rank.

Batches come from a DataLoader without workers whose sampler is a
BatchSampler (over a RandomSampler, or a DistributedSampler under DDP): one
gather per batch.  Only the --steps steps after --warmup steps are timed.  The
last line printed is machine-readable:

    RESULT torch model=cnn threads=2 ranks=1 setting=blas1 ... samples_per_s=6500.0 tokens_per_s=0

--ranks N > 1 runs DistributedDataParallel with the gloo backend in N
processes on 127.0.0.1.

--setting (applied before numpy or torch are imported; the script
re-executes itself when the dynamic loader's environment has to change):
  default  the environment as given (Debian's BLAS, OPENBLAS_* as set)
  blas1    as default plus OPENBLAS_NUM_THREADS=1 (torch's OpenMP threads
           split the work, each BLAS call runs on one thread)
  tuned    OpenBLAS's OpenMP build (LD_LIBRARY_PATH=--openblas-openmp-dir)
           with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset (as bench_mlp.sh)
  tuned1   tuned plus OPENBLAS_NUM_THREADS=1
In all, OMP_NUM_THREADS / MKL_NUM_THREADS = --threads before the imports,
torch.set_num_threads(--threads), torch.set_num_interop_threads(1).

--amp bf16 runs the forward pass and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) (CPU autocast, O1: fp32 weights,
gradients and optimizer; convolutions and matmuls in bf16, the ops on
autocast's fp32 list in fp32); the RESULT line then says amp=bf16.
--amp none is fp32 and says amp=none; without --amp the run and its output
are as before (fp32, no amp field).
"""

import argparse
import os
import sys

OPENBLAS_OPENMP_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
REEXEC_MARK = "MT_BENCH_TORCH_MODELS_SETTING"
SETTINGS = ("default", "blas1", "tuned", "tuned1")
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("cnn", "gpt"), required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ranks", type=int, default=1,
                   help="DDP processes (gloo, localhost); 1 = no DDP")
    p.add_argument("--steps", type=int, default=200, help="timed steps per rank")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--batch", type=int, default=0,
                   help="batch per rank (default: cnn 128, gpt 32)")
    p.add_argument("--data", default="",
                   help="HDF5 from mt-data (default: data/fashion-mnist-train.h5 "
                        "or data/fortunes-train.h5 in the source tree)")
    p.add_argument("--setting", choices=SETTINGS, default="default")
    p.add_argument("--openblas-openmp-dir", default=OPENBLAS_OPENMP_DIR)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--amp", choices=("none", "bf16"), default=None,
                   help="bf16: forward and loss under CPU autocast to bfloat16 "
                        "(default: none, fp32)")
    # cnn
    p.add_argument("--cnn-channels", default="32,64")
    p.add_argument("--cnn-kernel", type=int, default=3)
    p.add_argument("--cnn-hidden", type=int, default=128)
    p.add_argument("--cnn-lr", type=float, default=0.02)
    p.add_argument("--cnn-momentum", type=float, default=0.9)
    # gpt
    p.add_argument("--gpt-layers", type=int, default=4)
    p.add_argument("--gpt-heads", type=int, default=4)
    p.add_argument("--gpt-embd", type=int, default=128)
    p.add_argument("--gpt-block", type=int, default=64)
    p.add_argument("--gpt-lr", type=float, default=1e-3)
    p.add_argument("--gpt-weight-decay", type=float, default=0.1)
    p.add_argument("--gpt-warmup-steps", type=int, default=100)
    p.add_argument("--gpt-total-steps", type=int, default=2000,
                   help="length of the cosine schedule (fortunes: 2 epochs x 1000)")
    p.add_argument("--gpt-clip", type=float, default=1.0)
    a = p.parse_args()
    if min(a.threads, a.ranks, a.steps) < 1 or a.warmup < 0 or a.batch < 0:
        p.error("--threads, --ranks, --steps must be >= 1, --warmup, --batch >= 0")
    if a.batch == 0:
        a.batch = 128 if a.model == "cnn" else 32
    if not a.data:
        a.data = os.path.join(HERE, "..", "data", "fashion-mnist-train.h5" if a.model == "cnn"
                              else "fortunes-train.h5")
    return a


def apply_setting(a):
    tuned = a.setting in ("tuned", "tuned1")
    if tuned and os.environ.get(REEXEC_MARK) != a.setting:
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
        old = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = a.openblas_openmp_dir + (":" + old if old else "")
        env[REEXEC_MARK] = a.setting
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    if a.setting in ("blas1", "tuned1"):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    t = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = t
    os.environ["MKL_NUM_THREADS"] = t
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


ARGS = parse_args()
apply_setting(ARGS)

import contextlib  # noqa: E402
import ctypes  # noqa: E402
import math  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import (BatchSampler, DataLoader, Dataset,  # noqa: E402
                              DistributedSampler, RandomSampler, TensorDataset)

sys.path.insert(0, os.path.join(HERE, "..", "validation"))
import torch_models as tm  # noqa: E402  (the PyTorch twins of mpitrain's models)


# ---- data ------------------------------------------------------------------

class Windows(Dataset):
    """gpt samples: window i is tokens[iT .. iT + T] (T + 1 bytes), as mpitrain
    reads a token file; indexed with a whole list of indices (one gather)."""

    def __init__(self, tokens, T):
        self.tok = tokens
        self.T = T
        self.n = tm.n_windows(tokens.shape[0], T)
        self.ar = torch.arange(T + 1)

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        i = torch.as_tensor(idx, dtype=torch.int64)
        return self.tok[i[:, None] * self.T + self.ar]


def load_data(a):
    import h5py
    with h5py.File(a.data, "r") as f:
        if a.model == "cnn":
            dx = f["x"]
            x = dx[...].astype(np.float32)
            scale = float(dx.attrs["scale"]) if "scale" in dx.attrs else 1.0
            if scale != 1.0:
                x *= np.float32(scale)
            y = f["y"][...].astype(np.int64)
            return (torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y))
        tok = f["tokens"][...].astype(np.int64)
        vocab = int(f["tokens"].attrs.get("vocab_size", 256))
        return (torch.from_numpy(tok), vocab)


def make_dataset(a, data):
    if a.model == "cnn":
        return TensorDataset(*data)
    return Windows(data[0], a.gpt_block)


# ---- BLAS report (as torch_mlp.py) -------------------------------------------

def blas_tag():
    if torch.backends.mkl.is_available():  # PyPI's torch 2.x: its own MKL (torch_mlp.py)
        return "torch-mkl"
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if "blas" in os.path.basename(p) and p not in libs:
                    libs.append(p)
    except OSError:
        pass
    for p in libs:
        try:
            lib = ctypes.CDLL(p)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            par = {0: "serial", 1: "pthread", 2: "openmp"}.get(lib.openblas_get_parallel(), "?")
            return "openblas-%s-%s-nt%d" % (par, lib.openblas_get_corename().decode(),
                                            lib.openblas_get_num_threads())
        except (OSError, AttributeError):
            continue
    return os.path.basename(os.path.realpath(libs[0])) if libs else "unknown"


# ---- training ---------------------------------------------------------------

def make_model_and_opt(a, data):
    torch.manual_seed(a.seed)
    if a.model == "cnn":
        chans = [int(c) for c in a.cnn_channels.split(",") if c]
        model = tm.CNN((1, 28, 28), chans, a.cnn_kernel, a.cnn_hidden, 10)
        opt = torch.optim.SGD(model.parameters(), lr=a.cnn_lr, momentum=a.cnn_momentum)
        return model, opt, None
    model = tm.GPT(data[1], a.gpt_block, a.gpt_layers, a.gpt_heads, a.gpt_embd, "tanh")
    model.init_gpt2()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.gpt_weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.gpt_lr, betas=(0.9, 0.999), eps=1e-8)
    W, total = a.gpt_warmup_steps, a.gpt_total_steps

    def factor(s):  # linear warm-up, then cosine to 0
        if s < W:
            return (s + 1) / W
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - W) / max(1, total - W))))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    return model, opt, sched


def batches(loader, sampler):
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for b in loader:
            yield b
        epoch += 1


def worker(rank, a, data, port, result_queue):
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    model, opt, sched = make_model_and_opt(a, data)
    ds = make_dataset(a, data)
    dsampler = None
    if a.ranks > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=a.ranks)
        dsampler = DistributedSampler(ds, num_replicas=a.ranks, rank=rank, shuffle=True,
                                      seed=a.seed, drop_last=True)
        model = nn.parallel.DistributedDataParallel(model)
        base = dsampler
    else:
        g = torch.Generator()
        g.manual_seed(a.seed)
        base = RandomSampler(ds, generator=g)
    loader = DataLoader(ds, sampler=BatchSampler(base, a.batch, drop_last=True),
                        batch_size=None, num_workers=0)
    it = batches(loader, dsampler)
    params = [p for p in model.parameters()]
    autocast = amp_context(a.amp)

    if a.model == "cnn":
        def step():
            xb, yb = next(it)
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            return loss
    else:
        def step():
            w = next(it)
            opt.zero_grad(set_to_none=True)
            with autocast():
                logits = model(w[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, a.gpt_clip)
            opt.step()
            sched.step()
            return loss

    for _ in range(a.warmup):
        step()
    if a.ranks > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    if a.ranks > 1:
        dist.barrier()
    elapsed = time.perf_counter() - t0
    final_loss = float(loss.detach())
    if a.ranks > 1:
        t = torch.tensor([elapsed], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        elapsed = float(t[0])
    if rank == 0:
        result_queue.put((elapsed, final_loss, blas_tag()))
    if a.ranks > 1:
        # torch 1.13 + gloo sometimes hangs tearing the group down (see torch_mlp.py)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def amp_context(amp):
    """A factory of the context the forward pass and loss run in."""
    if amp == "bf16":
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = ARGS
    data = load_data(a)
    if a.ranks == 1:
        import queue
        q = queue.Queue()
        worker(0, a, data, 0, q)
    else:
        for d in data:
            if isinstance(d, torch.Tensor):
                d.share_memory_()
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        mp.spawn(worker, args=(a, data, a.port or free_port(), q), nprocs=a.ranks, join=True)
    elapsed, final_loss, blas = q.get()
    samples = a.steps * a.batch * a.ranks
    sps = samples / elapsed
    tps = sps * a.gpt_block if a.model == "gpt" else 0.0
    print(f"# torch {torch.__version__} model={a.model} data={a.data} batch/rank={a.batch} "
          f"mkldnn={torch.backends.mkldnn.is_available()}")
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE",
              "OPENBLAS_L2_SIZE", "LD_LIBRARY_PATH"):
        print(f"# {k}={os.environ.get(k, '(unset)')}")
    print(f"# {a.steps} timed steps ({a.warmup} warm-up) in {elapsed:.3f} s, "
          f"final loss {final_loss:.4f}")
    amp = "" if a.amp is None else f"amp={a.amp} "
    print(f"RESULT torch model={a.model} threads={a.threads} ranks={a.ranks} "
          f"setting={a.setting} {amp}blas={blas} version={torch.__version__} "
          f"samples_per_s={sps:.1f} tokens_per_s={tps:.1f}", flush=True)


if __name__ == "__main__":
    main()
