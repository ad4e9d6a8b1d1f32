/* Every rank must resolve the same configuration (a per-rank environment,
 * PETSC_OPTIONS or an MPMD launch can make them differ). The check is one
 * hash; only when the hashes differ are the ranks' option tables gathered
 * to rank 0, so that the message names the options that differ and the
 * ranks that hold each value. */
#include "config/mt_config.h"
#include "core/core.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* This rank's options read, as "name\0value\0" pairs (core/options.c). */
static int pack(char **out, int *len) {
  size_t n = 0;
  const char *v;
  int set;
  for (int i = 0; i < mt_option_count(); i++) {
    const char *name = mt_option_read(i, &v, &set);
    if (name) n += strlen(name) + strlen(v) + 2;
  }
  MT_CHECK(n < (size_t)1 << 30, MT_ERR_STATE, "option table too large to compare");
  char *buf;
  MT_CALL(mt_calloc(&buf, n + 1, 1, "option table"));
  size_t k = 0;
  for (int i = 0; i < mt_option_count(); i++) {
    const char *name = mt_option_read(i, &v, &set);
    if (!name) continue;
    memcpy(buf + k, name, strlen(name) + 1);
    k += strlen(name) + 1;
    memcpy(buf + k, v, strlen(v) + 1);
    k += strlen(v) + 1;
  }
  *out = buf;
  *len = (int)n;
  return 0;
}

/* The value of option name in the pairs p[0..n), or NULL (not read there). */
static const char *lookup(const char *p, int n, const char *name) {
  for (int k = 0; k < n;) {
    const char *nm = p + k, *v = nm + strlen(nm) + 1;
    if (!strcmp(nm, name)) return v;
    k = (int)(v + strlen(v) + 1 - p);
  }
  return NULL;
}

static void put(char *buf, size_t len, size_t *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *k, const char *fmt, ...) {
  if (*k >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *k, len - *k, fmt, ap);
  va_end(ap);
  if (w > 0) *k += (size_t)w;
}

/* "rank 2" or "ranks 0-1,3": the ranks r (in order) whose value is v. */
static void put_ranks(char *buf, size_t len, size_t *k, const char **val, int size,
                      const char *v) {
  int count = 0;
  for (int r = 0; r < size; r++) count += val[r] == v;
  put(buf, len, k, " on rank%s ", count > 1 ? "s" : "");
  int first = 1;
  for (int r = 0; r < size; r++) {
    if (val[r] != v || (r > 0 && val[r - 1] == v)) continue;
    int e = r;
    while (e + 1 < size && val[e + 1] == v) e++;
    put(buf, len, k, e > r ? "%s%d-%d" : "%s%d", first ? "" : ",", r, e);
    first = 0;
  }
}

/* Whether r is the first rank holding val[r]. */
static int first_of(const char **val, int r) {
  for (int q = 0; q < r; q++)
    if (val[q] == val[r]) return 0;
  return 1;
}

/* One option's difference: "-lr is 0.01 on rank 0 and 0.5 on rank 1".
 * val[r] is the value on rank r (NULL: not read there); equal values are
 * made the same pointer first, so that ranks group by pointer. */
static void describe(char *buf, size_t len, size_t *k, const char *name, const char **val,
                     int size) {
  static const char none[] = "not read";
  for (int r = 0; r < size; r++) {
    if (!val[r]) val[r] = none;
    for (int q = 0; q < r; q++)
      if (!strcmp(val[q], val[r])) {
        val[r] = val[q];
        break;
      }
  }
  int ngroups = 0;
  for (int r = 0; r < size; r++) ngroups += first_of(val, r);
  put(buf, len, k, "%s is ", name);
  int g = 0;
  for (int r = 0; r < size && g < 4; r++) {
    if (!first_of(val, r)) continue;
    if (g) put(buf, len, k, g + 1 == ngroups ? " and " : ", ");
    put(buf, len, k, val[r] == none ? "%s" : "%.80s", val[r]);
    put_ranks(buf, len, k, val, size, val[r]);
    g++;
  }
  if (g < ngroups) put(buf, len, k, " and %d other values", ngroups - g);
}

