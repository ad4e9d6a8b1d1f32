/* Per-sample outputs: one HDF5 file per evaluated set and epoch, written
 * collectively by every rank of a communicator (MPI-IO driver, collective
 * transfers). Each rank writes its own rows as one disjoint hyperslab at the
 * offset the ranks before it take (MPI_Exscan); no rank gathers the rows of
 * another. The trainer names the files OUTPUT_DIR/outputs/val0-epoch3.h5,
 * train-epoch3.h5, test0.h5 (src/trainer/validate.c).
 *
 * File layout (attribute format = MT_OUTPUTS_FORMAT). R rows, one per
 * evaluated sample, in data-set order (index ascending), each sample once:
 *
 *   /index    int64 (R)      the sample's position in the data file
 *   /label    int32 (R)      its class label; -1 for token data
 *   /pred     int32 (R)      the top-1 prediction (argmax of the logits, the
 *                            first of equal maxima); -1 for token data
 *   /loss     float32 (R)    its loss: softmax cross-entropy, or for token
 *                            data the mean over its T target tokens
 *   /logits   float32 (R, C) with -outputs_logits (class data only)
 *   /probs    float32 (R, C) the softmax of the logits (-mode predict
 *             -outputs_probs)
 *   /values   float32 (R, K) a regression model's predicted targets
 *             (-mode predict), in place of /logits
 *             (/loss, /logits, /probs and /values are float64 under
 *             -precision fp64)
 *   -mode predict of a file without /y writes no /label and no /loss.
 *   /         attributes: format, set ("val", "train", "test"), set_index
 *             (-1 for train; "predict" for -mode predict), data_file, samples_in_file (N), rows (R),
 *             epoch (epochs completed when evaluated), global_step, model,
 *             world_size, mpitrain_version
 *
 * R is N unless -max_val_steps_per_epoch cut each rank's block short: then
 * the file holds exactly the evaluated rows, compacted, still ascending.
 *
 * Crash safety: PATH.tmp is written and closed by all ranks, then rank 0
 * renames it to PATH; a failure removes the .tmp. A file at PATH is always
 * complete.
 *
 * Errors: the functions that take a communicator are collective and agree
 * (mt_agree): a failure on one rank is a failure on all, never a hang, also
 * when ranks hold different numbers of rows (a rank with none selects
 * nothing and still joins every collective write). */
#ifndef MT_OUTPUTS_H
#define MT_OUTPUTS_H

#include "io/io.h"

#define MT_OUTPUTS_FORMAT "mpitrain-outputs-1"

/* This rank's rows: rows may be 0 (then the pointers may be NULL). index is
 * strictly ascending and above every index of the ranks before (checked).
 * logits is (rows, logits_len), logits_len the same on every rank; 0 and
 * NULL when not written (probs too). loss and logits are float (dtype MT_FP32, zero)
 * or double (MT_FP64), the same on every rank. */
typedef struct {
  int64_t rows;
  const int64_t *index;
  const int32_t *label, *pred;
  const void *loss;
  const void *logits;
  int logits_len;
  mt_dtype dtype;
  /* the same on every rank: no /label nor /loss (label and loss may be
   * NULL); the logits' softmax in probs (rows, logits_len) as /probs; the
   * logits written as /values (a regression's outputs) */
  int unlabelled, with_probs, values;
  const void *probs;
} mt_outputs_rows;

/* What the file says about itself; the same on every rank (strings may be
 * NULL, stored as ""). */
typedef struct {
  const char *set;       /* "val", "train", "test"                          */
  int set_index;         /* which -data_val / -data_test set; -1 for train */
  const char *data_file;
  int64_t samples_in_file;
  int epoch;             /* epochs completed when evaluated                 */
  long global_step;
  const char *model;
} mt_outputs_meta;

/* Rows per collective write are at most this many bytes' worth (the same on
 * every rank; a tuning knob, tests lower it to force several rounds). */
extern int64_t mt_outputs_chunk_bytes;

/* Writes the rows of every rank of comm into the new file path (its folder
 * made when needed; an older file replaced), as described above. */
int mt_outputs_write(MPI_Comm comm, const char *path, const mt_outputs_meta *meta,
                     const mt_outputs_rows *r);

/* One test set's result after training. */
typedef struct {
  int set;
  const char *file;
  int epoch;
  long global_step;
  double loss, acc;
  int64_t samples;
} mt_test_row;

/* Writes DIR/test.csv (replaced): a header line and one line per set,
 * set,file,epoch,step,loss,accuracy,samples. Rank 0 only (not collective). */
int mt_test_csv_write(const char *dir, const mt_test_row *rows, int n);

#endif
