#!/usr/bin/python3
"""Loss curves of mpitrain against PyTorch from the same weights and data.

For each curve (cnn, cnnbn: cnn with batch norm, gpt) the configuration is validation/curves/MODEL.opts
(mpitrain's options file). This script

  1. builds the PyTorch twin (validation/torch_models.py) and either loads
     validation/curves/MODEL_init.h5 or, with --write (or when the file is
     missing), seeds torch, initialises the model and writes that file;
  2. trains it for the options' steps on exactly mpitrain's batches (the
     sampler replica) with the same optimizer, in float32 on one thread;
  3. with --write, stores the curve as validation/curves/MODEL_torch.csv
     (step,loss); otherwise compares it with the stored one;
  4. with --mpitrain BIN, runs mpitrain on the same options, -init_from the
     init file, and prints the relative difference of the losses per step.

Data: DIR/fashion-mnist-train.h5 (cnn) and DIR/gpl-train.h5 (gpt), made
with --mt-data BIN when missing (`mt-data fashion-mnist`, and `mt-data text
/usr/share/common-licenses/GPL-3 -name gpl`).

    /usr/bin/python3 validation/compare_torch.py --data /tmp/vdata \\
        --mt-data build/mt-data --mpitrain build/mpitrain [--write]

--curves DIR reads (and with --write writes) MODEL.opts, MODEL_init.h5 and
MODEL_torch.csv in DIR instead: a curve of other sizes than the committed
ones, e.g. the benchmark's gpt (bench/README.md, "The weight gradients of
many rows").

Exit status 0 when every compared curve is within --tol (1e-4) relative at
every step, 1 otherwise.
"""

import argparse
import csv
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # nothing written beside the sources
sys.path.insert(0, HERE)
import torch_models as tm  # noqa: E402

CURVES = os.path.join(HERE, "curves")
FMNIST_SRC = "/usr/share/datasets/fashion-mnist"
GPL = "/usr/share/common-licenses/GPL-3"
TORCH_SEED = {"cnn": 1234, "gpt": 5678, "mlp": 4321, "cnnbn": 2468}  # torch.manual_seed of the init


def read_opts(path):
    """mpitrain options file -> {name: value or True} (names without '-')."""
    opts = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            opts[line[0].lstrip("-")] = line[1] if len(line) > 1 else True
    return opts


def flag(opts, name):
    """A boolean option: given bare (True) or with a value 1/0, true/false."""
    v = opts.get(name, False)
    return v is True or str(v).lower() in ("1", "true", "yes", "on")


def data_file(model, data_dir, mt_data):
    name = "gpl-train.h5" if model == "gpt" else "fashion-mnist-train.h5"
    path = os.path.join(data_dir, name)
    if not os.path.exists(path):
        if not mt_data:
            sys.exit(f"compare_torch: {path} is missing (pass --mt-data to make it)")
        os.makedirs(data_dir, exist_ok=True)
        cmd = ([mt_data, "fashion-mnist", "-out", data_dir] if model != "gpt" else
               [mt_data, "text", GPL, "-out", data_dir, "-name", "gpl"])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return path


class Data:
    """The training set as mpitrain reads it."""

    def __init__(self, path, opts):
        with h5py.File(path, "r") as f:
            if "tokens" in f:
                self.tokens = np.asarray(f["tokens"]).astype(np.int64)
                self.vocab = int(f["tokens"].attrs.get("vocab_size", 256))
                self.T = int(opts["gpt_block"])
                self.n = tm.n_windows(len(self.tokens), self.T)
            else:
                self.tokens = None
                x = f["x"]
                self.scale = np.float32(x.attrs.get("scale", 1.0 / 255) if x.dtype == np.uint8 else 1.0)
                self.x = np.asarray(x)
                self.y = np.asarray(f["y"]).astype(np.int64)
                self.n = len(self.y)
                self.classes = int(f["y"].attrs.get("nclasses", self.y.max() + 1))

    def batch(self, idx):
        if self.tokens is not None:
            return tm.token_windows(self.tokens, idx, self.T)
        x = self.x[idx]
        x = x.astype(np.float32) * self.scale if x.dtype == np.uint8 else x.astype(np.float32)
        return torch.from_numpy(x), torch.from_numpy(self.y[idx])

    def sample_shape(self):
        return self.x.shape[1:]


def build(model, opts, data):
    if model == "cnn":
        ch = [int(c) for c in str(opts.get("cnn_channels", "32,64")).split(",")]
        return tm.CNN(data.sample_shape(), ch, int(opts.get("cnn_kernel", 3)),
                      int(opts.get("cnn_hidden", 128)), data.classes,
                      batchnorm=flag(opts, "cnn_batchnorm"))
    if model == "gpt":
        return tm.GPT(data.vocab, int(opts["gpt_block"]), int(opts["gpt_layers"]),
                      int(opts["gpt_heads"]), int(opts["gpt_embd"]), opts.get("gpt_gelu", "tanh"))
    if model == "mlp":
        hid = [int(h) for h in str(opts.get("mlp_hidden", "1024,1024")).split(",")]
        return tm.MLP(int(np.prod(data.sample_shape())), hid, data.classes)
    raise ValueError(model)


def optimizer(params, opts):
    lr = float(opts.get("lr", 0.01))
    wd = float(opts.get("weight_decay", 0.0))
    if opts.get("lr_schedule", "constant") != "constant" or int(opts.get("warmup_steps", 0)):
        sys.exit("compare_torch: only -lr_schedule constant without warm-up is replicated")
    if opts.get("optimizer", "sgd") == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd,
                                 betas=(float(opts.get("adam_beta1", 0.9)), float(opts.get("adam_beta2", 0.999))),
                                 eps=float(opts.get("adam_eps", 1e-8)), amsgrad=bool(opts.get("adam_amsgrad", False)))
    return torch.optim.SGD(params, lr=lr, momentum=float(opts.get("momentum", 0.0)),
                           dampening=float(opts.get("dampening", 0.0)), weight_decay=wd,
                           nesterov=bool(opts.get("nesterov", False)))


