#!/usr/bin/env bash
# Every rank must resolve the same configuration: a rank that sees another
# -lr (on its own command line in an MPMD launch; PETSc reads PETSC_OPTIONS
# and options files on rank 0 only and broadcasts them) is refused before the first step, on
# every rank, with a clear message; equal configurations train.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 200 8 3 1 >/dev/null || bail "mkdata synth failed"
args=(-backend ddp -model mlp -mlp_hidden 8 -data_train "$WORK/train.h5" -epochs 1 -batch_size 8
  -log_every 0 -threads 1)
mpmd() { # LR_RANK1 OUTDIR
  timeout -k 10 60 "$MPIRUN" --oversubscribe --bind-to none --mca btl self,vader \
    -np 1 "$MPITRAIN" "${args[@]}" -lr 0.01 -output_dir "$2" : \
    -np 1 "$MPITRAIN" "${args[@]}" -lr "$1" -output_dir "$2" </dev/null
}
expect_error "a different -lr on one rank is refused" "ranks resolved different configurations" \
  mpmd 0.5 "$WORK/o1"
expect_no_output "refused before the first epoch" "epoch 1/1"
expect_empty_dir "nothing written by the refused run" "$WORK/o1"
expect_ok "the same options on both ranks train" mpmd 0.01 "$WORK/o2"
finish
