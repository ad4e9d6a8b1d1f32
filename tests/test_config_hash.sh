#!/usr/bin/env bash
# Every rank must resolve the same configuration: a rank that sees another
# -lr (on its own command line in an MPMD launch; PETSc reads PETSC_OPTIONS
# and options files on rank 0 only and broadcasts them) is refused before the first step, on
# every rank, with a clear message naming the options that differ and the
# ranks that hold each value; equal configurations train.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 200 8 3 1 >/dev/null || bail "mkdata synth failed"
args=(-backend ddp -model mlp -data_train "$WORK/train.h5" -epochs 1 -batch_size 12
  -log_every 0 -threads 1)
mpmd() { # LR_RANK2 OUTDIR [MORE OPTIONS OF RANK 2]: ranks 0-1 alike, rank 2 its own
  local lr=$1 o=$2
  shift 2
  timeout -k 10 60 "$MPIRUN" --oversubscribe --bind-to none --mca btl self,vader \
    -np 2 "$MPITRAIN" "${args[@]}" -mlp_hidden 8 -lr 0.01 -output_dir "$o" : \
    -np 1 "$MPITRAIN" "${args[@]}" -mlp_hidden 8 -lr "$lr" -output_dir "$o" "$@" </dev/null
}
expect_error "a different -lr on one rank is refused, naming the option and the ranks" \
  "ranks resolved different configurations: -lr is 0.01 on ranks 0-1 and 0.5 on rank 2; check per-rank environment options such as PETSC_OPTIONS" \
  mpmd 0.5 "$WORK/o1"
expect_no_output "refused before the first epoch" "epoch 1/1"
expect_empty_dir "nothing written by the refused run" "$WORK/o1"
# a model's own option (-mlp_dropout, read through mt_option_real) and one
# of the configuration's, each named with its values
expect_error "two options differ: both named" \
  "-seed is 42 on ranks 0-1 and 7 on rank 2; -mlp_dropout is 0 on ranks 0-1 and 0.5 on rank 2;" \
  mpmd 0.01 "$WORK/o3" -seed 7 -mlp_dropout 0.5
# 4 ranks, rank 2 alone differs: the ranks of a value as ranges
expect_error "4 ranks: the ranks holding a value as ranges" \
  "ranks resolved different configurations: -lr is 0.01 on ranks 0-1,3 and 0.5 on rank 2;" \
  timeout -k 10 60 "$MPIRUN" --oversubscribe --bind-to none --mca btl self,vader \
  -np 2 "$MPITRAIN" "${args[@]}" -mlp_hidden 8 -lr 0.01 -output_dir "$WORK/o4" : \
  -np 1 "$MPITRAIN" "${args[@]}" -mlp_hidden 8 -lr 0.5 -output_dir "$WORK/o4" : \
  -np 1 "$MPITRAIN" "${args[@]}" -mlp_hidden 8 -lr 0.01 -output_dir "$WORK/o4"
expect_ok "the same options on every rank train" mpmd 0.01 "$WORK/o2"
finish
