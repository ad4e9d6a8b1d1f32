/* fuzz: a bounded, deterministic fuzzer of everything a user hands mpitrain
 * (issue 19): option lines, data files and checkpoints. One MPI process,
 * MPI and PETSc initialised once, a loop of cases in-process so that 10,000
 * cases fit in minutes under AddressSanitizer + UBSan.
 *
 *   fuzz --work DIR --corpus FILE [--seed S] [--cases N | --case K]
 *        [--first K] [--minutes M] [--case_seconds T] [--verbose 1] [--keep 1]
 *        [--flip_metadata 1]
 *
 * DIR holds the seed files that tests/fuzz.sh makes (train.h5, img.h5,
 * reg.h5, tokens.h5 if any, ckpt.h5) and the cases' scratch files. FILE has
 * one seed option line a line (valid runs); @DIR@ in it is DIR. Case K of
 * seed S is a pure function of (S, K): `--seed S --case K` replays it.
 *
 * A case is one of:
 *   options     a seed line mutated (options dropped, duplicated, swapped,
 *               renamed, values replaced by boundary values: 0, -1, 2^31,
 *               1e308, nan, inf, empty, 2000 characters, commas, words);
 *               mt_config_from_options, and when that succeeds and the run
 *               is short (epochs, steps), mt_trainer_create/run/destroy
 *   data        a seed data file copied and mutated (bytes of the stored
 *               data flipped (--flip_metadata 1: any past the superblock,
 *               where libhdf5 itself can crash), the file truncated, or
 *               through the HDF5 API: /x or /y replaced by another shape and type, values NaN/Inf/huge,
 *               attributes nclasses/scale/vocab_size deleted or set to
 *               boundary values), then mt_dataset_open and a few batches
 *               through the loader, sometimes a short training run on it
 *   checkpoint  the seed checkpoint copied and mutated the same ways (root
 *               attributes format/world_size/checksum_algorithm, a tensor's
 *               checksum, shape or type, trainer_state entries), then
 *               mt_ckpt_verify at both levels, mt_ckpt_read of the header
 *               and state, and a 1-step -restart from it
 * An error return is the expected outcome of most cases (a clean refusal);
 * a crash or sanitizer report ends the process (tests/fuzz.sh reads the
 * case from DIR/progress and goes on after it); a case that takes longer
 * than --case_seconds (20) is a hang: the watchdog prints the case and
 * exits 124. At the end: one line `fuzz: ... N cases, E errors (clean
 * refusals), R runs trained, 0 crashes, 0 hangs`. */
#define _GNU_SOURCE /* nftw */
#include "comm/comm.h"
#include "config/mt_config.h"
#include "core/core.h"
#include "data/data.h"
#include "io/checkpoint.h"
#include "io/io.h"
#include "trainer/trainer.h"

#include <fcntl.h>
#include <ftw.h>
#include <hdf5.h>
#include <omp.h>
#include <petscsys.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAXOPT 96
#define MAXLINES 64
#define LINE_MAX_LEN 16384

