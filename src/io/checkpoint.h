/* Checkpoint files: one HDF5 file per checkpoint, written and read
 * collectively by every rank of a communicator (MPI-IO driver, collective
 * transfers), holding GLOBAL LOGICAL tensors so that any later run, on any
 * number of ranks, reads just the slices it needs.
 *
 * File layout, names and the checksum: ckpt_format.h.
 *
 * Crash safety (mt_ckpt_save): DIR/ckpt-<step>.h5.tmp is written and closed
 * by all ranks and fsync'ed by every rank (each flushes what its node wrote),
 * then rank 0 renames it to DIR/ckpt-<step>.h5, syncs DIR, rewrites DIR/latest
 * (one line, the file name, via latest.tmp and a rename) and removes all but
 * the newest K checkpoints and any stale *.tmp. A crash at any point leaves
 * the previous checkpoints intact; a .tmp is never read. One job writes
 * into a DIR at a time (a save removes every stale .tmp of DIR).
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

/* Who wrote the checkpoint. NULL strings are stored as "". */
typedef struct {
  const char *backend; /* "ddp-amp", ...                                    */
  const char *options; /* the resolved options, one string                  */
} mt_ckpt_meta;

/* ------------------------------------------------------------ file level */

/* Writes one checkpoint file at path (created or truncated), collectively
 * over comm: the tensors of ts as /<buffer>/<tensor> with their checksums,
 * the header attributes from meta (may be NULL) and the world size of comm,
 * and the entries of st (may be NULL) under /trainer_state. st and meta must
 * be the same on every rank (checked). On failure the partial file is
 * removed. Not crash-safe by itself: use mt_ckpt_save. */
int mt_ckpt_write(MPI_Comm comm, const char *path, const mt_ckpt_tensors *ts,
                  const mt_ckpt_meta *meta, const mt_ckpt_state *st);

/* ------------------------------------------------------ directory level */

/* Writes DIR/ckpt-<step>.h5 crash-safely (see the top of this file), makes
 * DIR when needed, points DIR/latest at it and keeps the newest keep
 * checkpoints (keep <= 0: all). path (may be NULL) receives the file's name.
 * If writing fails, the .tmp is removed and DIR is as it was; failing to
 * remove an old checkpoint is only a warning. */
int mt_ckpt_save(MPI_Comm comm, const char *dir, int64_t step, int keep,
                 const mt_ckpt_tensors *ts, const mt_ckpt_meta *meta,
                 const mt_ckpt_state *st, char *path, size_t cap);

#endif
