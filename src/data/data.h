/* Data: HDF5 data sets, the distributed sampler, the prefetching loader. */
#ifndef MT_DATA_H
#define MT_DATA_H

#include "core/core.h"

#include <hdf5.h>

/* A data set: either classification, /x (N, ...) float32 or uint8
 * (+ attribute `scale`, default 1/255) and /y (N) integer labels
 * (+ attribute `nclasses`); or regression, the same /x and /y float (N) or
 * (N,K) targets; or a language-model token file, /tokens (M)
 * integers (+ attribute `vocab_size`, default 256), whose samples are the
 * N = floor((M - 1) / T) windows tokens[iT, iT + T] of T + 1 tokens. */
typedef struct {
  char path[MT_PATH_MAX];
  hid_t file, dx; /* dx: /x, or /tokens                                  */
  int64_t n;
  mt_data_spec spec;
  int x_uint8;
  float scale;
  int32_t *labels; /* all N labels, read once (classification)            */
  float *targets;  /* all N x K targets, read once (regression)           */
  int window;      /* T (tokens)                                          */
  int unlabelled;  /* opened without /y (mt_dataset_how.unlabelled)       */
  /* rows of /x read straight from the file (contiguous, unfiltered, of the
   * memory's byte order): pread at x_offset + row * row bytes, no HDF5 */
  int direct, fd;
  int64_t x_offset;
  char *x_mem; /* a direct /x whole in memory (mt_dataset_hold), or NULL */
} mt_dataset;

/* The most classes (or tokens of a vocabulary, or float targets of a sample)
 * a file may declare: the model's output layer is sized by it, and a file
 * that asks for more (an nclasses attribute of 1e8, a label of 2^31 - 1) is
 * far likelier broken than meant; refused by name before anything is sized. */
#define MT_DATA_MAX_CLASSES (1 << 24)
/* The most values one sample may hold: the models index a sample with int. */
#define MT_DATA_MAX_SAMPLE_NUMEL INT32_MAX

/* -data_check: which rows of a float /x are checked for NaN and Inf at open
 * (a uint8 /x's scale and float /y targets are always checked whole). The
 * sample is MT_DATA_CHECK_ROWS rows (fewer for wide rows) in 8 blocks spread
 * evenly over the file, the first and last rows included; a file that small
 * is checked whole. Each rank checks every world-th block. */
typedef enum { MT_DATA_CHECK_SAMPLE, MT_DATA_CHECK_FULL, MT_DATA_CHECK_NONE } mt_data_check;
#define MT_DATA_CHECK_ROWS 4096

/* Opens and validates path on every rank of comm; fails on every rank if it
 * fails on any, with a message naming the file. like != NULL (validation
 * sets) requires the training set's kind, sample shape and classes (or
 * vocabulary). window is T for token files (ignored otherwise). check:
 * which rows of a float /x are scanned for non-finite values. */
int mt_dataset_open(mt_dataset *d, const char *path, MPI_Comm comm, const mt_data_spec *like,
                    int window, mt_data_check check);
/* How mt_dataset_open_as opens a file: like, window and check as above;
 * like_what names like's owner in messages (NULL: "the training set"),
 * and when given a file whose nclasses attribute differs from like's is
 * refused (a validation set's is overridden by the training set's);
 * unlabelled (-mode predict, with like): a file of /x without /y is taken,
 * of like's kind, with labels (or targets) of zeros that nothing reports,
 * and d->unlabelled set. */
typedef struct {
  const mt_data_spec *like;
  const char *like_what;
  int window;
  mt_data_check check;
  int unlabelled;
} mt_dataset_how;
int mt_dataset_open_as(mt_dataset *d, const char *path, MPI_Comm comm, const mt_dataset_how *how);
void mt_dataset_close(mt_dataset *d);
/* Reads a direct /x (above) of at most max_bytes whole into memory, from
 * where mt_dataset_read then copies a batch's rows: no read call per row
 * (on Fashion-MNIST's 128-row batches the reader thread's preads took 0.24
 * ms of a 5.2-ms step, a core the step's threads wanted). Nothing for
 * other files or larger ones; in the allocator's plan mode it only counts
 * the bytes. mt_dataset_unhold (and mt_dataset_close) free them. */
int mt_dataset_hold(mt_dataset *d, double max_bytes);
void mt_dataset_unhold(mt_dataset *d);
/* Bytes of scratch mt_dataset_read needs for n rows. */
size_t mt_dataset_scratch_size(const mt_dataset *d, int n);
/* Reads rows idx[0..n) (ascending): classification into x (n, sample_numel)
 * and y (n); regression into x and targets (n, ntargets); tokens into tokens (n, T + 1), each checked against the
 * vocabulary. Takes the HDF5 lock. */
int mt_dataset_read(mt_dataset *d, const int64_t *idx, int n, float *x, int32_t *y,
                    float *targets, int32_t *tokens, void *scratch);

/* The per-epoch permutation of 0..n-1 from (seed, epoch): Fisher-Yates driven
 * by the counter-based generator, identical on every rank. */
void mt_sampler_permutation(uint64_t seed, int epoch, int64_t n, int64_t *perm);
/* Global steps in a training epoch: floor(n / global_batch) (the last partial
 * batch is dropped, so every rank runs the same steps), capped by max (>0). */
int64_t mt_sampler_train_steps(int64_t n, int global_batch, int64_t max);
/* Rows of the permutation that rank `rank` uses in micro-step `micro` of
 * global step `step`: [*first, *first + micro_batch). The global batch of a
 * step is the contiguous range [step*B, (step+1)*B) of the permutation; rank
 * r owns the r-th 1/world of it, split into micro-batches. */
int64_t mt_sampler_train_first(int64_t step, int global_batch, int world, int rank, int micro,
                               int micro_batch);
/* Validation: the contiguous block of samples of rank r, every sample exactly
 * once over all ranks (sizes differ by at most one). */
void mt_sampler_val_block(int64_t n, int rank, int world, int64_t *start, int64_t *count);
/* The same in whole pieces of piece samples (the last one short): rank r
 * takes the r-th share of the pieces (the evaluation passes' blocks,
 * src/trainer/trainer.h: a piece is never split between ranks). */
void mt_sampler_val_pieces(int64_t n, int64_t piece, int rank, int world, int64_t *start,
                           int64_t *count);

/* Prefetching loader: hands out a planned sequence of batches; with prefetch
 * on, a thread reads batch b+1 while the caller computes on batch b. */
typedef struct mt_loader mt_loader;
int mt_loader_create(mt_loader **L, mt_dataset *d, int max_rows, int prefetch);
/* Plans nb batches: batch b is rows idx[off_b .. off_b + counts[b]) (copied;
 * sorted here). Waits for any previous plan to finish. */
int mt_loader_start(mt_loader *L, const int64_t *idx, const int *counts, int nb);
/* The next batch of the plan; valid until the following call. */
int mt_loader_next(mt_loader *L, mt_batch *b);
void mt_loader_destroy(mt_loader **L);

#endif
