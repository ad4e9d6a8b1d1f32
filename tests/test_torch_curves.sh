#!/usr/bin/env bash
# mpitrain against PyTorch 1.13: from the same weights (-init_from
# validation/curves/MODEL_init.h5) and the same data order, 50 steps of cnn
# (SGD, Fashion-MNIST), cnnbn (the same with batch norm, whose running
# statistics must also end as PyTorch's) and gpt (AdamW, byte tokens of GPL-3) give the loss
# curves PyTorch gave (validation/curves/MODEL_torch.csv, made by
# validation/compare_torch.py) within 1e-4 relative at every step; at 1 rank
# (sp) and 2 (ddp). This part needs no Python.
# When /usr/bin/python3 has torch and h5py, validation/load_mpitrain.py loads
# the trained model into its torch.nn module and its loss on 64 validation
# samples must equal mpitrain's validation loss on them (1e-5 relative).
# MT_CURVES_DIR overrides the folder of the expected curves, MT_TORCH_PYTHON
# the interpreter (default /usr/bin/python3, Debian's python3-torch).
# The cnnbn curve is sensitive to rounding: built without FMA contraction (gcc
# -O1) a max-pool/ReLU tie falls the other way at step 29 and the curves part
# by 1% at step 48, so every build that runs this test compiles at -O2.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MT_DATA" "$MKDATA"
curves=${MT_CURVES_DIR:-$top_srcdir/validation/curves}
tol=1e-4
fm_src=/usr/share/datasets/fashion-mnist
text=/usr/share/common-licenses/GPL-3

fmnist=${MT_FMNIST_DIR:-$WORK/fmnist}
have_cnn=1
if [ ! -f "$fmnist/fashion-mnist-train.h5" ] || [ ! -f "$fmnist/fashion-mnist-test.h5" ]; then
  if [ -f "$fm_src/train-images-idx3-ubyte.gz" ]; then
    fmnist=$WORK/fmnist
    mkdir -p "$fmnist"
    "$MT_DATA" fashion-mnist -out "$fmnist" >/dev/null || bail "mt-data fashion-mnist failed"
  else
    have_cnn=0
    echo "# SKIP: cnn curve ($fm_src missing)"
  fi
fi
have_gpt=1
if [ -f "$text" ]; then
  "$MT_DATA" text "$text" -out "$WORK" -name gpl >/dev/null || bail "mt-data text failed"
else
  have_gpt=0
  echo "# SKIP: gpt curve ($text missing)"
fi
[ "$have_cnn$have_gpt" = 00 ] && { echo "# SKIP: no data"; exit 77; }

# compare_curve NAME GOT.csv (step,loss,lr) EXPECTED.csv (step,loss)
compare_curve() {
  local msg
  msg=$(awk -F, -v tol="$tol" '
    FNR == 1 { next }
    NR == FNR { want[$1] = $2; nwant++; next }
    {
      ngot++
      if (!($1 in want)) { printf "step %s is not in the expected curve", $1; bad = 1; exit }
      d = $2 - want[$1]; if (d < 0) d = -d
      w = want[$1] < 0 ? -want[$1] : want[$1]
      r = w > 0 ? d / w : d
      if (r > worst || ngot == 1) { worst = r; at = $1; g = $2; e = want[$1] }
      if (!(r <= tol)) nbad++
    }
    END {
      if (bad) exit 1
      if (ngot != nwant || ngot == 0) { printf "%d steps, expected %d", ngot, nwant; exit 1 }
      printf "max relative difference %.3g at step %s (%s vs %s)", worst, at, g, e
      if (nbad) { printf "; %d steps beyond %s", nbad, tol; exit 1 }
    }' "$3" "$2")
  local rc=$?
  echo "#   $1: $msg"
  if [ $rc = 0 ]; then pass "$1"; else fail "$1" "$msg"; fi
}

# val_loss DIR: the validation loss of the first row of DIR/curve.csv
val_loss() { sed -n 2p "$1/curve.csv" | cut -d, -f9; }

py=${MT_TORCH_PYTHON:-/usr/bin/python3}
have_torch=0
if "$py" -c 'import torch, h5py' >/dev/null 2>&1; then have_torch=1; fi

for m in cnn cnnbn gpt; do
  if [ $m != gpt ]; then
    [ $have_cnn = 1 ] || continue
    train=$fmnist/fashion-mnist-train.h5 val=$fmnist/fashion-mnist-test.h5
  else
    [ $have_gpt = 1 ] || continue
    train=$WORK/gpl-train.h5 val=$WORK/gpl-val.h5
  fi
  for f in "$m.opts" "${m}_init.h5" "${m}_torch.csv"; do
    [ -f "$curves/$f" ] || bail "missing $curves/$f"
  done
  runs="sp:1 ddp:2"
  # batch norm under ddp normalises each rank's half batch (as PyTorch DDP
  # without SyncBatchNorm), not PyTorch's whole one: tests/test_model_features.sh
  [ $m = cnnbn ] && runs=sp:1
  for run in $runs; do
    set -- "${run%:*}" "${run#*:}" # backend, ranks
    o=$WORK/$m-$1
    run_logged run_mpi "$2" 120 "$MPITRAIN" -options_file "$curves/$m.opts" -backend "$1" \
      -init_from "$curves/${m}_init.h5" -data_train "$train" -data_val "$val" \
      -val_batch_size 64 -max_val_steps_per_epoch 1 -output_dir "$o"
    if [ "$LAST_RC" != 0 ] || [ ! -f "$o/steps.csv" ]; then
      fail "$m: mpitrain -backend $1 at $2 rank(s) from ${m}_init.h5" "exit $LAST_RC"
      continue
    fi
    compare_curve "$m: -backend $1 at $2 rank(s): 50 losses within $tol of PyTorch's" \
      "$o/steps.csv" "$curves/${m}_torch.csv"
    if [ -f "$curves/${m}_torch_buffers.h5" ]; then # batch norm's running statistics
      run_logged "$MKDATA" compare "$curves/${m}_torch_buffers.h5" "$o/model_final.h5" "$tol"
      [ "$LAST_RC" = 0 ] && pass "$m: -backend $1: running statistics within $tol of PyTorch's" ||
        fail "$m: -backend $1: running statistics within $tol of PyTorch's" "$(last_output | grep FAIL)"
    fi
  done

  o=$WORK/$m-sp
  if [ $have_torch = 0 ]; then
    echo "# SKIP: $m: loading the mpitrain model into torch ($py lacks torch or h5py)"
  elif [ -f "$o/model_final.h5" ]; then
    loss=$(val_loss "$o")
    run_logged env PYTHONDONTWRITEBYTECODE=1 timeout 120 "$py" \
      "$top_srcdir/validation/load_mpitrain.py" "$o/model_final.h5" --data "$val" \
      --opts "$curves/$m.opts" --count 64 --check "$loss" --tol 1e-5
    if [ "$LAST_RC" = 0 ]; then
      pass "$m: model_final.h5 in torch.nn gives mpitrain's validation loss $loss"
      last_output | grep '^check:' | sed 's/^/#   /'
    else
      fail "$m: model_final.h5 in torch.nn gives mpitrain's validation loss $loss" "exit $LAST_RC"
    fi
  fi
done
finish