typedef struct {
  uint64_t s;
} rng;
static uint64_t next(rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int below(rng *r, int n) { return n > 0 ? (int)(next(r) % (uint64_t)n) : 0; }

static const char *work;
static char lines[MAXLINES][1024];
static int nlines;
static mt_comm comm;
static long stat_errors, stat_trained;
/* the watchdog's message, made before each case (a handler only writes) */
static char hang_msg[256];
static int progress_fd = -1;

static void on_alarm(int sig) {
  (void)sig;
  ssize_t w = write(2, hang_msg, strlen(hang_msg));
  (void)w;
  _exit(124);
}

/* ------------------------------------------------------------ helpers */

/* A clean refusal: counted, printed with --verbose 1, cleared. */
static int verbose, keep; /* --keep 1: the case's file stays */
static void refused(void) {
  if (verbose) fprintf(stderr, "  refused: %s\n", mt_error_message());
  mt_error_clear();
  stat_errors++;
}

static int rm_entry(const char *p, const struct stat *s, int flag, struct FTW *f) {
  (void)s, (void)flag, (void)f;
  remove(p);
  return 0;
}
static void rm_rf(const char *p) { nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
  char buf[65536];
  size_t n;
  int rc = a && b ? 0 : -1;
  while (!rc && (n = fread(buf, 1, sizeof(buf), a)) > 0)
    if (fwrite(buf, 1, n, b) != n) rc = -1;
  if (a) fclose(a);
  if (b && fclose(b)) rc = -1;
  return rc;
}

/* Boundary values a user (or a typo) may give. */
static const char *const boundary[] = {
    "0", "-1", "1", "2", "3", "7", "2147483647", "2147483648", "-2147483648", "4294967296",
    "9223372036854775807", "18446744073709551616", "1e308", "-1e308", "1e-320", "nan", "inf",
    "-inf", "0.5", "-0.5", "1.5", "1e6", "0x10", "abc", ",", "1,,2", ",1", "1,", "1,2,3",
    "0,0", "-1,-1", "fp16", "bf16", "fp32", "fp64", "sp", "ddp", "fsdp", "amp", "true",
    "false", "yes", "auto", "none", "full", "sample", "cuda", "cpu", "cosine", "plateau",
    "onecycle", "multistep", "val", "test", "val,test", "train", "adamw", "sgd", "gpt", "cnn",
    "mlp", "full_shard", "hybrid_shard", "no_shard", "shard_grad_op", "dynamic", "rdp", "prv",
    "poisson", "1e-5", "100", "65536", "1000000"};
#define NBOUNDARY ((int)(sizeof(boundary) / sizeof(boundary[0])))

/* Option names a mutation may add (config.c, the models, the backends). */
static const char *const names[] = {
    "-adam_amsgrad", "-adam_beta1", "-adam_beta2", "-adam_eps", "-amp_dtype", "-backend",
    "-batch_size", "-checkpoint_at_end", "-checkpoint_every_epochs", "-checkpoint_every_steps",
    "-checkpoint_keep", "-clip_grad_norm", "-clip_grad_value", "-cnn_batchnorm",
    "-cnn_channels", "-cnn_dropout", "-cnn_hidden", "-cnn_kernel", "-dampening", "-data_check",
    "-data_test", "-data_val", "-ddp_bucket_mb", "-ddp_comm_thread", "-ddp_first_bucket_mb",
    "-ddp_overlap", "-ddp_reduce_dtype", "-device", "-dp_accountant", "-dp_delta",
    "-dp_grad_sample", "-dp_max_grad_norm", "-dp_max_physical_batch", "-dp_noise_multiplier",
    "-dp_sampling", "-dp_target_epsilon", "-early_stop_min_delta", "-early_stop_patience",
    "-epochs", "-fsdp_cpu_offload", "-fsdp_node_size", "-fsdp_prefetch",
    "-fsdp_sharding_strategy", "-fsdp_unit", "-gpt_block", "-gpt_dropout", "-gpt_embd",
    "-gpt_gelu", "-gpt_heads", "-gpt_layers", "-log_every", "-log_step_losses", "-loss_scale",
    "-loss_scale_backoff_factor", "-loss_scale_growth_factor", "-loss_scale_growth_interval",
    "-loss_scale_hysteresis", "-loss_scale_init", "-loss_scale_min", "-lr", "-lr_end_factor",
    "-lr_gamma", "-lr_milestones", "-lr_min", "-lr_schedule", "-lr_step_size",
    "-max_train_steps_per_epoch", "-max_val_steps_per_epoch", "-micro_batch_size",
    "-mlp_dropout", "-mlp_hidden", "-model", "-momentum", "-nesterov", "-onecycle_div_factor",
    "-onecycle_final_div_factor", "-onecycle_pct_start", "-optimizer", "-outputs",
    "-outputs_logits", "-plateau_cooldown", "-plateau_patience", "-plateau_threshold",
    "-precision", "-prefetch", "-restart", "-restore_best", "-seed", "-sync_module_states",
    "-thread_split", "-threads", "-val_batch_size", "-val_smoothing", "-warmup_steps",
    "-weight_decay", "-weight_decay_skip_1d"};
#define NNAMES ((int)(sizeof(names) / sizeof(names[0])))

/* A value: a boundary value, a long string, or one of the seed files. */
static void any_value(rng *r, char *v, size_t cap) {
  int k = below(r, 20);
  if (k == 0) {
    size_t n = 1 + (size_t)below(r, 2000);
    if (n >= cap) n = cap - 1;
    memset(v, below(r, 2) ? 'a' : '9', n);
    v[n] = 0;
  } else if (k == 1) {
    static const char *const f[] = {"train.h5", "img.h5", "reg.h5", "tokens.h5", "ckpt.h5",
                                    "missing.h5", "progress"};
    snprintf(v, cap, "%s/%s", work, f[below(r, 7)]);
  } else if (k < 8) { /* plausible: a run may get through to training */
    static const char *const p[] = {"0", "1", "2", "3", "4", "8", "16", "0.1", "0.9", "0.999",
                                    "1e-3", "-0.1", "4,4", "2,2,2", "5", "64", "1e-8", "65"};
    snprintf(v, cap, "%s", p[below(r, (int)(sizeof(p) / sizeof(p[0])))]);
  } else {
    snprintf(v, cap, "%s", boundary[below(r, NBOUNDARY)]);
  }
}

/* ---------------------------------------------------- option lines */

typedef struct {
  char name[64];
  char value[2048];
} opt;

static int split(const char *line, opt *o) {
  char buf[1024];
  size_t len = strnlen(line, sizeof(buf) - 1);
  memcpy(buf, line, len);
  buf[len] = 0;
  int n = 0;
  for (char *save = NULL, *t = strtok_r(buf, " \t", &save); t && n < MAXOPT;
       t = strtok_r(NULL, " \t", &save)) {
    if (t[0] == '-' && ((t[1] >= 'a' && t[1] <= 'z') || (t[1] >= 'A' && t[1] <= 'Z'))) {
      snprintf(o[n].name, sizeof(o[n].name), "%s", t);
      o[n++].value[0] = 0;
    } else if (n > 0) {
      snprintf(o[n - 1].value, sizeof(o[n - 1].value), "%s", t);
    }
  }
  return n;
}

static void mutate_options(rng *r, opt *o, int *n) {
  int m = below(r, 2) ? 1 : 1 + below(r, 4);
  for (int k = 0; k < m; k++) {
    int i = below(r, *n), j = below(r, *n);
    switch (below(r, 8)) {
    case 0: /* drop */
      if (*n > 1) memmove(o + i, o + i + 1, (size_t)(*n - i - 1) * sizeof(*o)), (*n)--;
      break;
    case 1: /* duplicate, with another value */
      if (*n < MAXOPT) o[*n] = o[i], any_value(r, o[*n].value, sizeof(o[*n].value)), (*n)++;
      break;
    case 2: { /* swap two values */
      char t[sizeof(o->value)];
      memcpy(t, o[i].value, sizeof(t));
      memcpy(o[i].value, o[j].value, sizeof(t));
      memcpy(o[j].value, t, sizeof(t));
      break;
    }
    case 3: /* no value */
      o[i].value[0] = 0;
      break;
    case 4: /* rename */
      snprintf(o[i].name, sizeof(o[i].name), "%s", names[below(r, NNAMES)]);
      break;
    case 5: /* add */
      if (*n < MAXOPT) {
        snprintf(o[*n].name, sizeof(o[*n].name), "%s", names[below(r, NNAMES)]);
        any_value(r, o[*n].value, sizeof(o[*n].value));
        (*n)++;
      }
      break;
    default: /* replace a value */
      any_value(r, o[i].value, sizeof(o[i].value));
    }
  }
}

static void join(const opt *o, int n, char *line, size_t cap) {
  size_t k = 0;
  line[0] = 0;
  for (int i = 0; i < n && k < cap; i++)
    k += (size_t)snprintf(line + k, cap - k, "%s%s%s%s", i ? " " : "", o[i].name,
                          o[i].value[0] ? " " : "", o[i].value);
}

/* Sets line as the whole options database and reads the configuration;
 * 0 and *cfg on success, else the error counted and cleared. */
static int configure(const char *line, mt_config *cfg) {
  PetscOptionsClear(NULL);
  if (PetscOptionsInsertString(NULL, line)) {
    stat_errors++;
    return -1;
  }
  int help = 0;
  if (mt_config_from_options(comm.world, cfg, &help) || help) {
    refused();
    return -1;
  }
  return 0;
}

/* Creates and runs a trainer from line when its configuration is valid
 * and short; always under -output_dir DIR/out (removed after). */
static void train(const char *line, int always) {
  char full[LINE_MAX_LEN], out[1100];
  snprintf(out, sizeof(out), "%s/out", work);
  rm_rf(out);
  snprintf(full, sizeof(full), "%s -output_dir %s -threads 1 -memory_limit_mb 1024", line, out);
  mt_config cfg;
  if (configure(full, &cfg)) return;
  /* a run of at most a few steps: longer ones are parsed only */
  if (!always && (cfg.epochs > 2 || cfg.max_train_steps < 1 || cfg.max_train_steps > 3 ||
                  cfg.max_val_steps < 1 || cfg.max_val_steps > 2))
    return;
  omp_set_num_threads(1);
  mt_trainer *t = NULL;
  int err = mt_trainer_create(&t, &cfg, &comm);
  if (!err) err = mt_trainer_run(t);
  mt_trainer_destroy(&t);
  if (err)
    refused();
  else
    stat_trained++;
  if (verbose && !err) fprintf(stderr, "  trained: %s\n", line);
  rm_rf(out);
}

static void case_options(rng *r) {
  opt o[MAXOPT];
  int n = split(lines[below(r, nlines)], o);
  mutate_options(r, o, &n);
  static char line[LINE_MAX_LEN];
  join(o, n, line, sizeof(line));
  train(line, 0);
}

/* ------------------------------------------------- HDF5 mutations */

/* The stored bytes of the file's contiguous datasets: where a flipped byte
 * is a damaged value that our checks (checksums, NaN, label range) must
 * find. A flip in HDF5's own metadata (object headers, B-trees) is read by
 * libhdf5 itself, which is not hardened against it: 1.10.8's H5Aexists read
 * past a heap block on such a file (ASan, seed 11 case 10595 with
 * --flip_metadata 1); those flips are opt-in. */
typedef struct {
  hid_t f;
  haddr_t at[64];
  hsize_t n[64];
  int count;
} regions;
static herr_t add_region(hid_t g, const char *name, const H5O_info_t *info, void *op) {
  (void)g;
  regions *R = op;
  if (info->type != H5O_TYPE_DATASET || R->count == 64) return 0;
  hid_t d = H5Dopen2(R->f, name, H5P_DEFAULT);
  if (d < 0) return 0;
  haddr_t at = H5Dget_offset(d);
  hsize_t n = H5Dget_storage_size(d);
  if (at != HADDR_UNDEF && n > 0) R->at[R->count] = at, R->n[R->count++] = n;
  H5Dclose(d);
  return 0;
}

/* Flips 1 to 8 bits of path, or truncates it (past its first 512 bytes,
 * the superblock, whose damage is a clean "not an HDF5 file" anyway):
 * flips in the datasets' stored data, or with --flip_metadata 1 anywhere
 * past byte 512. */
static int flip_metadata;
static void mutate_bytes(rng *r, const char *path) {
  struct stat s;
  if (stat(path, &s) || s.st_size <= 512) return;
  if (below(r, 4) == 0) {
    if (truncate(path, 512 + below(r, (int)(s.st_size - 512)))) return;
    return;
  }
  regions R = {.count = 0};
  if (!flip_metadata) {
    R.f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (R.f < 0) return;
    H5Ovisit2(R.f, H5_INDEX_NAME, H5_ITER_NATIVE, add_region, &R, H5O_INFO_BASIC);
    H5Fclose(R.f);
    if (!R.count) return;
  }
  int fd = open(path, O_RDWR);
  if (fd < 0) return;
  for (int k = 1 + below(r, 8); k > 0; k--) {
    off_t at;
    if (flip_metadata) {
      at = 512 + (off_t)below(r, (int)(s.st_size - 512));
    } else {
      int i = below(r, R.count);
      at = (off_t)R.at[i] + (off_t)(next(r) % R.n[i]);
    }
    unsigned char b;
    if (pread(fd, &b, 1, at) == 1) {
      b ^= (unsigned char)(1u << below(r, 8));
      if (pwrite(fd, &b, 1, at) != 1) break;
    }
  }
  close(fd);
}

static hid_t any_type(rng *r) {
  static const hid_t *const t[] = {&H5T_NATIVE_FLOAT_g,  &H5T_NATIVE_DOUBLE_g, &H5T_NATIVE_UCHAR_g,
                                   &H5T_NATIVE_SCHAR_g,  &H5T_NATIVE_INT_g,    &H5T_NATIVE_LLONG_g,
                                   &H5T_NATIVE_UINT_g,   &H5T_NATIVE_USHORT_g};
  return *t[below(r, 8)];
}

static double any_number(rng *r) {
  static const double v[] = {0, -1, 1, 2, 3, 4, 255, 1e-300, 0.5, 2147483647.0, 2147483648.0,
                             -2147483649.0, 9.3e18, 1e8, 16777217, 1e308, -1e308};
  int k = below(r, 20);
  if (k == 17) return NAN;
  if (k == 18) return INFINITY;
  if (k == 19) return -INFINITY;
  return v[k];
}

/* Replaces (or, with no dims, deletes) dataset name with a new one of a
 * random rank, shape and type; small ones are filled with values. */
static void replace_dataset(rng *r, hid_t f, const char *name) {
  if (H5Lexists(f, name, H5P_DEFAULT) > 0) H5Ldelete(f, name, H5P_DEFAULT);
  if (below(r, 6) == 0) return;
  static const hsize_t sizes[] = {0, 1, 2, 3, 4, 8, 63, 64, 65, 4097, 2147483656ull};
  int rank = 1 + below(r, 4);
  hsize_t dims[4], n = 1;
  for (int i = 0; i < rank; i++) {
    dims[i] = sizes[below(r, 10 + (below(r, 8) == 0))];
    if (n > 0 && dims[i] > (1ull << 40) / n) dims[i] = 1;
    n *= dims[i];
  }
  hid_t type = any_type(r), sp = H5Screate_simple(rank, dims, NULL);
  hid_t d = sp < 0 ? -1 : H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d >= 0 && n > 0 && n <= 65536) {
    double *v = malloc(n * sizeof(double));
    for (hsize_t i = 0; v && i < n; i++) v[i] = below(r, 16) ? (double)below(r, 6) : any_number(r);
    hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
    if (v) H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, xfer, v);
    H5Pclose(xfer);
    free(v);
  }
  if (d >= 0) H5Dclose(d);
  if (sp >= 0) H5Sclose(sp);
}

