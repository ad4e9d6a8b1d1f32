/* Checkpoint files, writing: mt_ckpt_write writes one checkpoint file
 * collectively, every rank its own hyperslabs of the global tensors
 * (layout: ckpt_format.h); mt_ckpt_save writes one into a directory
 * crash-safely. Above ckpt_format, ckpt_state, ckpt_plan and ckpt_dir: the
 * top of the checkpoint code.
 *
 * Crash safety (mt_ckpt_save): DIR/ckpt-<step>.h5.tmp is written and closed
 * by all ranks and fsync'ed by every rank (each flushes what its node wrote),
 * then rank 0 renames it to DIR/ckpt-<step>.h5, syncs DIR, rewrites DIR/latest
 * (one line, the file name, via latest.tmp and a rename) and removes all but
 * the newest K checkpoints and any stale *.tmp. A crash at any point leaves
 * the previous checkpoints intact; a .tmp is never read. One job writes
 * into a DIR at a time (a save removes every stale .tmp of DIR). */
#ifndef MT_CKPT_WRITE_H
#define MT_CKPT_WRITE_H

#include "io/ckpt_format.h"
#include "io/ckpt_plan.h"
#include "io/ckpt_state.h"

/* Who wrote the checkpoint. NULL strings are stored as "". */
typedef struct {
  const char *backend; /* "ddp-amp", ...                                    */
  const char *options; /* the resolved options, one string                  */
  const char *run_id;  /* the run's identity (16 hex digits), kept across its
                          restarts; pruning removes only its checkpoints.
                          NULL or "": none written, nothing pruned        */
  const mt_model *model; /* described in the file (io/modelfile.h); NULL: not */
} mt_ckpt_meta;

/* Writes one checkpoint file at path (created or truncated), collectively
 * over comm: the tensors of ts as /<buffer>/<tensor> with their checksums,
 * the header attributes from meta (may be NULL) and the world size of comm,
 * and the entries of st (may be NULL) under /trainer_state. st and meta must
 * be the same on every rank (checked). On failure the partial file is
 * removed. Not crash-safe by itself: use mt_ckpt_save. */
/* The bytes a checkpoint of ts, meta and st takes at most: the tensors
 * (with their alignment) and a bound on the metadata. mt_ckpt_write
 * reserves this much before any collective write (io/space.h), and warns
 * when a file came out larger. */
uint64_t mt_ckpt_file_bytes(const mt_ckpt_tensors *ts, const mt_ckpt_meta *meta,
                           const mt_ckpt_state *st);
int mt_ckpt_write(MPI_Comm comm, const char *path, const mt_ckpt_tensors *ts,
                  const mt_ckpt_meta *meta, const mt_ckpt_state *st);

/* Writes DIR/ckpt-<step>.h5 crash-safely (see the top of this file), makes
 * DIR when needed, points DIR/latest at it and keeps the newest keep
 * checkpoints of meta's run_id (keep <= 0: all; the one just written always;
 * mt_ckpt_prune). path (may be NULL) receives the file's name.
 * If writing fails, the .tmp is removed and DIR is as it was; failing to
 * remove an old checkpoint is only a warning. */
int mt_ckpt_save(MPI_Comm comm, const char *dir, int64_t step, int keep,
                 const mt_ckpt_tensors *ts, const mt_ckpt_meta *meta,
                 const mt_ckpt_state *st, char *path, size_t cap);

#endif
