/* mt-data: turn public data sets into the HDF5 files mpitrain reads.
 *
 *   mt-data fashion-mnist [-src DIR] -out DIR
 *
 * Output contract (what the library's reader checks):
 *   /x  (N, d1, ..., dk) uint8 with a double attribute "scale" (value = raw *
 *       scale), contiguous layout so one row is one hyperslab read
 *   /y  (N) int32 labels with an int attribute "nclasses"
 *   root attribute "source": where the data came from
 *
 * A file is written under a temporary name in the output folder and renamed
 * only when complete, so an interrupted run never leaves a partial file under
 * the final name. Every failure is one line naming the file, exit status 1.
 *
 * Subcommands live in a table (name, usage, run function); a later `text`
 * subcommand (byte-level tokens into /tokens) adds one row and one function.
 * The tool is serial: it links with mpicc for the parallel HDF5 library but
 * uses HDF5's default (sec2) file driver and never calls MPI. */
#include <errno.h>
#include <math.h>
#include <hdf5.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define PROG "mt-data"
#define FMNIST_DEFAULT_SRC "/usr/share/datasets/fashion-mnist"
#define IDX_MAGIC_U8_1D 0x00000801u /* labels: unsigned byte, 1 dimension */
#define IDX_MAGIC_U8_3D 0x00000803u /* images: unsigned byte, 3 dimensions */

/* The temporary file being written, removed by fail paths and on signals. */
static char tmp_path_[4096];

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  va_list ap;
  fputs(PROG ": error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static void on_signal(int sig) {
  if (tmp_path_[0]) unlink(tmp_path_); /* async-signal-safe */
  signal(sig, SIG_DFL);
  raise(sig);
}

/* ------------------------------------------------------------ gz input */

/* Reads exactly n bytes; 0 on success, -1 (message printed) otherwise. */
static int gz_read_exact(gzFile f, const char *path, void *buf, size_t n, const char *what) {
  unsigned char *p = buf;
  size_t got = 0;
  while (got < n) {
    unsigned chunk = (n - got) > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
    int k = gzread(f, p + got, chunk);
    if (k < 0) {
      int zerr = 0;
      const char *m = gzerror(f, &zerr);
      fail("%s: read error in %s: %s", path, what, zerr == Z_ERRNO ? strerror(errno) : m);
      return -1;
    }
    if (k == 0) {
      fail("%s: short read in %s (%zu of %zu bytes; file truncated?)", path, what, got, n);
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}

static uint32_t be32(const unsigned char *b) {
  return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}

/* An IDX file of unsigned bytes: header (magic, ndim sizes), then the data.
 * On success *data is malloc'ed (caller frees) and dims[0..ndim) are set. */
static int idx_read(const char *path, uint32_t magic, int ndim, uint32_t *dims,
                    unsigned char **data) {
  *data = NULL;
  gzFile f = gzopen(path, "rb");
  if (!f) {
    fail("%s: cannot open: %s", path, errno ? strerror(errno) : "zlib could not allocate");
    return -1;
  }
  unsigned char hdr[4 * 4];
  int rc = -1;
  if (gz_read_exact(f, path, hdr, 4 * (size_t)(1 + ndim), "the IDX header")) goto out;
  uint32_t m = be32(hdr);
  if (m != magic) {
    fail("%s: bad IDX magic number 0x%08x (expected 0x%08x: unsigned bytes, %d dimension%s)",
         path, m, magic, ndim, ndim > 1 ? "s" : "");
    goto out;
  }
  size_t n = 1;
  for (int i = 0; i < ndim; i++) {
    dims[i] = be32(hdr + 4 * (1 + i));
    if (dims[i] == 0 || dims[i] > (1u << 28)) {
      fail("%s: implausible size %u in dimension %d of the IDX header", path, dims[i], i);
      goto out;
    }
    n *= dims[i];
  }
  *data = malloc(n);
  if (!*data) {
    fail("%s: out of memory for %zu bytes", path, n);
    goto out;
  }
  if (gz_read_exact(f, path, *data, n, "the IDX data")) goto out;
  unsigned char extra;
  int k = gzread(f, &extra, 1);
  if (k != 0) {
    fail("%s: %s after %zu data bytes", path, k > 0 ? "unexpected trailing data" : "read error",
         n);
    goto out;
  }
  rc = 0;
out:
  if (rc) {
    free(*data);
    *data = NULL;
  }
  gzclose(f);
  return rc;
}

/* ------------------------------------------------------------ h5 output */

/* Attribute helpers: 0 on success, negative on HDF5 failure. */
static int attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  if (sp < 0) return -1;
  hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = a < 0 ? -1 : H5Awrite(a, mtype, v);
  if (a >= 0 && H5Aclose(a) < 0) st = -1;
  H5Sclose(sp);
  return st < 0 ? -1 : 0;
}

static int attr_string(hid_t obj, const char *name, const char *s) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0) return -1;
  int rc = -1;
  if (H5Tset_size(t, strlen(s) + 1) >= 0 && H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0)
    rc = attr_write(obj, name, t, t, s);
  H5Tclose(t);
  return rc;
}

