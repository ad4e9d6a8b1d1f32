#!/usr/bin/env bash
# The cnn model on real Fashion-MNIST images: ddp at 2, 3 and 4 ranks (and with
# 2 threads splitting the batch) gives sp's parameters to 1e-5 after a few
# steps; bad shapes are refused with a clear message.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MT_DATA" "$MKDATA"
src=/usr/share/datasets/fashion-mnist
[ -f "$src/t10k-images-idx3-ubyte.gz" ] || { echo "# SKIP: $src missing"; exit 77; }
data=${MT_FMNIST_DIR:-$top_builddir/tests/work/fmnist}
if [ ! -f "$data/fashion-mnist-test.h5" ]; then
  mkdir -p "$data"
  "$MT_DATA" fashion-mnist -out "$data" >/dev/null || bail "mt-data fashion-mnist failed"
fi
common=(-model cnn -cnn_channels 4,6 -cnn_hidden 16 -data_train "$data/fashion-mnist-test.h5"
  -data_val "$data/fashion-mnist-test.h5" -epochs 2 -max_train_steps_per_epoch 4
  -max_val_steps_per_epoch 1 -val_batch_size 50 -batch_size 24 -lr 0.05 -momentum 0.9 -log_every 0)
train() { # NAME NP BACKEND THREADS
  run_logged run_mpi "$2" 300 "$MPITRAIN" "${common[@]}" -backend "$3" -threads "$4" -output_dir "$WORK/$1"
  [ "$LAST_RC" = 0 ] && pass "train cnn $1" || fail "train cnn $1" "exit $LAST_RC"
}
same() {
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" 1e-5
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "parameters differ beyond 1e-5"
}
train sp 1 sp 1
train ddp2 2 ddp 1
train ddp3 3 ddp 1
train ddp4 4 ddp 1
train sp2t 1 sp 2
same "cnn: ddp 2 ranks == sp" sp ddp2
same "cnn: ddp 3 ranks == sp" sp ddp3
same "cnn: ddp 4 ranks == sp" sp ddp4
same "cnn: 2 threads == 1 thread" sp sp2t
expect_output "conv weight named as in PyTorch" "features.3.weight"
"$MKDATA" synth "$WORK/flat.h5" 100 8 3 1 >/dev/null || bail "mkdata synth failed"
expect_error "cnn refuses flat samples" "model cnn needs samples of shape" \
  run_mpi 2 60 "$MPITRAIN" -backend ddp -model cnn -data_train "$WORK/flat.h5" -batch_size 8 -output_dir "$WORK/bad"
expect_error "even kernel refused" "-cnn_kernel" \
  run_mpi 1 60 "$MPITRAIN" "${common[@]}" -cnn_kernel 4 -output_dir "$WORK/bad2"
finish
