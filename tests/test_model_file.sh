#!/usr/bin/env bash
# A model or checkpoint file that cannot be used is refused in one line that
# names the file and the attribute or dataset at fault: -restart of a model
# file (not a checkpoint) points to -init_from; a checkpoint whose header
# attributes were altered (tests/h5attr) names the attribute; -init_from of
# a file without the model's tensors, or with other shapes, names the
# tensor. The files describe their model (src/io/modelfile.h): -init_from
# alone makes it, a contradicting -model or model option or training set of
# another shape is refused naming both. The untouched files restart and
# initialise a run.
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

# the files describe their model (src/io/modelfile.h): what they say makes
# the model, what contradicts them is refused naming both values
expect_error "-init_from with a contradicting model option names both values" \
  "option -mlp_hidden: 16 contradicts $M (option -init_from), whose mlp model was made with -mlp_hidden 8" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -mlp_hidden 16 -init_from "$M" -output_dir "$(out)"
expect_error "-init_from with another -model names both" \
  "option -model: cnn contradicts $M (option -init_from), which holds a mlp model" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -model cnn -init_from "$M" -output_dir "$(out)"
expect_error "a checkpoint describes its model too" \
  "option -mlp_hidden: 9 contradicts $C (option -init_from), whose mlp model was made with -mlp_hidden 8" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -mlp_hidden 9 -init_from "$C" -output_dir "$(out)"
"$MKDATA" synth "$WORK/narrow.h5" 64 6 3 1 >/dev/null || bail "mkdata synth failed"
expect_error "-init_from with training data of another shape names both" \
  "option -data_train: $WORK/narrow.h5 holds samples (6) with 3 classes; the model of $M (option -init_from) was made for (8) with 3 classes" \
  run_mpi 1 "$T" "$MPITRAIN" -backend sp -data_train "$WORK/narrow.h5" -epochs 1 -batch_size 8 \
  -log_every 0 -threads 1 -init_from "$M" -output_dir "$(out)"
expect_error "-init_from of a data set says it is not a model file" \
  "option -init_from: $WORK/train.h5 is a data set (/x or /tokens), not a model file" \
  run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" -init_from "$WORK/train.h5" -output_dir "$(out)"
o=$(out)
expect_ok "-init_from alone makes the file's model; its dropout may differ (training only)" \
  run_mpi 1 "$T" "$MPITRAIN" -backend sp -data_train "$WORK/train.h5" -epochs 1 -batch_size 8 \
  -log_every 0 -threads 1 -mlp_dropout 0.5 -mlp_hidden 8 -init_from "$M" -output_dir "$o"
grep -q "model mlp (hidden 8)" "$LAST_LOG" && pass "the file's -mlp_hidden 8 made the model" ||
  fail "the file's -mlp_hidden 8 made the model" "$(grep -m1 'model mlp' "$LAST_LOG")"
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

# a boolean given bare (on) in the file agrees with 1 and contradicts 0
"$MKDATA" synth "$WORK/img.h5" 32 64 3 1 image >/dev/null || bail "mkdata synth image failed"
cargs=(-backend sp -data_train "$WORK/img.h5" -epochs 1 -batch_size 8 -log_every 0 -threads 1)
expect_ok "a cnn with -cnn_batchnorm given bare" run_mpi 1 "$T" "$MPITRAIN" "${cargs[@]}" \
  -model cnn -cnn_channels 4 -cnn_hidden 8 -cnn_batchnorm -output_dir "$WORK/cnn"
expect_ok "-cnn_batchnorm 1 agrees with the file's bare flag" run_mpi 1 "$T" "$MPITRAIN" \
  "${cargs[@]}" -cnn_batchnorm 1 -init_from "$WORK/cnn/model_final.h5" -output_dir "$(out)"
expect_error "-cnn_batchnorm 0 contradicts it" \
  "option -cnn_batchnorm: 0 contradicts $WORK/cnn/model_final.h5 (option -init_from), whose cnn model was made with -cnn_batchnorm (no value: on)" \
  run_mpi 1 "$T" "$MPITRAIN" "${cargs[@]}" -cnn_batchnorm 0 -init_from "$WORK/cnn/model_final.h5" \
  -output_dir "$(out)"

# the untouched files: a restart and a start from the model file train
expect_ok "-restart of the untouched checkpoint trains" run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" \
  -epochs 2 -restart "$C" -output_dir "$(out)"
expect_ok "-init_from of the untouched model file trains" run_mpi 1 "$T" "$MPITRAIN" "${args[@]}" \
  -init_from "$M" -output_dir "$(out)"
finish
