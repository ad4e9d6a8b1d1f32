#!/usr/bin/env python3
"""PyTorch peer for bench/bench_mlp.sh: train the benchmark MLP and print samples/s.

Model and training match the mpitrain run the bench compares against:
784-1024-1024-10, ReLU, softmax cross-entropy, SGD (momentum 0.9, lr 0.05),
batch 128 per rank, fp32, Fashion-MNIST held in memory as a float tensor and
served in shuffled batches by a DataLoader without workers (a BatchSampler, so
a batch is one gather, not 128 per-sample calls).

Only the training steps after --warmup steps are timed.  The last line printed
is machine-readable, e.g.

    RESULT torch threads=2 ranks=1 setting=tuned samples_per_s=27000.0 ...

--ranks N > 1 runs DistributedDataParallel with the gloo backend in N
processes on 127.0.0.1 (env:// rendezvous, torch.multiprocessing spawn).

--setting picks how the process is configured; it is applied before numpy or
torch are imported (the script re-executes itself when the dynamic loader's
environment has to change):
  default  the environment as given: the system's BLAS, OPENBLAS_* as set
  tuned    OpenBLAS's OpenMP build (LD_LIBRARY_PATH=--openblas-openmp-dir) with
           OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, so OpenBLAS detects
           the CPU itself and shares torch's OpenMP thread pool
In both, OMP_NUM_THREADS / MKL_NUM_THREADS are set to --threads before the
imports and torch.set_num_threads(--threads) is called.

--amp bf16 runs the forward pass and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) (CPU autocast, O1: fp32 weights,
gradients and optimizer, the linear layers' matmuls in bf16); the RESULT line
then says amp=bf16.  --amp none is fp32 and says amp=none; without --amp the
run and its output are as before (fp32, no amp field).
"""

import argparse
import os
import sys

OPENBLAS_OPENMP_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
IDX_DIR = "/usr/share/datasets/fashion-mnist"
REEXEC_MARK = "MT_BENCH_TORCH_SETTING_APPLIED"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads per process (default 1)")
    p.add_argument("--ranks", type=int, default=1,
                   help="DDP processes (gloo, localhost); 1 = no DDP (default 1)")
    p.add_argument("--steps", type=int, default=300,
                   help="timed training steps per rank (default 300)")
    p.add_argument("--warmup", type=int, default=30,
                   help="untimed steps before timing (default 30)")
    p.add_argument("--batch", type=int, default=128,
                   help="batch size per rank (default 128)")
    p.add_argument("--hidden", default="1024,1024",
                   help="hidden layer widths (default 1024,1024)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="",
                   help="HDF5 file made by mt-data (/x uint8 with attribute "
                        "'scale', /y int32) or a folder with the Fashion-MNIST "
                        "IDX .gz files; default: " + IDX_DIR)
    p.add_argument("--setting", choices=("default", "tuned"), default="default",
                   help="process configuration, see above (default: default)")
    p.add_argument("--openblas-openmp-dir", default=OPENBLAS_OPENMP_DIR,
                   help="folder holding OpenBLAS's OpenMP libblas.so.3 for "
                        "--setting tuned (default %(default)s)")
    p.add_argument("--port", type=int, default=0,
                   help="rendezvous port for --ranks > 1 (default: a free one)")
    p.add_argument("--amp", choices=("none", "bf16"), default=None,
                   help="bf16: forward and loss under CPU autocast to bfloat16 "
                        "(default: none, fp32)")
    a = p.parse_args()
    if a.threads < 1 or a.ranks < 1 or a.steps < 1 or a.warmup < 0 or a.batch < 1:
        p.error("--threads, --ranks, --steps, --batch must be >= 1, --warmup >= 0")
    return a


def apply_setting(a):
    """Set the environment that must exist before numpy/torch are loaded.

    Changing LD_LIBRARY_PATH only takes effect for a new process image, so for
    --setting tuned the script re-executes itself once with the new environment.
    """
    if a.setting == "tuned" and os.environ.get(REEXEC_MARK) != "tuned":
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
        old = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = a.openblas_openmp_dir + (":" + old if old else "")
        env[REEXEC_MARK] = "tuned"
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    t = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = t
    os.environ["MKL_NUM_THREADS"] = t
    # Gloo on loopback only.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


