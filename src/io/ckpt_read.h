/* Checkpoint files, reading: the collective read of a checkpoint on any
 * number of ranks (open, check the header and every tensor against the
 * caller's table, read each rank's slices, verify the checksums, reshard:
 * all-gather a replicated layout, zero the padding) in ckpt_read.c, and the
 * check of a file without a table (mt_ckpt_verify) in ckpt_verify.c.
 * Above ckpt_format, ckpt_state and ckpt_plan; below ckpt_dir. */
#ifndef MT_CKPT_READ_H
#define MT_CKPT_READ_H

#include "io/ckpt_format.h"
#include "io/ckpt_plan.h"
#include "io/ckpt_state.h"

/* What a checkpoint says about itself (mt_ckpt_read). Free with
 * mt_ckpt_info_free. */
typedef struct {
  int format, world_size;
  char version[32];
  char backend[64];
  char created[32];
  char run_id[32];                        /* "" in a file older than it     */
  char *options;                          /* owned                          */
  int nbufs;                              /* buffer groups in the file      */
  char bufs[MT_CKPT_MAX_BUFS][MT_NAME_MAX];
} mt_ckpt_info;

/* Frees info's options and zero-fills it; info may be NULL. */
void mt_ckpt_info_free(mt_ckpt_info *info);

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

/* ----------------------------------- shared by ckpt_read.c, ckpt_verify.c */

/* Opens the checkpoint path read-only on every rank of comm (collective,
 * agrees) with the MPI-IO access list *fapl. *fapl and *file are
 * H5I_INVALID_HID or the caller's to close (H5Pclose *fapl also after a
 * failure; *file is open only on success). Fails naming the file:
 * MT_ERR_ARG (no name), MT_ERR_FILE (missing, unreadable, not HDF5),
 * MT_ERR_HDF5. Under mt_h5_lock(). */
int mt_ckpt_open(MPI_Comm comm, const char *path, hid_t *fapl, hid_t *file);
/* Reads the root attributes of the open checkpoint f into info (zero-filled
 * on entry; its options string is allocated: mt_ckpt_info_free) and lists
 * its buffer groups. Checks the format version and the checksum algorithm.
 * Not collective: every rank calls it alike. Fails with MT_ERR_DATA (or
 * MT_ERR_MEM) naming path. */
int mt_ckpt_read_header(hid_t f, const char *path, mt_ckpt_info *info);

#endif
