#!/usr/bin/env python3
"""Reference numbers for tests/test_accountant.c -> refs/accountant.txt.

Computed with Opacus 1.6.0's RDP analysis (opacus/accountants/analysis/rdp.py),
loaded on its own so that PyTorch is not needed: it imports only numpy and
scipy. Get it without its dependencies and point this script at the wheel:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy scipy mpmath
    /tmp/venv/bin/pip download opacus==1.6.0 --no-deps -d /tmp/opacus
    /tmp/venv/bin/python validation/gen_refs_accountant.py \
        /tmp/opacus/opacus-1.6.0-py3-none-any.whl

(made with numpy 2, scipy 1.x, mpmath 1.3). Written:

  cases (N,4)          q, sigma, steps, delta of each case
  eps_improved (N)     Opacus RDPAccountant.get_privacy_spent with its
  order_improved (N)   default orders: Balle et al. 2020 conversion
  eps_classic (N)      the classic conversion rdp - log(delta)/(alpha-1)
  order_classic (N)    (TF-Privacy before 2020), on Opacus's RDP values
  rdp_cases (M,3)      q, sigma, steps
  rdp (M,151)          Opacus compute_rdp at the default orders
  mp_cases (K,3)       q, sigma, order: TF-Privacy's test_compute_log_a_equals_mp
  mp_log_a (K)         log A_alpha by mpmath quadrature of its defining
                       integral (independent of both implementations)
"""
import io
import math
import sys
import tempfile
import zipfile
import importlib.util
import os

import mpmath
import numpy as np

OPACUS_VERSION = "1.6.0"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "refs", "accountant.txt")


def load_opacus_rdp(wheel):
    tmp = tempfile.mkdtemp()
    path = "opacus/accountants/analysis/rdp.py"
    with zipfile.ZipFile(wheel) as z:
        z.extract(path, tmp)
    spec = importlib.util.spec_from_file_location("opacus_rdp", os.path.join(tmp, path))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))

CASES = [  # q, sigma, steps, delta: the usual DP-SGD range and its edges
    (0.04, 1.5, 2250, 1e-5),    # Opacus accountants_test: 7.32911117143
    (0.04, 1.416015625, 2250, 1e-5),
    (0.04, 1.35625, 2000, 1e-5),
    (0.01, 4.0, 10000, 1e-5),   # Abadi et al. 2016, section 3.1
    (0.01, 1.1, 6000, 1e-5),
    (256 / 60000, 1.1, 14062, 1e-5),  # MNIST, batch 256, 60 epochs
    (256 / 60000, 0.7, 14062, 1e-5),
    (512 / 50000, 1.0, 2930, 1e-5),   # CIFAR-10, batch 512, 30 epochs
    (1e-3, 0.8, 100000, 1e-6),
    (1e-3, 5.0, 1000, 1e-6),
    (0.1, 0.6, 100, 1e-5),
    (0.1, 2.0, 1000, 1e-5),
    (0.5, 3.0, 50, 1e-5),
    (0.9, 10.0, 10, 1e-3),
    (1.0, 1.0, 1, 1e-5),
    (1.0, 20.0, 500, 1e-6),
    (2e-4, 0.5, 50000, 1e-7),
    (0.02, 0.3, 10, 1e-5),
    (0.05, 0.9, 1, 1e-2),
    (0.3, 8.0, 3000, 1e-8),
]

RDP_CASES = [(0.01, 1.1, 1), (0.04, 1.5, 2250), (1e-3, 0.8, 100000), (0.3, 0.5, 7),
             (0.5, 3.0, 50)]

MP_CASES = [(1e-7, 0.1, 1.01), (1e-6, 0.1, 256), (1e-5, 0.1, 256.1), (1e-6, 1, 27),
            (1e-4, 1.0, 1.5), (1e-3, 1.0, 2), (0.01, 10, 20), (0.1, 100, 20.5),
            (0.99, 0.1, 256), (0.999, 100, 256.1), (0.01, 1.1, 3.7), (0.04, 1.5, 10.9),
            (0.3, 0.7, 2.3)]


def log_a_mp(q, sigma, alpha):
    mpmath.mp.dps = 50
    q, sigma, alpha = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)

    def f(z):
        return mpmath.npdf(z, mu=0, sigma=sigma) * \
            ((1 - q) + q * mpmath.exp((2 * z - 1) / (2 * sigma ** 2))) ** alpha

    # the integrand peaks near alpha (and 0): split there for the quadrature
    pts = sorted({-mpmath.inf, mpmath.mpf(0), mpmath.mpf(0.5), alpha, mpmath.inf})
    return float(mpmath.log(mpmath.quad(f, pts, maxdegree=10)))


def write(f, name, arr):
    arr = np.atleast_1d(np.asarray(arr, dtype=float))
    shape = arr.shape if arr.size > 1 or arr.ndim > 1 else ()
    f.write("%s %d %s\n" % (name, len(shape), " ".join(str(d) for d in shape)))
    flat = arr.ravel()
    for i in range(0, flat.size, 8):
        f.write(" ".join("%.17g" % v for v in flat[i:i + 8]) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    m = load_opacus_rdp(sys.argv[1])
    orders = np.array(ORDERS, dtype=float)
    ei, oi, ec, oc = [], [], [], []
    for q, s, n, d in CASES:
        rdp = m.compute_rdp(q=q, noise_multiplier=s, steps=n, orders=ORDERS)
        e, o = m.get_privacy_spent(orders=ORDERS, rdp=rdp, delta=d)
        ei.append(e)
        oi.append(o)
        cl = rdp - math.log(d) / (orders - 1)
        k = int(np.nanargmin(cl))
        ec.append(cl[k])
        oc.append(orders[k])
    rdps = [m.compute_rdp(q=q, noise_multiplier=s, steps=n, orders=ORDERS) for q, s, n in RDP_CASES]
    mp = [log_a_mp(q, s, a) for q, s, a in MP_CASES]
    f = io.StringIO()
    f.write("# privacy accountant references: validation/gen_refs_accountant.py\n")
    f.write("# Opacus %s analysis/rdp.py, numpy %s, mpmath %s\n"
            % (OPACUS_VERSION, np.__version__, mpmath.__version__))
    write(f, "cases", CASES)
    write(f, "eps_improved", ei)
    write(f, "order_improved", oi)
    write(f, "eps_classic", ec)
    write(f, "order_classic", oc)
    write(f, "rdp_cases", RDP_CASES)
    write(f, "rdp", rdps)
    write(f, "mp_cases", MP_CASES)
    write(f, "mp_log_a", mp)
    with open(OUT, "w") as out:
        out.write(f.getvalue())
    print("wrote", OUT)


if __name__ == "__main__":
    main()