ARGS = parse_args()
apply_setting(ARGS)

# Only now: the OpenMP runtime and OpenBLAS read their variables when loaded.
import contextlib  # noqa: E402
import ctypes  # noqa: E402
import gzip  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import (BatchSampler, DataLoader, DistributedSampler,  # noqa: E402
                              RandomSampler, TensorDataset)


def load_idx(folder):
    def read(name, magic, hdr):
        with gzip.open(os.path.join(folder, name), "rb") as f:
            buf = f.read()
        got = int.from_bytes(buf[0:4], "big")
        if got != magic:
            raise SystemExit(f"{name}: bad IDX magic {got:#x}")
        return np.frombuffer(buf, dtype=np.uint8, offset=hdr)

    x = read("train-images-idx3-ubyte.gz", 2051, 16).reshape(-1, 784)
    y = read("train-labels-idx1-ubyte.gz", 2049, 8).astype(np.int64)
    return x.astype(np.float32) * np.float32(1.0 / 255.0), y


def load_h5(path):
    import h5py
    with h5py.File(path, "r") as f:
        dx = f["x"]
        x = dx[...]
        scale = float(dx.attrs["scale"]) if "scale" in dx.attrs else 1.0
        y = f["y"][...].astype(np.int64)
    x = x.reshape(x.shape[0], -1).astype(np.float32)
    if scale != 1.0:
        x *= np.float32(scale)
    return x, y


def load_data(spec):
    spec = spec or IDX_DIR
    if os.path.isdir(spec):
        x, y = load_idx(spec)
        src = "idx:" + spec
    else:
        import importlib.util
        if importlib.util.find_spec("h5py") is None:
            print(f"# no h5py in {sys.executable}: reading the IDX files in "
                  f"{IDX_DIR} instead of {spec}", flush=True)
            return load_data(IDX_DIR)
        x, y = load_h5(spec)
        src = "h5:" + spec
    if x.shape[1] != 784 or x.shape[0] != y.shape[0]:
        raise SystemExit(f"{spec}: expected (N,784) images and N labels, got "
                         f"{x.shape} and {y.shape}")
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y), src


