#!/usr/bin/env bash
# A model or checkpoint file that cannot be used is refused in one line that
# names the file and the attribute or dataset at fault: -restart of a model
# file (not a checkpoint) points to -init_from; a checkpoint whose header
# attributes were altered (tests/h5attr) names the attribute; -init_from of
# a file without the model's tensors, or with other shapes, names the
# tensor. The untouched files restart and initialise a run.
. "$top_srcdir/tests/lib.sh"
make_work
H5ATTR=${H5ATTR:-$top_builddir/tests/h5attr}
need_bin "$MPITRAIN" "$MKDATA" "$H5ATTR"
T=$TEST_TIMEOUT
"$MKDATA" synth "$WORK/train.h5" 64 8 3 1 >/dev/null || bail "mkdata synth failed"
args=(-backend sp -model mlp -mlp_hidden 8 -data_train "$WORK/train.h5" -epochs 1 -batch_size 8
  -log_every 0 -threads 1)
expect_ok "a run writes a checkpoint and a model file" run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" \
  -checkpoint_every_steps 4 -output_dir "$WORK/a"
C=$WORK/a/checkpoints/ckpt-4.h5
M=$WORK/a/model_final.h5
[ -f "$C" ] && [ -f "$M" ] || bail "no $C or $M"

expect_error "-restart of a model file points to -init_from" \
  "checkpoint $M: a model file (attribute format is 'mpitrain-params-1'), not a checkpoint: it holds parameters only; start from it with -init_from $M" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -restart "$M" -output_dir "$(out)"

broken() { # NAME ATTRIBUTE TYPE VALUE: a copy of the checkpoint with ATTRIBUTE replaced
  cp "$C" "$WORK/$1.h5" && "$H5ATTR" "$WORK/$1.h5" / "$2" "$3" "$4" || bail "h5attr $1 failed"
}
broken fmt-text format string junk
expect_error "a checkpoint whose format is a word names the file and the attribute" \
  "checkpoint $WORK/fmt-text.h5: attribute format is 'junk', not a checkpoint's format version (a number)" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -restart "$WORK/fmt-text.h5" -output_dir "$(out)"
broken ws-text world_size string two
expect_error "a checkpoint whose world_size is a word names the file and the attribute" \
  "checkpoint $WORK/ws-text.h5: attribute world_size is not a readable number" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -restart "$WORK/ws-text.h5" -output_dir "$(out)"
broken algo-int checksum_algorithm int 5
expect_error "a checkpoint whose checksum_algorithm is a number names the file and the attribute" \
  "checkpoint $WORK/algo-int.h5: attribute checksum_algorithm is not a readable string" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -restart "$WORK/algo-int.h5" -output_dir "$(out)"
broken opts-int options double 1.5
expect_error "a checkpoint whose options are a number names the file and the attribute (2 ranks)" \
  "checkpoint $WORK/opts-int.h5: attribute options is not a readable string" \
  run_mpi 2 "$T" "$MPITRAIN" "${args[@]}" -backend ddp -restart "$WORK/opts-int.h5" \
  -output_dir "$(out)"

expect_error "-init_from of a model of other shapes names the file and the tensor" \
  "option -init_from: $M: tensor layers.0.weight is (8,8), the model's is (16,8)" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -mlp_hidden 16 -init_from "$M" -output_dir "$(out)"
expect_error "-init_from of a checkpoint names the file and the tensor it lacks" \
  "option -init_from: $C has no tensor layers.0.weight" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -init_from "$C" -output_dir "$(out)"
printf 'not a model\n' >"$WORK/notes.txt"
expect_error "-init_from of a file that is not HDF5 names it" \
  "option -init_from: cannot open $WORK/notes.txt as HDF5 (truncated, damaged or not an HDF5 file)" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -init_from "$WORK/notes.txt" -output_dir "$(out)"
expect_error "-init_from of a missing file names it and the reason" \
  "option -init_from: cannot read $WORK/none.h5: No such file or directory" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -init_from "$WORK/none.h5" -output_dir "$(out)"

# the untouched files: a restart and a start from the model file train
expect_ok "-restart of the untouched checkpoint trains" run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" \
  -epochs 2 -restart "$C" -output_dir "$(out)"
expect_ok "-init_from of the untouched model file trains" run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" \
  -init_from "$M" -output_dir "$(out)"
finish