/* Deletes attribute name of obj, or sets it to a number of a random type,
 * a string or an array. */
static void mutate_attr(rng *r, hid_t obj, const char *name) {
  if (obj < 0) return;
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  int k = below(r, 5);
  if (k == 0) return;
  hsize_t two = 2;
  hid_t type = k == 1 ? H5Tcopy(H5T_C_S1) : H5Tcopy(any_type(r));
  if (k == 1) H5Tset_size(type, 6);
  hid_t sp = k == 2 ? H5Screate_simple(1, &two, NULL) : H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
  if (a >= 0) {
    double v[2] = {any_number(r), any_number(r)};
    if (k == 1)
      H5Awrite(a, type, "junk!");
    else
      H5Awrite(a, H5T_NATIVE_DOUBLE, v);
    H5Aclose(a);
  }
  H5Sclose(sp);
  H5Tclose(type);
}

/* One structural mutation of a data file through the HDF5 API. */
static void mutate_data(rng *r, const char *path) {
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) return;
  const char *ds = H5Lexists(f, "tokens", H5P_DEFAULT) > 0 ? "tokens" : below(r, 2) ? "x" : "y";
  int k = below(r, 3);
  if (k == 0) {
    replace_dataset(r, f, ds);
  } else {
    hid_t d = H5Dopen2(f, ds, H5P_DEFAULT);
    static const char *const attrs[] = {"nclasses", "scale", "vocab_size"};
    mutate_attr(r, d, attrs[below(r, 3)]);
    if (d >= 0) H5Dclose(d);
  }
  H5Fclose(f);
}