int mt_config_check_same(MPI_Comm comm, const mt_config *cfg) {
  uint64_t h = mt_hash_bytes(cfg, sizeof(*cfg), mt_option_hash()), lo = h, hi = h;
  MT_MPI(MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, comm));
  MT_MPI(MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, comm));
  if (lo == hi) return 0;
  /* they differ: gather every rank's options read to rank 0 and name those
   * that differ (the error path only, so the cost does not matter) */
  int rank, size, len = 0, err = 0;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  MT_MPI(MPI_Comm_size(comm, &size));
  char *mine = NULL, *all = NULL;
  int *lens = NULL, *offs = NULL;
  const char **val = NULL, **extra = NULL;
  err = pack(&mine, &len);
  if (!err && rank == 0) err = mt_calloc(&lens, (size_t)size, sizeof(int), "option tables");
  if (!err && rank == 0) err = mt_calloc(&offs, (size_t)size, sizeof(int), "option tables");
  if (!err && rank == 0) err = mt_calloc(&val, (size_t)size, sizeof(*val), "option tables");
  if ((err = mt_agree(comm, err))) goto done;
  MT_MPI(MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, comm));
  long total = 0;
  if (rank == 0)
    for (int r = 0; r < size; r++) {
      offs[r] = (int)total;
      total += lens[r];
    }
  if (rank == 0 && total >= INT_MAX)
    err = MT_ERR(MT_ERR_STATE, "option tables too large to compare");
  if (!err && rank == 0) err = mt_calloc(&all, (size_t)total + 1, 1, "option tables");
  /* an entry is at least 4 bytes ("-x\0\0") */
  if (!err && rank == 0) err = mt_calloc(&extra, (size_t)total / 4 + 1, sizeof(*extra), "option tables");
  if ((err = mt_agree(comm, err))) goto done;
  MT_MPI(MPI_Gatherv(mine, len, MPI_CHAR, all, lens, offs, MPI_CHAR, 0, comm));
  char msg[900];
  size_t k = 0;
  int ndiff = 0, nextra = 0;
  msg[0] = '\0';
  /* each option once: rank 0's, then those only other ranks read (kept in
   * extra, so that the cost grows with the ranks, not their square) */
  for (int r = 0; rank == 0 && r < size; r++)
    for (int p = 0; p < lens[r];) {
      const char *name = all + offs[r] + p, *v = name + strlen(name) + 1;
      p = (int)(v + strlen(v) + 1 - (all + offs[r]));
      int seen = r > 0 && lookup(all, lens[0], name) != NULL, same = 1;
      for (int e = 0; r > 0 && !seen && e < nextra; e++) seen = !strcmp(extra[e], name);
      if (seen) continue;
      if (r > 0) extra[nextra++] = name;
      for (int q = 0; q < size; q++) {
        val[q] = lookup(all + offs[q], lens[q], name);
        same &= val[q] && !strcmp(val[q], v);
      }
      if (same) continue;
      if (ndiff++ < 4) {
        put(msg, sizeof(msg), &k, "%s", ndiff > 1 ? "; " : "");
        describe(msg, sizeof(msg), &k, name, val, size);
      }
    }
  if (ndiff > 4) put(msg, sizeof(msg), &k, "; and %d more options", ndiff - 4);
  if (rank == 0 && ndiff)
    err = MT_ERR(MT_ERR_OPTION, "ranks resolved different configurations: %s; check per-rank "
                 "environment options such as PETSC_OPTIONS", msg);
  else if (rank == 0) /* the same options, but what was derived from them differs */
    err = MT_ERR(MT_ERR_OPTION, "ranks resolved different configurations from the same options "
                 "(hash %016llx on rank 0); check per-rank environment options such as "
                 "PETSC_OPTIONS", (unsigned long long)h);
  else
    err = MT_ERR(MT_ERR_OPTION, "ranks resolved different configurations");
  err = mt_agree(comm, err);
done:
  mt_free(&mine);
  mt_free(&all);
  mt_free(&lens);
  mt_free(&offs);
  mt_free(&val);
  mt_free(&extra);
  return err;
}