def torch_curve(model_name, opts, data, init_path, write_init, seed_name=None):
    torch.manual_seed(TORCH_SEED.get(seed_name or model_name, 0))
    net = build(model_name, opts, data)
    if model_name == "gpt":
        net.init_gpt2()
    if write_init or not os.path.exists(init_path):
        tm.save_state_to_h5(net, init_path)
        print(f"{model_name}: wrote {os.path.relpath(init_path)} "
              f"({os.path.getsize(init_path)} bytes, {sum(p.numel() for p in net.parameters())} parameters)")
    tm.load_state_from_h5(net, init_path)  # both sides start from the file's float32 numbers
    steps = int(opts["max_train_steps_per_epoch"])
    B = int(opts["batch_size"])
    batches = tm.train_batches(int(opts.get("seed", 42)), data.n, B, steps)
    opt = optimizer(net.parameters(), opts)
    losses = []
    for idx in batches:
        opt.zero_grad(set_to_none=True)
        loss = tm.batch_loss(net, model_name, data.batch(idx))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, net


def read_curve(path, column="loss"):
    with open(path) as f:
        return [float(r[column]) for r in csv.DictReader(f)]


def write_curve(path, losses):
    with open(path, "w") as f:
        f.write("step,loss\n")
        for s, l in enumerate(losses):
            f.write(f"{s},{l:.9g}\n")


def rel_diffs(a, b):
    return [abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b)]


def compare_buffers(net, model_file, tol):
    """mpitrain's final running statistics against torch's."""
    ok = True
    with h5py.File(model_file, "r") as f:
        for name, b in tm.mpitrain_buffers(net):
            got = np.asarray(f[name], dtype=np.float64)
            want = b.numpy().astype(np.float64)
            rel = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
            ok &= rel <= tol
            print(f"  buffer {name}: max relative difference {rel:.3g}")
    return ok


def run_mpitrain(binary, opts_path, init_path, data_path, out_dir, mpirun):
    cmd = [binary, "-options_file", opts_path, "-init_from", init_path, "-data_train", data_path,
           "-output_dir", out_dir]
    if mpirun:
        cmd = mpirun.split() + cmd
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"compare_torch: mpitrain failed ({r.returncode}):\n{r.stdout}")
    return read_curve(os.path.join(out_dir, "steps.csv"))


def report(label, a, b, tol):
    if len(a) != len(b):
        print(f"  {label}: {len(a)} steps against {len(b)}")
        return False
    d = rel_diffs(a, b)
    worst = max(range(len(d)), key=d.__getitem__)
    ok = d[worst] <= tol
    print(f"  {label}: max relative difference {d[worst]:.3g} at step {worst} "
          f"({a[worst]:.9g} vs {b[worst]:.9g}) -> {'ok' if ok else 'BEYOND ' + str(tol)}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="cnn,cnnbn,gpt")
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "mpitrain-validation-data"))
    ap.add_argument("--mt-data", help="mt-data program, to make missing data files")
    ap.add_argument("--mpitrain", help="mpitrain program: run it and compare")
    ap.add_argument("--mpirun", default="", help="launcher prefix, e.g. 'mpirun -np 1'")
    ap.add_argument("--write", action="store_true", help="write the init files and expected curves")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--curves", default=CURVES,
                    help="folder of MODEL.opts and its init and curve files (default: validation/curves)")
    ap.add_argument("--per-step", action="store_true", help="print every step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ok = True
    for m in args.models.split(","):
        opts_path = os.path.join(args.curves, f"{m}.opts")
        opts = read_opts(opts_path)
        kind = opts.get("model", m)  # a curve's name (cnnbn) and its model (cnn)
        init_path = os.path.join(args.curves, f"{m}_init.h5")
        exp_path = os.path.join(args.curves, f"{m}_torch.csv")
        dpath = data_file(kind, args.data, args.mt_data)
        data = Data(dpath, opts)
        losses, net = torch_curve(kind, opts, data, init_path, args.write, seed_name=m)
        bufs = tm.mpitrain_buffers(net)
        buf_path = os.path.join(args.curves, f"{m}_torch_buffers.h5")
        if bufs and (args.write or not os.path.exists(buf_path)):
            with h5py.File(buf_path, "w") as f:  # running statistics after the steps
                for name, b in bufs:
                    f.create_dataset(name, data=b.numpy().astype(np.float32))
            print(f"  wrote {os.path.relpath(buf_path)}")
        print(f"{m}: PyTorch {torch.__version__}, {len(losses)} steps, loss {losses[0]:.6f} -> {losses[-1]:.6f}")
        if args.write or not os.path.exists(exp_path):
            write_curve(exp_path, losses)
            print(f"  wrote {os.path.relpath(exp_path)}")
        else:
            ok &= report("PyTorch now vs committed curve", losses, read_curve(exp_path), args.tol)
        if args.mpitrain:
            with tempfile.TemporaryDirectory() as tmp:
                mt = run_mpitrain(args.mpitrain, opts_path, init_path, dpath, tmp, args.mpirun)
                if bufs:
                    ok &= compare_buffers(net, os.path.join(tmp, "model_final.h5"), args.tol)
            ok &= report("mpitrain vs PyTorch", mt, losses, args.tol)
            if args.per_step:
                for s, (a, b, d) in enumerate(zip(mt, losses, rel_diffs(mt, losses))):
                    print(f"    step {s:3d} mpitrain {a:.9g} torch {b:.9g} rel {d:.3g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