/* A tensor of the checkpoint by its index in a walk of the file. */
typedef struct {
  int want, seen;
  char name[512];
} pick;
static herr_t pick_one(hid_t g, const char *name, const H5O_info_t *info, void *op) {
  (void)g;
  pick *p = op;
  if (info->type == H5O_TYPE_DATASET && p->seen++ == p->want) {
    snprintf(p->name, sizeof(p->name), "%s", name);
    return 1;
  }
  return 0;
}

static void mutate_ckpt(rng *r, const char *path) {
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) return;
  pick p = {.want = below(r, 12)};
  H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_NATIVE, pick_one, &p, H5O_INFO_BASIC);
  int k = below(r, 4);
  if (k == 0) {
    static const char *const attrs[] = {"format", "world_size", "checksum_algorithm", "options",
                                        "backend", "mpitrain_version", "created"};
    mutate_attr(r, f, attrs[below(r, 7)]);
  } else if (k == 1 && p.name[0]) {
    hid_t d = H5Dopen2(f, p.name, H5P_DEFAULT);
    mutate_attr(r, d, "checksum");
    if (d >= 0) H5Dclose(d);
  } else if (k == 2 && p.name[0]) {
    replace_dataset(r, f, p.name);
  } else {
    hid_t g = H5Gopen2(f, MT_CKPT_STATE_GROUP, H5P_DEFAULT);
    static const char *const keys[] = {"epoch", "global_step", "step_in_epoch", "rng",
                                       "loss_scale", "curve", "world_size", "best_loss"};
    if (g >= 0 && below(r, 2)) {
      /* an existing entry, whatever its name */
      hsize_t idx = (hsize_t)below(r, 16);
      char name[128];
      if (H5Aget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, idx, name, sizeof(name),
                             H5P_DEFAULT) > 0)
        mutate_attr(r, g, name);
    } else {
      mutate_attr(r, g, keys[below(r, 8)]);
    }
    if (g >= 0) H5Gclose(g);
  }
  H5Fclose(f);
}

