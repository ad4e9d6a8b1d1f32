#!/usr/bin/env bash
# The foundation's recipe on real Fashion-MNIST (Debian's dataset-fashion-mnist):
# MLP 784-1024-1024-10, SGD momentum 0.9, lr 0.05, batch 128, 5 epochs, 2 ddp
# ranks. PyTorch 1.13 reaches 86.6-87.1% on it; mpitrain must reach >= 86.0%.
# And the models issue's CNN recipe (inputs/fashion-cnn.opts: conv 32, conv 64,
# 3x3 padding 1, ReLU, 2x2 max-pool, hidden 128, SGD momentum 0.9, lr 0.02,
# batch 128, 5 epochs, 2 ddp ranks): PyTorch 1.13 reaches 89.2-89.4%;
# mpitrain must reach >= 88.5% (it reached 90.4% with -seed 1 here).
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MT_DATA"
if ! accuracy_runs; then
  echo "# SKIP: MT_ACCURACY_RUNS=0 (accuracy runs left to the default build)"
  exit 77
fi
src=/usr/share/datasets/fashion-mnist
if [ ! -f "$src/train-images-idx3-ubyte.gz" ]; then
  echo "# SKIP: $src missing (apt-get install dataset-fashion-mnist)"
  exit 77
fi
data=${MT_FMNIST_DIR:-$top_builddir/tests/work/fmnist}
if [ ! -f "$data/fashion-mnist-test.h5" ]; then
  mkdir -p "$data"
  "$MT_DATA" fashion-mnist -out "$data" >/dev/null || bail "mt-data fashion-mnist failed"
fi
o="$WORK/fm"
run_logged run_mpi 2 900 "$MPITRAIN" -backend ddp -model mlp -mlp_hidden 1024,1024 \
  -data_train "$data/fashion-mnist-train.h5" -data_val "$data/fashion-mnist-test.h5" \
  -epochs 5 -batch_size 128 -optimizer sgd -lr 0.05 -momentum 0.9 -seed 1 -log_every 0 \
  -output_dir "$o"
if [ "$LAST_RC" != 0 ]; then fail "fashion-mnist mlp trains" "exit $LAST_RC"; finish; fi
pass "fashion-mnist mlp trains"
acc=$(grep -E '^5,' "$o/curve.csv" | cut -d, -f10)
echo "# test accuracy after 5 epochs: $acc"
if awk -v a="$acc" 'BEGIN { exit !(a >= 0.86) }'; then pass "test accuracy $acc >= 0.86"
else fail "test accuracy $acc >= 0.86" "below PyTorch's 86.6-87.1% by more than a point"; fi
rows=$(grep -c '^[0-9]' "$o/curve.csv")
if [ "$rows" = 5 ]; then pass "learning curve has 5 epochs"; else fail "learning curve has 5 epochs" "$rows rows"; fi
[ -f "$o/curve.h5" ] && pass "curve.h5 written" || fail "curve.h5 written" "missing"

o="$WORK/cnn"
run_logged run_mpi 2 1500 "$MPITRAIN" -options_file "$top_srcdir/inputs/fashion-cnn.opts" \
  -data_train "$data/fashion-mnist-train.h5" -data_val "$data/fashion-mnist-test.h5" -seed 1 \
  -log_every 0 -output_dir "$o"
if [ "$LAST_RC" != 0 ]; then fail "fashion-mnist cnn trains" "exit $LAST_RC"; finish; fi
pass "fashion-mnist cnn trains"
acc=$(grep -E '^5,' "$o/curve.csv" | cut -d, -f10)
echo "# cnn test accuracy after 5 epochs: $acc"
if awk -v a="$acc" 'BEGIN { exit !(a >= 0.885) }'; then pass "cnn test accuracy $acc >= 0.885"
else fail "cnn test accuracy $acc >= 0.885" "below PyTorch's 89.2-89.4% by more than a point"; fi
finish
