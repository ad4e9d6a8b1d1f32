/* Random numbers, hashing, timing, collective agreement on errors. */
#include "core/core.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t mt_rand64(uint64_t key, uint64_t counter) {
  /* Two rounds of splitmix64 finalisation over a key-dependent counter:
   * passes through every counter value once per key (a bijection). */
  uint64_t z = counter * 0x9e3779b97f4a7c15ULL + mix64(key ^ 0x632be59bd9b4e019ULL);
  return mix64(mix64(z) ^ key);
}

uint64_t mt_key(uint64_t seed, uint64_t purpose, uint64_t a) {
  return mix64(mix64(mix64(seed) ^ (purpose * 0xd6e8feb86659fd93ULL)) ^ a);
}

uint64_t mt_hash_bytes(const void *p, size_t n, uint64_t h) {
  const unsigned char *c = p;
  if (!h) h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= c[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static double launch_;
void mt_mark_launch(void) { launch_ = mt_now(); }
double mt_since_launch(void) { return launch_ > 0 ? mt_now() - launch_ : 0.0; }

double mt_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static _Thread_local int agreed_;
int mt_error_is_collective(void) { return agreed_ && mt_error_message()[0]; }

static int agree(MPI_Comm comm, int err);
int mt_agree(MPI_Comm comm, int err) {
  int e = agree(comm, err);
  agreed_ = e != 0;
  return e;
}

static int agree(MPI_Comm comm, int err) {
  int rank, size;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  MT_MPI(MPI_Comm_size(comm, &size));
  /* lowest failing rank, or size if none */
  int mine = err ? rank : size, first = size;
  MT_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return 0;
  int code = err;
  MT_MPI(MPI_Bcast(&code, 1, MPI_INT, first, comm));
  if (first != 0) {
    char buf[1024];
    if (rank == first) snprintf(buf, sizeof(buf), "%s", mt_error_message());
    if (rank == first)
      MT_MPI(MPI_Send(buf, (int)sizeof(buf), MPI_CHAR, 0, 77, comm));
    else if (rank == 0) {
      MT_MPI(MPI_Recv(buf, (int)sizeof(buf), MPI_CHAR, first, 77, comm, MPI_STATUS_IGNORE));
      mt_error_clear();
      return mt_error_set(__FILE__, __LINE__, __func__, code, "rank %d: %s", first, buf);
    }
  }
  if (!err) return mt_error_set(__FILE__, __LINE__, __func__, code, "rank %d failed", first);
  return code;
}

void mt_print0(const char *fmt, ...) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}

size_t mt_first_nonfinite(mt_dtype dtype, const void *x, size_t n) {
  /* x - x is 0 exactly when x is finite: one subtraction and compare per
   * element, no branch per element inside a block */
  const size_t blk = 4096;
  for (size_t k = 0; k < n; k += blk) {
    const size_t m = n - k < blk ? n - k : blk;
    int bad = 0;
    if (dtype == MT_FP64) {
      const double *d = (const double *)x + k;
      for (size_t i = 0; i < m; i++) bad |= (d[i] - d[i]) != 0.0;
    } else {
      const float *f = (const float *)x + k;
      for (size_t i = 0; i < m; i++) bad |= (f[i] - f[i]) != 0.0f;
    }
    if (!bad) continue;
    for (size_t i = 0; i < m; i++) {
      const double v = dtype == MT_FP64 ? ((const double *)x)[k + i] : ((const float *)x)[k + i];
      if (!isfinite(v)) return k + i;
    }
  }
  return n;
}

const char *mt_nonfinite_name(mt_dtype dtype, const void *x, size_t i) {
  const double v = dtype == MT_FP64 ? ((const double *)x)[i] : ((const float *)x)[i];
  return isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf";
}