/* ------------------------------------------------------ data cases */

static void read_batches(rng *r, mt_dataset *d) {
  mt_loader *L = NULL;
  int rows = 1 + below(r, 16), nb = 1 + below(r, 3);
  if (mt_loader_create(&L, d, rows, below(r, 2))) {
    refused();
    return;
  }
  int64_t idx[48];
  int counts[3], k = 0;
  for (int b = 0; b < nb; b++) {
    counts[b] = 1 + below(r, rows);
    for (int i = 0; i < counts[b]; i++) idx[k++] = (int64_t)(next(r) % (uint64_t)d->n);
  }
  /* a batch's rows must be distinct: the loader sorts, the reader wants
   * them ascending and unique */
  for (int b = 0, off = 0; b < nb; off += counts[b++])
    for (int i = 0; i < counts[b]; i++) idx[off + i] = (idx[off] + i) % d->n;
  int err = mt_loader_start(L, idx, counts, nb);
  mt_batch batch;
  for (int b = 0; !err && b < nb; b++) err = mt_loader_next(L, &batch);
  if (err) refused();
  mt_loader_destroy(&L);
}

static void case_data(rng *r, int64_t K) {
  static const char *const seeds[] = {"train.h5", "img.h5", "reg.h5", "tokens.h5"};
  char from[1100], path[1100];
  int s = below(r, 4);
  snprintf(from, sizeof(from), "%s/%s", work, seeds[s]);
  snprintf(path, sizeof(path), "%s/case-%lld.h5", work, (long long)K);
  if (access(from, R_OK) || copy_file(from, path)) return;
  if (below(r, 3) == 0)
    mutate_bytes(r, path);
  else
    for (int k = 1 + below(r, 2); k > 0; k--) mutate_data(r, path);
  mt_dataset d;
  int window = below(r, 4) ? 8 : below(r, 40);
  mt_data_check check = (mt_data_check)below(r, 3);
  if (mt_dataset_open(&d, path, comm.world, NULL, window, check)) {
    refused();
  } else {
    /* a wide file is opened, not read: its rows would be GiBs */
    if (d.spec.sample_numel <= 65536) read_batches(r, &d);
    int small = d.spec.sample_numel <= 4096;
    mt_dataset_close(&d);
    if (small && below(r, 4) == 0) {
      static const char *const models[] = {"-model mlp -mlp_hidden 4",
                                           "-model cnn -cnn_channels 2 -cnn_hidden 4",
                                           "-model gpt -gpt_block 8 -gpt_embd 8 -gpt_heads 2 "
                                           "-gpt_layers 1"};
      char line[2400];
      snprintf(line, sizeof(line),
               "-data_train %s -data_val %s %s -batch_size 4 -epochs 1 "
               "-max_train_steps_per_epoch 2 -max_val_steps_per_epoch 1 -log_every 1",
               path, path, models[below(r, 3)]);
      train(line, 1);
    }
  }
  if (!keep) remove(path);
}