def blas_info():
    """Which BLAS this process actually loaded, from /proc/self/maps."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                base = os.path.basename(p)
                if "blas" in base or "lapack" in base or base.startswith("libgomp"):
                    libs.add(p)
    except OSError:
        pass
    info = {"libs": sorted(libs)}
    for p in sorted(libs):
        if "blas" not in os.path.basename(p):
            continue
        try:
            lib = ctypes.CDLL(p)
            lib.openblas_get_config.restype = ctypes.c_char_p
            lib.openblas_get_corename.restype = ctypes.c_char_p
        except (OSError, AttributeError):
            continue
        info["openblas_lib"] = os.path.realpath(p)
        info["openblas_config"] = lib.openblas_get_config().decode().strip()
        info["openblas_core"] = lib.openblas_get_corename().decode()
        info["openblas_threads"] = lib.openblas_get_num_threads()
        info["openblas_parallel"] = {0: "serial", 1: "pthread", 2: "openmp"}.get(
            lib.openblas_get_parallel(), "?")
        break
    try:
        import threadpoolctl
        info["threadpoolctl"] = threadpoolctl.threadpool_info()
    except ImportError:
        pass
    return info


def blas_tag(info):
    # PyPI's torch 2.x does its fp32 CPU matmuls with the MKL linked into it
    # (the libraries in /proc/self/maps are numpy's or CUDA's, unused here)
    if torch.backends.mkl.is_available():
        return "torch-mkl"
    if "openblas_lib" in info:
        return "openblas-%s-%s" % (info["openblas_parallel"], info["openblas_core"])
    blas = [p for p in info["libs"] if "blas" in os.path.basename(p)]
    return os.path.basename(os.path.realpath(blas[0])) if blas else "unknown"


def make_model(hidden):
    widths = [784] + hidden + [10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def batches(loader, sampler):
    """Endless stream of batches, reshuffled each epoch."""
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for b in loader:
            yield b
        epoch += 1


def worker(rank, a, x, y, port, result_queue):
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(a.seed)
    hidden = [int(h) for h in a.hidden.split(",") if h]
    model = make_model(hidden)
    ds = TensorDataset(x, y)
    dsampler = None
    if a.ranks > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", init_method="env://",
                                rank=rank, world_size=a.ranks)
        dsampler = DistributedSampler(ds, num_replicas=a.ranks, rank=rank,
                                      shuffle=True, seed=a.seed, drop_last=True)
        model = nn.parallel.DistributedDataParallel(model)
        base = dsampler
    else:
        g = torch.Generator()
        g.manual_seed(a.seed)
        base = RandomSampler(ds, generator=g)
    # batch_size=None + a BatchSampler as sampler: TensorDataset is indexed
    # with a whole list of indices, one gather per batch (no collate of 128
    # single samples), as an efficient PyTorch input pipeline would do.
    loader = DataLoader(ds, sampler=BatchSampler(base, a.batch, drop_last=True),
                        batch_size=None, num_workers=0)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    it = batches(loader, dsampler)
    autocast = amp_context(a.amp)

    def step():
        xb, yb = next(it)
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
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
        result_queue.put((elapsed, final_loss, blas_info()))
    if a.ranks > 1:
        # Torch 1.13 with gloo sometimes spins forever while the DDP model and
        # process group are destroyed as this function returns (seen here in
        # about 1 run in 10).  Everything is measured and sent: leave at once.
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
    x, y, src = load_data(a.data)
    nper = x.shape[0] // a.ranks
    if nper < a.batch:
        raise SystemExit(f"{src}: {x.shape[0]} samples are too few for "
                         f"{a.ranks} ranks x batch {a.batch}")
    if a.ranks == 1:
        import queue
        q = queue.Queue()
        worker(0, a, x, y, 0, q)
    else:
        # The children are spawned (fresh interpreters): the data is passed
        # through shared memory, the environment set above is inherited.
        x.share_memory_()
        y.share_memory_()
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        port = a.port or free_port()
        mp.spawn(worker, args=(a, x, y, port, q), nprocs=a.ranks, join=True)
    elapsed, final_loss, info = q.get()
    samples = a.steps * a.batch * a.ranks
    sps = samples / elapsed
    print(f"# torch {torch.__version__} data={src} N={x.shape[0]} "
          f"hidden={a.hidden} batch/rank={a.batch}")
    print(f"# blas libs: {' '.join(info['libs'])}")
    if "openblas_lib" in info:
        print(f"# openblas: {info['openblas_lib']} parallel={info['openblas_parallel']} "
              f"core={info['openblas_core']} threads={info['openblas_threads']} "
              f"config='{info['openblas_config']}'")
    for k in ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
              "OPENBLAS_NUM_THREADS", "LD_LIBRARY_PATH"):
        print(f"# {k}={os.environ.get(k, '(unset)')}")
    pinfo = [ln.strip() for ln in torch.__config__.parallel_info().splitlines()
             if "omp_get_max_threads" in ln or "parallel backend" in ln]
    print(f"# torch threads={torch.get_num_threads()} {'; '.join(pinfo)}")
    print(f"# {a.steps} timed steps ({a.warmup} warm-up) in {elapsed:.3f} s, "
          f"final loss {final_loss:.4f}")
    amp = "" if a.amp is None else f"amp={a.amp} "
    print(f"RESULT torch threads={a.threads} ranks={a.ranks} setting={a.setting} "
          f"{amp}blas={blas_tag(info)} version={torch.__version__} "
          f"samples_per_s={sps:.1f}", flush=True)


if __name__ == "__main__":
    main()
