/* The distributed sampler: a pure function of (seed, epoch, step, rank), so
 * every rank knows every rank's samples with no communication. */
#include "data/data.h"

#define MT_PURPOSE_SAMPLER 1

void mt_sampler_permutation(uint64_t seed, int epoch, int64_t n, int64_t *perm) {
  const uint64_t key = mt_key(seed, MT_PURPOSE_SAMPLER, (uint64_t)epoch);
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    /* unbiased enough: 64 random bits scaled to [0, i] */
    uint64_t r = mt_rand64(key, (uint64_t)i);
    int64_t j = (int64_t)(((unsigned __int128)r * (unsigned __int128)(i + 1)) >> 64);
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

int64_t mt_sampler_train_steps(int64_t n, int global_batch, int64_t max) {
  int64_t s = n / global_batch;
  return (max > 0 && max < s) ? max : s;
}

int64_t mt_sampler_train_first(int64_t step, int global_batch, int world, int rank, int micro,
                               int micro_batch) {
  return step * global_batch + (int64_t)rank * (global_batch / world) +
         (int64_t)micro * micro_batch;
}

void mt_sampler_val_block(int64_t n, int rank, int world, int64_t *start, int64_t *count) {
  int64_t a = n * rank / world, b = n * (rank + 1) / world;
  *start = a;
  *count = b - a;
}

void mt_sampler_val_pieces(int64_t n, int64_t piece, int rank, int world, int64_t *start,
                           int64_t *count) {
  const int64_t np = (n + piece - 1) / piece;
  const int64_t a = piece * (np * rank / world), b = piece * (np * (rank + 1) / world);
  *start = a < n ? a : n;
  *count = (b < n ? b : n) - *start;
}