static void case_ckpt(rng *r, int64_t K) {
  char from[1100], path[1100];
  snprintf(from, sizeof(from), "%s/ckpt.h5", work);
  snprintf(path, sizeof(path), "%s/case-%lld.h5", work, (long long)K);
  if (copy_file(from, path)) return;
  if (below(r, 3) == 0)
    mutate_bytes(r, path);
  else
    for (int k = 1 + below(r, 2); k > 0; k--) mutate_ckpt(r, path);
  for (int level = 0; level < 2; level++)
    if (mt_ckpt_verify(comm.world, path, (mt_ckpt_check)level)) refused();
  mt_ckpt_info info = {0};
  mt_ckpt_state st = {0};
  if (mt_ckpt_read(comm.world, path, NULL, &info, &st)) refused();
  mt_ckpt_info_free(&info);
  mt_ckpt_state_free(&st);
  if (below(r, 2) == 0) {
    /* the seed checkpoint's run (the corpus's first line), restarted */
    char line[2400];
    snprintf(line, sizeof(line), "%s -restart %s -epochs 2", lines[0], path);
    train(line, 1);
  }
  if (!keep) remove(path);
}

/* --------------------------------------------------------------- main */

static void run_case(uint64_t seed, int64_t K) {
  rng r = {seed * 0x2545f4914f6cdd1dull ^ (uint64_t)K * 0x9e3779b97f4a7c15ull};
  next(&r);
  int kind = below(&r, 10);
  if (kind < 6)
    case_options(&r);
  else if (kind < 8)
    case_data(&r, K);
  else
    case_ckpt(&r, K);
}

