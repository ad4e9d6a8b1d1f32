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

#include "io/ckpt_format.h"
#include "io/ckpt_plan.h"
#include "io/ckpt_state.h"

/* Who wrote the checkpoint. NULL strings are stored as "". */
typedef struct {
  const char *backend; /* "ddp-amp", ...                                    */
  const char *options; /* the resolved options, one string                  */
} mt_ckpt_meta;

/* What a checkpoint says about itself (mt_ckpt_read). Free with
 * mt_ckpt_info_free. */
typedef struct {
  int format, world_size;
  char version[32];
  char backend[64];
  char created[32];
  char *options;                          /* owned                          */
  int nbufs;                              /* buffer groups in the file      */
  char bufs[MT_CKPT_MAX_BUFS][MT_NAME_MAX];
} mt_ckpt_info;

void mt_ckpt_info_free(mt_ckpt_info *info);

/* ------------------------------------------------------------ file level */

/* Writes one checkpoint file at path (created or truncated), collectively
 * over comm: the tensors of ts as /<buffer>/<tensor> with their checksums,
 * the header attributes from meta (may be NULL) and the world size of comm,
 * and the entries of st (may be NULL) under /trainer_state. st and meta must
 * be the same on every rank (checked). On failure the partial file is
 * removed. Not crash-safe by itself: use mt_ckpt_save. */
int mt_ckpt_write(MPI_Comm comm, const char *path, const mt_ckpt_tensors *ts,
                  const mt_ckpt_meta *meta, const mt_ckpt_state *st);

/* Reads a checkpoint collectively, on any number of ranks. First checks the
 * format version and that every tensor of every buffer of ts exists in the
 * file, is float32 (float64 for ts->dtype MT_FP64) and has the table's shape (and that the file's buffer
 * groups hold no tensor the table lacks); any mismatch fails, naming the
 * tensor and both shapes, before a buffer is touched. Then each rank reads
 * the slices it needs into ts's buffers and every tensor's checksum is
 * verified. ts may be NULL (header and state only); info and st may be NULL.
 * On success *info and *st are replaced (their old contents freed). On a
 * failure info and st are untouched; buffers are untouched unless the
 * failure is a checksum or I/O error found while reading data, after which
 * their contents are unspecified (verify first with mt_ckpt_verify, or fall
 * back to an older checkpoint). */
int mt_ckpt_read(MPI_Comm comm, const char *path, const mt_ckpt_tensors *ts,
                 mt_ckpt_info *info, mt_ckpt_state *st);

typedef enum {
  MT_CKPT_CHECK_OPEN = 0, /* opens; format version; every dataset float32
                             or float64 with a checksum attribute; state
                             readable                                      */
  MT_CKPT_CHECK_DATA = 1  /* and every dataset's checksum, reading each
                             tensor once, split among ranks                */
} mt_ckpt_check;

/* Checks a checkpoint file without a table and without touching any
 * buffer. Fails with a message naming the file (and the tensor). */
int mt_ckpt_verify(MPI_Comm comm, const char *path, mt_ckpt_check level);

/* ------------------------------------------------------ directory level */

/* DIR/ckpt-<step>.h5 into buf; fails (MT_ERR_ARG) when it does not fit. */
int mt_ckpt_path(const char *dir, int64_t step, char *buf, size_t cap);

/* Writes DIR/ckpt-<step>.h5 crash-safely (see the top of this file), makes
 * DIR when needed, points DIR/latest at it and keeps the newest keep
 * checkpoints (keep <= 0: all). path (may be NULL) receives the file's name.
 * If writing fails, the .tmp is removed and DIR is as it was; failing to
 * remove an old checkpoint is only a warning. */
int mt_ckpt_save(MPI_Comm comm, const char *dir, int64_t step, int keep,
                 const mt_ckpt_tensors *ts, const mt_ckpt_meta *meta,
                 const mt_ckpt_state *st, char *path, size_t cap);

/* The steps of the complete checkpoints in DIR (files ckpt-<step>.h5),
 * newest first, as listed by rank 0 and broadcast. *steps is allocated
 * (mt_free it), NULL when *n is 0; a missing DIR holds none. */
int mt_ckpt_list(MPI_Comm comm, const char *dir, int64_t **steps, int *n);

/* The newest checkpoint of DIR that passes mt_ckpt_verify at level: its
 * file name into path and its step into *step (may be NULL). Each damaged
 * one is skipped with a warning on stderr (rank 0) naming it and why.
 * Fails with MT_ERR_FILE when DIR holds no checkpoint or none passes. */
int mt_ckpt_find_latest(MPI_Comm comm, const char *dir, mt_ckpt_check level, char *path,
                        size_t cap, int64_t *step);

#endif
