/* Internal core, the ground floor: allocation bookkeeping, counter-based
 * random numbers, timing, hashing, collective agreement and rank 0's
 * printing. The resolved configuration is src/config/mt_config.h. */
#ifndef MT_CORE_H
#define MT_CORE_H

#include "mpitrain/mpitrain.h"

#include <stdint.h>
#include <stdio.h>

#define MT_PATH_MAX 1024
#define MT_MAX_VAL 8
#define MT_MAX_HIDDEN 16

/* Bytes held by mt_calloc's blocks now (alloc.c). */
size_t mt_alloc_bytes(void);

/* The allocator's plan mode (alloc.c), a dry run of a setup that learns
 * what it would allocate without allocating it (the memory forecast,
 * trainer/memory.c): between begin and end, on the calling thread,
 * mt_calloc of a block of MT_ALLOC_PLAN_MIN bytes or more counts it and
 * succeeds with *ptr NULL; smaller blocks (a setup's own structs, tables)
 * are allocated as usual and counted too. end returns the bytes counted;
 * the dry-run object is then destroyed as usual (mt_free takes NULL). A
 * setup run dry must not write into a large block it allocated (they come
 * zeroed): the built-in models, the optimizers and fsdp's shards don't. */
#define MT_ALLOC_PLAN_MIN ((size_t)1 << 16)
void mt_alloc_plan_begin(void);
size_t mt_alloc_plan_end(void);
/* In plan mode, forgets what was counted so far: for a setup that destroys
 * what it made dry and makes it again otherwise (frees count nothing in
 * plan mode). Nothing outside it. */
void mt_alloc_plan_restart(void);

/* The node's physical memory in bytes (sysmem.c; 0 if unknown), and the
 * memory limit of the process's cgroup read from proc_cgroup (normally
 * /proc/self/cgroup) under the cgroup file systems' root (/sys/fs/cgroup):
 * v2's memory.max (also under root/unified), v1's
 * memory/.../memory.limit_in_bytes, the smallest of the process's cgroup
 * and those above it; 0 when none is set ("max") or none is readable. */
double mt_sys_node_memory(void);
double mt_sys_cgroup_limit(const char *proc_cgroup, const char *root);

/* 64-bit FNV-1a hash of bytes. */
uint64_t mt_hash_bytes(const void *p, size_t n, uint64_t h);
/* A whole decimal integer / a finite number, the whole of s (leading blanks
 * allowed): 0, or -1 when s is not one (options.c; the option readers'). */
int mt_parse_long(const char *s, long *v);
int mt_parse_double(const char *s, double *v);
/* 1 when the comma-separated list s has an empty or blank entry ("a,,b",
 * ",a", "a,", "a, ,b"); 0 for "" (no entries) and a list without one:
 * strtok_r would drop such an entry silently. */
int mt_list_empty_entry(const char *s);
/* Hash of the names and values read through mt_option_* so far. */
uint64_t mt_option_hash(void);
/* The options read so far (through mt_option_* and the configuration's own
 * readers), each once with its latest value (the default when not given;
 * set: given by the user): mt_option_record adds or updates one;
 * mt_option_read returns the i-th name (0 <= i < mt_option_count()) and its
 * value, or NULL. Used to name the options that differ between ranks. */
void mt_option_record(const char *name, const char *value, int set);
int mt_option_count(void);
const char *mt_option_read(int i, const char **value, int *set);

/* Counter-based generator: a pure function of (key, counter), so any rank
 * can draw the same numbers with no communication and a restart reproduces
 * them from the position alone. */
uint64_t mt_rand64(uint64_t key, uint64_t counter);
/* Uniform in [0,1) with 24 random bits (the float grid). */
static inline float mt_randu(uint64_t key, uint64_t counter) {
  return (float)(mt_rand64(key, counter) >> 40) * (1.0f / 16777216.0f);
}
uint64_t mt_key(uint64_t seed, uint64_t purpose, uint64_t a);

/* Monotonic wall clock in seconds. */
double mt_now(void);
/* Seconds since mt_mark_launch (called by mt_main right after MPI_Init). */
void mt_mark_launch(void);
double mt_since_launch(void);

/* An exact sum of doubles (xsum.c): the same values added in any order,
 * grouping or split over ranks give the same bits, because nothing is
 * rounded until mt_xsum_value rounds the exact sum once (to nearest).
 * Evaluation passes sum their per-sample losses so, and their results do
 * not depend on the ranks, threads or batches that computed them. NaN and
 * infinities are summed apart (in any order the same). Plain data:
 * zero it with mt_xsum_zero; mt_xsum_allreduce sums every rank's into
 * every rank's (collective, MPI_SUM on integers); mt_xsum_merge adds o
 * into s. */
#define MT_XSUM_DIGITS 70
typedef struct {
  int64_t d[MT_XSUM_DIGITS]; /* base 2^32 digits of the sum / 2^-1074     */
  int64_t adds;              /* additions since the last carry             */
  double special;            /* the sum of the non-finite values           */
} mt_xsum;
void mt_xsum_zero(mt_xsum *s);
void mt_xsum_add(mt_xsum *s, double v);
void mt_xsum_merge(mt_xsum *s, const mt_xsum *o);
int mt_xsum_allreduce(mt_xsum *s, MPI_Comm comm);
double mt_xsum_value(const mt_xsum *s);

/* Collective agreement: returns 0 on every rank if err == 0 on all ranks,
 * otherwise MT_ERR_* on every rank; the message of the lowest failing rank
 * is sent to rank 0 (and recorded there) so rank 0 can print it once. */
int mt_agree(MPI_Comm comm, int err);
/* The index of the first NaN or infinity of x[0, n) (float, or double for
 * MT_FP64), or n: no checkpoint or model file is written from, and no run
 * restarted from, non-finite values. */
size_t mt_first_nonfinite(mt_dtype dtype, const void *x, size_t n);
/* "NaN", "inf" or "-inf": the value x[i], for messages. */
const char *mt_nonfinite_name(mt_dtype dtype, const void *x, size_t i);
/* Whether the recorded error came out of mt_agree (every rank holds it). */
int mt_error_is_collective(void);

/* Prints only on rank 0 of MPI_COMM_WORLD. */
void mt_print0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
