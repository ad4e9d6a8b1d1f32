/* Data: HDF5 data sets, the distributed sampler, the prefetching loader. */
#ifndef MT_DATA_H
#define MT_DATA_H

#include "core/core.h"

#include <hdf5.h>

/* A classification data set: /x (N, ...) float32 or uint8 (+ attribute
 * `scale`, default 1/255), /y (N) integer labels (+ attribute `nclasses`). */
typedef struct {
  char path[MT_PATH_MAX];
  hid_t file, dx;
  int64_t n;
  mt_data_spec spec;
  int x_uint8;
  float scale;
  int32_t *labels; /* all N labels, read once                             */
} mt_dataset;

/* Opens and validates path on every rank of comm; fails on every rank if it
 * fails on any, with a message naming the file. nclasses > 0 requires the
 * labels to lie in [0, nclasses) and the sample shape to equal like->shape
 * when like != NULL (validation sets must match the training set). */
int mt_dataset_open(mt_dataset *d, const char *path, MPI_Comm comm, const mt_data_spec *like);
void mt_dataset_close(mt_dataset *d);
/* Reads rows idx[0..n) (ascending) into x (n, sample_numel) and y (n).
 * scratch holds n * sample_numel bytes (uint8 files). Takes the HDF5 lock. */
int mt_dataset_read(mt_dataset *d, const int64_t *idx, int n, float *x, int32_t *y,
                    uint8_t *scratch);

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