int main(int argc, char **argv) {
  uint64_t seed = 1;
  int64_t first = 0, cases = 100, only = -1;
  double minutes = 0, case_s = 20;
  const char *corpus = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--cases")) cases = strtoll(v, NULL, 10);
    else if (!strcmp(a, "--first")) first = strtoll(v, NULL, 10);
    else if (!strcmp(a, "--case")) only = strtoll(v, NULL, 10);
    else if (!strcmp(a, "--minutes")) minutes = atof(v);
    else if (!strcmp(a, "--case_seconds")) case_s = atof(v);
    else if (!strcmp(a, "--work")) work = v;
    else if (!strcmp(a, "--corpus")) corpus = v;
    else if (!strcmp(a, "--verbose")) verbose = atoi(v);
    else if (!strcmp(a, "--keep")) keep = atoi(v);
    else if (!strcmp(a, "--flip_metadata")) flip_metadata = atoi(v);
    else {
      fprintf(stderr, "fuzz: unknown argument %s\n", a);
      return 2;
    }
  }
  if (!work || !corpus || (argc - 1) % 2) {
    fprintf(stderr, "usage: fuzz --work DIR --corpus FILE [--seed S] [--cases N | --case K] "
                    "[--first K] [--minutes M] [--case_seconds T]\n");
    return 2;
  }
  FILE *cf = fopen(corpus, "r");
  char raw[1024];
  while (cf && nlines < MAXLINES && fgets(raw, sizeof(raw), cf)) {
    raw[strcspn(raw, "\n")] = 0;
    if (!raw[0] || raw[0] == '#') continue;
    /* @DIR@ -> work */
    char *at = strstr(raw, "@DIR@"), *o = lines[nlines];
    size_t cap = sizeof(lines[0]);
    o[0] = 0;
    char *p = raw;
    while (at) {
      *at = 0;
      snprintf(o + strlen(o), cap - strlen(o), "%s%s", p, work);
      p = at + 5;
      at = strstr(p, "@DIR@");
    }
    snprintf(o + strlen(o), cap - strlen(o), "%s", p);
    nlines++;
  }
  if (cf) fclose(cf);
  if (!nlines) {
    fprintf(stderr, "fuzz: no option lines in %s\n", corpus);
    return 2;
  }