/* One contiguous (no chunking, no filters) dataset, written whole. */
static int dataset_write(hid_t file, const char *name, hid_t ftype, hid_t mtype, int rank,
                         const hsize_t *dims, const void *buf, hid_t *out) {
  hid_t sp = H5Screate_simple(rank, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hid_t d = -1;
  int rc = -1;
  if (sp < 0 || dcpl < 0 || H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0) goto out;
  d = H5Dcreate2(file, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (d < 0) goto out;
  if (H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) goto out;
  rc = 0;
out:
  if (rc == 0)
    *out = d;
  else if (d >= 0)
    H5Dclose(d);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  return rc;
}

/* Classification set: x is (n, xdims...) uint8 with value = raw * scale,
 * y is (n) int32 in [0, nclasses). Written to a temporary name in the
 * destination folder, flushed, then renamed to path. */
typedef struct {
  const char *path;
  const char *source;
  int xrank; /* including N */
  hsize_t xdims[8];
  const unsigned char *x;
  double scale;
  const int32_t *y;
  int nclasses;
} class_set;

static int write_class_set(const class_set *s) {
  int n = snprintf(tmp_path_, sizeof(tmp_path_), "%s.tmp.%ld", s->path, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof(tmp_path_)) {
    tmp_path_[0] = '\0';
    fail("%s: path too long", s->path);
    return -1;
  }
  errno = 0;
  hid_t f = H5Fcreate(tmp_path_, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) {
    fail("%s: cannot create temporary file %s%s%s", s->path, tmp_path_, errno ? ": " : "",
         errno ? strerror(errno) : "");
    tmp_path_[0] = '\0';
    return -1;
  }
  hid_t dx = -1, dy = -1;
  hsize_t ny = s->xdims[0];
  int nc = s->nclasses, rc = -1;
  if (attr_string(f, "source", s->source) < 0) goto out;
  if (dataset_write(f, "x", H5T_STD_U8LE, H5T_NATIVE_UCHAR, s->xrank, s->xdims, s->x, &dx) < 0)
    goto out;
  if (attr_write(dx, "scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &s->scale) < 0) goto out;
  if (dataset_write(f, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &ny, s->y, &dy) < 0) goto out;
  if (attr_write(dy, "nclasses", H5T_STD_I32LE, H5T_NATIVE_INT, &nc) < 0) goto out;
  rc = 0;
out:
  if (dx >= 0 && H5Dclose(dx) < 0) rc = -1;
  if (dy >= 0 && H5Dclose(dy) < 0) rc = -1;
  if (H5Fclose(f) < 0) rc = -1;
  if (rc) {
    fail("%s: HDF5 write failed (temporary %s; disk full?)", s->path, tmp_path_);
    unlink(tmp_path_);
    tmp_path_[0] = '\0';
    return -1;
  }
  if (rename(tmp_path_, s->path) != 0) {
    fail("%s: cannot rename from %s: %s", s->path, tmp_path_, strerror(errno));
    unlink(tmp_path_);
    tmp_path_[0] = '\0';
    return -1;
  }
  tmp_path_[0] = '\0';
  return 0;
}

/* mkdir -p for the output folder. */
static int make_dirs(const char *dir) {
  char p[4096];
  int n = snprintf(p, sizeof(p), "%s", dir);
  if (n <= 0 || (size_t)n >= sizeof(p)) {
    fail("%s: bad or too long output folder name", dir);
    return -1;
  }
  for (char *c = p + 1;; c++) {
    int end = (*c == '\0');
    if (*c == '/' || end) {
      *c = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        fail("%s: cannot create folder %s: %s", dir, p, strerror(errno));
        return -1;
      }
      if (end) break;
      *c = '/';
    }
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fail("%s: not a folder", dir);
    return -1;
  }
  return 0;
}

static int join(char *out, size_t len, const char *dir, const char *name) {
  int n = snprintf(out, len, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= len) {
    fail("%s/%s: path too long", dir, name);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ fashion-mnist */

/* One split in memory: <prefix>-images-idx3-ubyte.gz + -labels-idx1-ubyte.gz. */
typedef struct {
  char ipath[4096], lpath[4096];
  uint32_t dims[3]; /* n, rows, cols */
  unsigned char *img;
  int32_t *y;
} fmnist_split;

static void fmnist_free(fmnist_split *s) {
  free(s->img);
  free(s->y);
  s->img = NULL;
  s->y = NULL;
}

/* Reads and validates one split; on failure nothing is held. */
static int fmnist_load(const char *src, const char *prefix, fmnist_split *s) {
  char iname[64], lname[64];
  unsigned char *lab = NULL;
  uint32_t ldims[1];
  memset(s, 0, sizeof(*s));
  snprintf(iname, sizeof(iname), "%s-images-idx3-ubyte.gz", prefix);
  snprintf(lname, sizeof(lname), "%s-labels-idx1-ubyte.gz", prefix);
  if (join(s->ipath, sizeof(s->ipath), src, iname) || join(s->lpath, sizeof(s->lpath), src, lname))
    return -1;
  if (idx_read(s->ipath, IDX_MAGIC_U8_3D, 3, s->dims, &s->img)) goto bad;
  if (idx_read(s->lpath, IDX_MAGIC_U8_1D, 1, ldims, &lab)) goto bad;
  if (s->dims[1] != 28 || s->dims[2] != 28) {
    fail("%s: images are %ux%u, expected 28x28", s->ipath, s->dims[1], s->dims[2]);
    goto bad;
  }
  if (s->dims[0] != ldims[0]) {
    fail("%s: %u labels but %s has %u images", s->lpath, ldims[0], s->ipath, s->dims[0]);
    goto bad;
  }
  s->y = malloc((size_t)ldims[0] * sizeof(*s->y));
  if (!s->y) {
    fail("%s: out of memory", s->lpath);
    goto bad;
  }
  for (size_t i = 0; i < ldims[0]; i++) {
    if (lab[i] > 9) {
      fail("%s: label %u of sample %zu is outside 0..9", s->lpath, lab[i], i);
      goto bad;
    }
    s->y[i] = lab[i];
  }
  free(lab);
  return 0;
bad:
  free(lab);
  fmnist_free(s);
  return -1;
}

static int fmnist_write(const fmnist_split *s, const char *out_dir, const char *out_name,
                        const char *split) {
  char opath[4096], source[2 * 4096 + 256];
  if (join(opath, sizeof(opath), out_dir, out_name)) return -1;
  snprintf(source, sizeof(source),
           "Fashion-MNIST %s split (Zalando Research, MIT licence), converted by " PROG
           " from %s and %s",
           split, s->ipath, s->lpath);
  hsize_t n = s->dims[0];
  class_set cs = {.path = opath, .source = source, .xrank = 4,
                  .xdims = {n, 1, s->dims[1], s->dims[2]}, .x = s->img, .scale = 1.0 / 255.0,
                  .y = s->y, .nclasses = 10};
  if (write_class_set(&cs)) return -1;
  printf("%s: %llu samples, x (%llu,1,%u,%u) uint8 scale 1/255, y int32 nclasses 10\n", opath,
         (unsigned long long)n, (unsigned long long)n, s->dims[1], s->dims[2]);
  return 0;
}

static int cmd_fashion_mnist(int argc, char **argv) {
  const char *src = FMNIST_DEFAULT_SRC, *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "-src") && i + 1 < argc)
      src = argv[++i];
    else if (!strcmp(argv[i], "-out") && i + 1 < argc)
      out = argv[++i];
    else {
      fail("fashion-mnist: unknown or incomplete argument '%s' (see " PROG " -h)", argv[i]);
      return 2;
    }
  }
  if (!out) {
    fail("fashion-mnist: -out DIR is required (see " PROG " -h)");
    return 2;
  }
  /* All four inputs are validated before anything is written. */
  fmnist_split train, test;
  if (fmnist_load(src, "train", &train)) return 1;
  if (fmnist_load(src, "t10k", &test)) {
    fmnist_free(&train);
    return 1;
  }
  int rc = make_dirs(out) || fmnist_write(&train, out, "fashion-mnist-train.h5", "train") ||
           fmnist_write(&test, out, "fashion-mnist-test.h5", "test");
  fmnist_free(&train);
  fmnist_free(&test);
  return rc ? 1 : 0;
}

/* ------------------------------------------------------------ text */

/* Writes /tokens (n) uint8 (byte-level tokens) with attributes vocab_size
 * (256) and unigram_entropy_nats (of these bytes), root attribute source. */
static int write_tokens(const char *path, const char *source, const unsigned char *t, size_t n) {
  int k = snprintf(tmp_path_, sizeof(tmp_path_), "%s.tmp.%ld", path, (long)getpid());
  if (k < 0 || (size_t)k >= sizeof(tmp_path_)) {
    tmp_path_[0] = '\0';
    fail("%s: path too long", path);
    return -1;
  }
  hid_t f = H5Fcreate(tmp_path_, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) {
    fail("%s: cannot create temporary file %s", path, tmp_path_);
    tmp_path_[0] = '\0';
    return -1;
  }
  double count[256] = {0}, h = 0;
  for (size_t i = 0; i < n; i++) count[t[i]] += 1;
  for (int c = 0; c < 256; c++)
    if (count[c] > 0) h -= count[c] / (double)n * log(count[c] / (double)n);
  hsize_t dim = n;
  hid_t d = -1;
  int vocab = 256, rc = -1;
  if (attr_string(f, "source", source) < 0) goto out;
  if (dataset_write(f, "tokens", H5T_STD_U8LE, H5T_NATIVE_UCHAR, 1, &dim, t, &d) < 0) goto out;
  if (attr_write(d, "vocab_size", H5T_STD_I32LE, H5T_NATIVE_INT, &vocab) < 0) goto out;
  if (attr_write(d, "unigram_entropy_nats", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &h) < 0) goto out;
  rc = 0;
out:
  if (d >= 0 && H5Dclose(d) < 0) rc = -1;
  if (H5Fclose(f) < 0) rc = -1;
  if (!rc && rename(tmp_path_, path) != 0) {
    fail("%s: cannot rename from %s: %s", path, tmp_path_, strerror(errno));
    rc = -2;
  }
  if (rc) {
    if (rc == -1) fail("%s: HDF5 write failed (temporary %s; disk full?)", path, tmp_path_);
    unlink(tmp_path_);
    tmp_path_[0] = '\0';
    return -1;
  }
  tmp_path_[0] = '\0';
  printf("%s: %zu byte tokens, unigram entropy %.4f nats/byte\n", path, n, h);
  return 0;
}

static int cmd_text(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *name = "text";
  double val = 0.1;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "-out") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "-name") && i + 1 < argc) name = argv[++i];
    else if (!strcmp(argv[i], "-val_fraction") && i + 1 < argc) {
      char *end;
      val = strtod(argv[++i], &end);
      if (*end || !(val >= 0 && val < 1)) {
        fail("text: -val_fraction '%s' must be a number in [0, 1)", argv[i]);
        return 2;
      }
    } else if (argv[i][0] != '-' && !in) in = argv[i];
    else {
      fail("text: unknown or incomplete argument '%s' (see " PROG " -h)", argv[i]);
      return 2;
    }
  }
  if (!in || !out) {
    fail("text: FILE and -out DIR are required (see " PROG " -h)");
    return 2;
  }
  FILE *f = fopen(in, "rb");
  if (!f) {
    fail("%s: cannot open: %s", in, strerror(errno));
    return 1;
  }
  size_t cap = 1 << 20, n = 0;
  unsigned char *buf = malloc(cap);
  for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += k;
    if (n == cap) {
      unsigned char *b = realloc(buf, cap *= 2);
      if (!b) free(buf);
      buf = b;
    }
  }
  int bad = !buf || ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    fail("%s: cannot read (out of memory or I/O error)", in);
    return 1;
  }
  size_t nval = (size_t)((double)n * val), ntrain = n - nval;
  if (ntrain < 2 || (val > 0 && nval < 2)) {
    free(buf);
    fail("%s: %zu bytes is too little text", in, n);
    return 1;
  }
  char p[4096], src[4096];
  snprintf(src, sizeof(src), "bytes of %s", in);
  int rc = make_dirs(out);
  if (!rc) rc = join(p, sizeof(p), out, name) || strlen(p) + 16 >= sizeof(p);
  char path[4200];
  if (!rc) {
    snprintf(path, sizeof(path), "%s-train.h5", p);
    rc = write_tokens(path, src, buf, ntrain);
  }
  if (!rc && nval) {
    snprintf(path, sizeof(path), "%s-val.h5", p);
    rc = write_tokens(path, src, buf + ntrain, nval);
  }
  free(buf);
  return rc ? 1 : 0;
}

