/* Checkpoint files, the folder: DIR/ckpt-<step>.h5 names, listing a
 * directory's checkpoints, DIR/latest, keeping the newest K (pruning), and
 * finding the newest checkpoint that verifies. The public functions are
 * collective over comm and agree (mt_agree); the helpers for mt_ckpt_save
 * (ckpt_write.c) run on one rank (rank 0) and are not collective. Above
 * ckpt_read (find_latest verifies); below ckpt_write. */
#ifndef MT_CKPT_DIR_H
#define MT_CKPT_DIR_H

#include "io/ckpt_format.h"
#include "io/ckpt_read.h"

/* DIR/ckpt-<step>.h5 into buf; fails (MT_ERR_ARG) when it does not fit. */
int mt_ckpt_path(const char *dir, int64_t step, char *buf, size_t cap);

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

/* At a run's start, before training, when it will write checkpoints into
 * DIR (collective, rank 0 looks): makes DIR, and fails with MT_ERR_FILE
 * when DIR is not writable (access and a probe file; a read-only file
 * system or a permission named as such). A fresh run (fresh != 0) into a
 * DIR that holds checkpoints (ckpt-<step>.h5) of an earlier run fails with
 * MT_ERR_OPTION naming them (the count and the newest) and the ways on
 * (-restart auto, another -checkpoint_dir, -checkpoint_overwrite); with
 * overwrite they (and their .tmp files and DIR/latest) are removed, said
 * in one line on stdout. */
int mt_ckpt_dir_prepare(MPI_Comm comm, const char *dir, int fresh, int overwrite);

/* ------------------------------------------ for mt_ckpt_save (one rank) */

/* mkdir -p DIR (mode 0777 less the umask); fails with MT_ERR_FILE naming
 * DIR and the part that could not be made, or when DIR is not a directory
 * after, MT_ERR_ARG when the name is too long. */
int mt_ckpt_mkdir_p(const char *dir);
/* fsync of a file (or, dir != 0, a directory; a file system that cannot
 * sync directories is not an error). Fails with MT_ERR_FILE naming path. */
int mt_ckpt_sync_path(const char *path, int dir);
/* Rank 0: DIR/latest names file (via latest.tmp and a rename), and DIR is
 * synced. Fails with MT_ERR_FILE naming the file at fault; latest.tmp is
 * removed then, and DIR/latest is the old one or the new one. */
int mt_ckpt_write_latest(const char *dir, const char *file);
/* Rank 0, after ckpt-<written>.h5 was published: keeps the newest keep
 * checkpoints of this run (keep <= 0: all), the one just written among
 * them whatever the other step numbers, and removes the rest of this run's
 * and the stale .tmp files. A checkpoint is this run's when its run_id
 * attribute (a serial HDF5 open) equals run_id; another run's, one without
 * a run_id (an older file) and an unreadable one (named once in a warning
 * per process) are never removed, nor counted. An empty or NULL run_id
 * removes no checkpoint. Failures are warnings on stderr: the new
 * checkpoint is complete. */
void mt_ckpt_prune(const char *dir, int keep, const char *run_id, int64_t written);

#endif
