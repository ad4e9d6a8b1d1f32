#!/usr/bin/python3
"""Load an mpitrain model file into its torch.nn module and evaluate it.

An mpitrain model file (OUTPUT_DIR/model_final.h5, or an -init_from file)
holds every parameter and buffer (batch norm's running_mean/var) as a
float32 dataset at the root (float64 from a -precision fp64 run), under its
PyTorch name and in PyTorch's layout (num_batches_tracked is not kept). So
the whole loading is:

    import h5py, torch
    from torch_models import GPT                    # validation/torch_models.py
    net = GPT(vocab=256, block=16, layers=2, heads=2, embd=32)
    with h5py.File("runs/gpt/model_final.h5", "r") as f:
        sd = {name: torch.from_numpy(f[name][()]) for name in f}
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # gpt only: tied head
    net.load_state_dict(sd)

This script does that for any of mlp, cnn and gpt, keeping the file's type:
a float64 file gives the model made double (model.double()), and its inputs
are converted to float64 at the model's input, as mpitrain's fp64 run did.
The architecture comes from the file's own description (src/io/modelfile.h:
attributes model, option.NAME such as option.gpt_heads, data.shape) in a
file written since mpitrain records it; in an older file from the tensor
shapes, where a gpt's head count and GELU form are not: --opts FILE, the
options file of the run, or --heads/--gelu. Then it
evaluates the samples [first, first + count) of a data set as mpitrain's
validation does (mean loss per sample; for gpt, per token), and with
--check LOSS exits 1 unless its loss is within --tol (relative) of LOSS,
e.g. the val_loss mpitrain wrote in curve.csv for the same samples
(-val_batch_size count -max_val_steps_per_epoch 1, one rank).

    /usr/bin/python3 validation/load_mpitrain.py runs/gpt/model_final.h5 \\
        --data data/gpl-val.h5 --opts validation/curves/gpt.opts --count 64
"""

import argparse
import os
import re
import sys

import h5py
import numpy as np
import torch

sys.dont_write_bytecode = True  # nothing written beside the sources
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402


def read_opts(path):
    opts = {}
    with open(path) as f:
        for line in f:
            w = line.split("#", 1)[0].split()
            if w:
                opts[w[0].lstrip("-")] = w[1] if len(w) > 1 else True
    return opts


def described(f):
    """(model, {option: value}, data shape) of a file that describes its
    model, else None."""
    if "model" not in f.attrs:
        return None
    def text(v):
        return v.decode() if isinstance(v, bytes) else str(v)
    opts = {k[len("option."):]: text(v) for k, v in f.attrs.items()
            if k.startswith("option.") and not k.endswith(".shapes")}
    return text(f.attrs["model"]), opts, [int(d) for d in np.atleast_1d(f.attrs["data.shape"])]


def build_described(f, desc):
    """The module the file's description names, made from its options."""
    model, o, shape = desc
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    classes = int(f.attrs["data.nclasses"])
    if model == "gpt":
        return "gpt", tm.GPT(classes, int(o["gpt_block"]), int(o["gpt_layers"]), int(o["gpt_heads"]),
                             int(o["gpt_embd"]), o["gpt_gelu"])
    if model == "cnn":
        bn = o["cnn_batchnorm"].lower() in ("", "1", "true", "yes", "on")  # "": given bare
        return "cnn", tm.CNN(tuple(shape), ints(o["cnn_channels"]), int(o["cnn_kernel"]),
                             int(o["cnn_hidden"]), classes, batchnorm=bn)
    if model == "mlp":
        return "mlp", tm.MLP(int(np.prod(shape)), ints(o["mlp_hidden"]), classes)
    raise SystemExit(f"load_mpitrain: {f.filename} holds a {model} model, not mlp, cnn or gpt")


