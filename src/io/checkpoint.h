/* Checkpoint files: one HDF5 file per checkpoint, written and read
 * collectively by every rank of a communicator (MPI-IO driver, collective
 * transfers), holding GLOBAL LOGICAL tensors so that any later run, on any
 * number of ranks, reads just the slices it needs.
 *
 * This header is for the code outside src/io/ (trainer, tests, bench): it
 * declares nothing itself and includes the checkpoint code's headers, one
 * per role, each including only the ones below it:
 *
 *   ckpt_format.h   the file layout, names, the checksum, HDF5 helpers
 *   ckpt_state.h    the trainer state (key/value entries), pack, unpack
 *   ckpt_plan.h     the tensors written or read; their division among ranks
 *   ckpt_read.h     reading on any rank count (ckpt_read.c), mt_ckpt_verify
 *                   (ckpt_verify.c)
 *   ckpt_dir.h      the folder: list, DIR/latest, pruning, find_latest
 *   ckpt_write.h    the collective writer, the crash-safe save
 *
 * Errors: every function returns 0 or an MT_ERR_* code, and every function
 * that takes a communicator is collective and agrees (mt_agree): a failure
 * on one rank is a failure on all, never a hang. Messages name the file and,
 * where one is at fault, the tensor ("/params/layers.0.weight").
 *
 * HDF5 calls are made under mt_h5_lock(). Call mt_h5_quiet() once (main
 * does) so HDF5 does not print its own error stacks. */
#ifndef MT_CHECKPOINT_H
#define MT_CHECKPOINT_H

#include "io/ckpt_dir.h"
#include "io/ckpt_format.h"
#include "io/ckpt_plan.h"
#include "io/ckpt_read.h"
#include "io/ckpt_state.h"
#include "io/ckpt_write.h"

#endif