#ifndef __SANITIZE_ADDRESS__
  /* a mutated width must not take the machine (ASan: malloc_limit_mb) */
  struct rlimit lim = {(rlim_t)4 << 30, (rlim_t)4 << 30};
  setrlimit(RLIMIT_AS, &lim);
#endif
  int provided, pargc = 2;
  char *pargv_[] = {argv[0], "-no_signal_handler", NULL}, **pargv = pargv_;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  PETSC_COMM_WORLD = MPI_COMM_WORLD;
  if (PetscInitialize(&pargc, &pargv, NULL, NULL)) return 1;
  mt_h5_quiet();
  if (mt_comm_create(&comm)) {
    fprintf(stderr, "fuzz: %s\n", mt_error_message());
    return 1;
  }
  char prog[1100];
  snprintf(prog, sizeof(prog), "%s/progress", work);
  progress_fd = open(prog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  /* the trainer's lines are not the fuzzer's: stdout to /dev/null */
  if (!freopen("/dev/null", "w", stdout)) return 1;
  signal(SIGALRM, on_alarm);
  if (only >= 0) first = only, cases = 1;
  double t0 = mt_now();
  int64_t K = first, done = 0;
  for (; K < first + cases; K++, done++) {
    if (minutes > 0 && mt_now() - t0 > 60 * minutes) break;
    char rec[64];
    int n = snprintf(rec, sizeof(rec), "%llu %lld\n", (unsigned long long)seed, (long long)K);
    if (progress_fd >= 0 &&
        (ftruncate(progress_fd, 0) || pwrite(progress_fd, rec, (size_t)n, 0) != n))
      progress_fd = -1;
    snprintf(hang_msg, sizeof(hang_msg),
             "fuzz: HANG: case %lld of seed %llu ran over %.0f s (replay: tests/fuzz --seed %llu "
             "--case %lld ...)\n",
             (long long)K, (unsigned long long)seed, case_s, (unsigned long long)seed,
             (long long)K);
    if (verbose) fprintf(stderr, "case %lld\n", (long long)K);
    alarm((unsigned)case_s);
    run_case(seed, K);
    alarm(0);
  }
  fprintf(stderr,
          "fuzz: seed %llu, cases %lld..%lld: %lld cases, %ld errors (clean refusals), %ld runs "
          "trained, 0 crashes, 0 hangs (%.0f s)\n",
          (unsigned long long)seed, (long long)first, (long long)K - 1, (long long)done,
          stat_errors, stat_trained, mt_now() - t0);
  mt_comm_destroy(&comm);
  PetscFinalize();
  MPI_Finalize();
  return 0;
}