def build_from_file(f, heads, gelu):
    """The module of h5py file f: from its description, else from the
    shapes of its tensors."""
    desc = described(f)
    if desc:
        return build_described(f, desc)
    names = set(f.keys())
    if "transformer.wte.weight" in names:
        V, C = f["transformer.wte.weight"].shape
        T = f["transformer.wpe.weight"].shape[0]
        L = len({m.group(1) for n in names for m in [re.match(r"transformer\.h\.(\d+)\.", n)] if m})
        return "gpt", tm.GPT(V, T, L, heads, C, gelu)
    if "features.0.weight" in names:
        idx = sorted(int(m.group(1)) for n in names for m in [re.match(r"features\.(\d+)\.weight$", n)] if m)
        convs = [i for i in idx if len(f[f"features.{i}.weight"].shape) == 4]
        batchnorm = "features.1.running_mean" in names
        ch = [f[f"features.{i}.weight"].shape[0] for i in convs]
        ic, k = f["features.0.weight"].shape[1], f["features.0.weight"].shape[2]
        hidden, flat = f["classifier.1.weight"].shape
        classes = f["classifier.3.weight"].shape[0]
        side = int(round((flat // ch[-1]) ** 0.5)) << len(ch)  # square inputs
        return "cnn", tm.CNN((ic, side, side), ch, k, hidden, classes, batchnorm=batchnorm)
    if "layers.0.weight" in names:
        idx = sorted(int(m.group(1)) for n in names for m in [re.match(r"layers\.(\d+)\.weight$", n)] if m)
        dims = [f[f"layers.{i}.weight"].shape for i in idx]
        return "mlp", tm.MLP(dims[0][1], [d[0] for d in dims[:-1]], dims[-1][0])
    raise SystemExit(f"load_mpitrain: {f.filename} holds no mlp, cnn or gpt tensors")


def load(path, heads=4, gelu="tanh"):
    """(kind, module) with the tensors of an mpitrain model file, in the
    file's type: float32, or float64 (a -precision fp64 run) for a model
    made double."""
    with h5py.File(path, "r") as f:
        kind, net = build_from_file(f, heads, gelu)
        f64 = any(f[name].dtype == np.float64 for name in f)
        dt = np.float64 if f64 else np.float32
        if f64:
            net = net.double()
        sd = dict(net.state_dict())  # num_batches_tracked stays as made
        sd.update({name: torch.from_numpy(np.asarray(f[name], dtype=dt)) for name in f})
    if kind == "gpt":
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
    net.load_state_dict(sd, strict=True)
    return kind, net.eval()


def samples(path, kind, first, count, block):
    """Samples [first, first + count) of a data set, as mpitrain reads them."""
    with h5py.File(path, "r") as f:
        if kind == "gpt":
            tok = np.asarray(f["tokens"]).astype(np.int64)
            n = tm.n_windows(len(tok), block)
            idx = range(first, min(first + count, n))
            return tm.token_windows(tok, idx, block)
        x = f["x"]
        scale = np.float32(x.attrs.get("scale", 1.0 / 255)) if x.dtype == np.uint8 else np.float32(1)
        xs = np.asarray(x[first:first + count]).astype(np.float32) * scale
        return torch.from_numpy(xs), torch.from_numpy(np.asarray(f["y"][first:first + count]).astype(np.int64))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="mpitrain model file (model_final.h5)")
    ap.add_argument("--data", required=True, help="data set (HDF5: /x,/y or /tokens)")
    ap.add_argument("--opts", help="the run's options file (for gpt_heads, gpt_gelu)")
    ap.add_argument("--heads", type=int, help="gpt heads (default: --opts, else 4)")
    ap.add_argument("--gelu", choices=["tanh", "erf"], help="gpt GELU (default: --opts, else tanh)")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--check", type=float, help="expected mean loss of these samples")
    ap.add_argument("--tol", type=float, default=1e-5, help="relative tolerance of --check")
    args = ap.parse_args()
    torch.set_num_threads(1)
    opts = read_opts(args.opts) if args.opts else {}
    heads = args.heads or int(opts.get("gpt_heads", 4))
    gelu = args.gelu or opts.get("gpt_gelu", "tanh")
    kind, net = load(args.model, heads, gelu)
    block = net.block if kind == "gpt" else 0
    batch = samples(args.data, kind, args.first, args.count, block)
    if kind != "gpt":  # inputs in the model's type (float64 for an fp64 file)
        batch = (batch[0].to(next(net.parameters()).dtype), batch[1])
    with torch.no_grad():
        loss = tm.batch_loss(net, kind, batch).item()
        if kind == "gpt":
            pred = net(batch[:, :-1]).argmax(-1)
            acc = (pred == batch[:, 1:]).double().mean().item()
            shown = [bytes(pred[i].tolist()).decode("ascii", "replace") for i in range(min(3, len(pred)))]
        else:
            pred = net(batch[0]).argmax(-1)
            acc = (pred == batch[1]).double().mean().item()
            shown = pred[:16].tolist()
    n = len(batch) if kind == "gpt" else len(batch[0])
    print(f"{kind}: {sum(p.numel() for p in net.parameters())} {next(net.parameters()).dtype} "
          f"parameters from {args.model}")
    print(f"samples {args.first}..{args.first + n - 1} of {args.data}: loss {loss:.9g} accuracy {acc:.4f}")
    print(f"predictions: {shown!r}")
    if args.check is not None:
        rel = abs(loss - args.check) / max(abs(args.check), 1e-30)
        ok = rel <= args.tol
        print(f"check: torch {loss:.9g} vs expected {args.check:.9g}, relative difference {rel:.3g} "
              f"-> {'ok' if ok else 'BEYOND ' + str(args.tol)}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