/* ------------------------------------------------------------ main */

typedef struct {
  const char *name;
  const char *usage; /* arguments after the name */
  const char *help;
  int (*run)(int argc, char **argv); /* argv after the name; returns exit status */
} command;

static const command commands[] = {
    {"fashion-mnist", "[-src DIR] -out DIR",
     "IDX .gz files in DIR (default " FMNIST_DEFAULT_SRC ") -> OUT/fashion-mnist-{train,test}.h5",
     cmd_fashion_mnist},
    {"text", "FILE -out DIR [-name NAME] [-val_fraction 0.1]",
     "bytes of FILE as tokens -> OUT/NAME-train.h5 and OUT/NAME-val.h5 (the last fraction)",
     cmd_text},
};

static void usage(FILE *f) {
  fprintf(f, "usage: " PROG " COMMAND [ARGS]\n\nCommands:\n");
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    fprintf(f, "  " PROG " %s %s\n      %s\n", commands[i].name, commands[i].usage,
            commands[i].help);
  fprintf(f,
          "\nOutput: /x (N,...) uint8 with attribute scale (value = raw*scale), /y (N) int32\n"
          "with attribute nclasses; or /tokens (M) uint8 with attributes vocab_size and\n"
          "unigram_entropy_nats; root attribute source. Files are written under a\n"
          "temporary name and renamed when complete.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "-help") || !strcmp(argv[1], "--help")) {
    usage(stdout);
    return 0;
  }
  /* Our messages replace HDF5's multi-line error stacks. */
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    if (!strcmp(argv[1], commands[i].name)) {
      for (int j = 2; j < argc; j++)
        if (!strcmp(argv[j], "-h") || !strcmp(argv[j], "-help")) {
          usage(stdout);
          return 0;
        }
      return commands[i].run(argc - 2, argv + 2);
    }
  fail("unknown command '%s' (see " PROG " -h)", argv[1]);
  return 2;
}
