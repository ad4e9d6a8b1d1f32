/* h5digest: one line per dataset of an HDF5 file, for bit-for-bit checks.
 *
 *   h5digest [-a OBJECT@ATTRIBUTE]... FILE.h5
 *
 * prints, for every dataset reachable from the root group (recursively, each
 * hard link once, sorted by path with strcmp), the line
 *
 *   PATH TYPE SHAPE HASH
 *
 * PATH   the dataset's path, e.g. /params/layers.0.weight
 * TYPE   the stored element type: f32le, f64le, i32le, u8, ..., a float of
 *        another layout as float16le(s15,e10:5,m0:10), str12, compound{...}
 * SHAPE  the dimensions joined by 'x' (40x20), "scalar" or "null"
 * HASH   64-bit FNV-1a of the dataset's raw bytes, as stored in the file
 *        (read with the file's own type: no conversion; a compound's
 *        members packed, without the padding between them), 16 hex digits
 *
 * and then, for each -a in the order given, the same line for attribute
 * ATTRIBUTE of the object at path OBJECT (PATH is OBJECT@ATTRIBUTE), or
 * nothing where the file has no such attribute. Other attributes are left
 * out: a checkpoint's hold wall-clock times ("created", elapsed seconds, the
 * learning curve's seconds). tests/test_bits.sh compares these lines with the
 * references under tests/bits/.
 *
 * Types whose raw bytes are not the data (variable-length data, references)
 * are refused. A file without any dataset is refused too, so that an empty
 * digest cannot pass for a matching one.
 *
 * Exit status: 0 success, 1 failure (one line on stderr), 2 usage error. */
#include <hdf5.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  va_list ap;
  fputs("h5digest: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

/* ------------------------------------------------------------ FNV-1a */

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= FNV_PRIME;
  }
  return h;
}

/* ------------------------------------------------------------ text buffer */

typedef struct {
  char *s;
  size_t n, cap;
  int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->oom = 1;
      return;
    }
    if (b->s && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = 2 * (b->cap + (size_t)k) + 64;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

/* ------------------------------------------------------------ types */

static const char *order_name(hid_t t) {
  switch (H5Tget_order(t)) {
  case H5T_ORDER_LE: return "le";
  case H5T_ORDER_BE: return "be";
  case H5T_ORDER_VAX: return "vax";
  case H5T_ORDER_MIXED: return "mixed";
  default: return "";
  }
}

/* Appends TYPE's name; returns -1 for a type whose raw bytes are not its
 * values (variable-length, references) or on an HDF5 failure. */
static int type_name(buf *b, hid_t t) {
  const size_t size = H5Tget_size(t);
  const H5T_class_t cl = H5Tget_class(t);
  if (size == 0 || cl == H5T_NO_CLASS) return -1;
  switch (cl) {
  case H5T_INTEGER: {
    const int sgn = H5Tget_sign(t) == H5T_SGN_2;
    if (size == 1) put(b, "%s8", sgn ? "i" : "u");
    else put(b, "%s%zu%s", sgn ? "i" : "u", 8 * size, order_name(t));
    return 0;
  }
  case H5T_FLOAT: {
    if (H5Tequal(t, H5T_IEEE_F32LE) > 0) put(b, "f32le");
    else if (H5Tequal(t, H5T_IEEE_F64LE) > 0) put(b, "f64le");
    else if (H5Tequal(t, H5T_IEEE_F32BE) > 0) put(b, "f32be");
    else if (H5Tequal(t, H5T_IEEE_F64BE) > 0) put(b, "f64be");
    else {
      size_t spos, epos, esize, mpos, msize;
      if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return -1;
      put(b, "float%zu%s(s%zu,e%zu:%zu,m%zu:%zu)", 8 * size, order_name(t), spos, epos, esize,
          mpos, msize);
    }
    return 0;
  }
  case H5T_STRING: {
    const htri_t var = H5Tis_variable_str(t);
    if (var != 0) return -1;
    put(b, "str%zu", size);
    return 0;
  }
  case H5T_COMPOUND: {
    const int n = H5Tget_nmembers(t);
    if (n < 0) return -1;
    put(b, "compound%zu{", size);
    for (int i = 0; i < n; i++) {
      char *name = H5Tget_member_name(t, (unsigned)i);
      hid_t m = H5Tget_member_type(t, (unsigned)i);
      int err = !name || m < 0;
      if (!err) {
        put(b, "%s%s@%zu:", i ? "," : "", name, H5Tget_member_offset(t, (unsigned)i));
        err = type_name(b, m);
      }
      if (m >= 0) H5Tclose(m);
      H5free_memory(name);
      if (err) return -1;
    }
    put(b, "}");
    return 0;
  }
  case H5T_ARRAY: {
    const int nd = H5Tget_array_ndims(t);
    hsize_t d[H5S_MAX_RANK];
    if (nd < 0 || H5Tget_array_dims2(t, d) < 0) return -1;
    put(b, "array[");
    for (int i = 0; i < nd; i++) put(b, "%s%" PRIuMAX, i ? "x" : "", (uintmax_t)d[i]);
    put(b, "]");
    hid_t s = H5Tget_super(t);
    int err = s < 0 ? -1 : type_name(b, s);
    if (s >= 0) H5Tclose(s);
    return err;
  }
  case H5T_ENUM: {
    put(b, "enum:");
    hid_t s = H5Tget_super(t);
    int err = s < 0 ? -1 : type_name(b, s);
    if (s >= 0) H5Tclose(s);
    return err;
  }
  case H5T_BITFIELD: put(b, "bits%zu%s", 8 * size, order_name(t)); return 0;
  case H5T_OPAQUE: put(b, "opaque%zu", size); return 0;
  case H5T_TIME:
  case H5T_REFERENCE:
  case H5T_VLEN:
  default: return -1;
  }
}

/* ------------------------------------------------------------ walk */

typedef struct {
  char **paths;
  size_t n, cap;
  int err;
} list;

static herr_t visit(hid_t g, const char *name, const H5L_info_t *info, void *data) {
  list *l = data;
  if (info->type != H5L_TYPE_HARD) return 0; /* soft and external links: not this file's */
  hid_t o = H5Oopen(g, name, H5P_DEFAULT);
  if (o < 0) {
    fail("cannot open /%s", name);
    l->err = 1;
    return -1;
  }
  const int is_ds = H5Iget_type(o) == H5I_DATASET;
  H5Oclose(o);
  if (!is_ds) return 0;
  if (l->n == l->cap) {
    size_t cap = 2 * l->cap + 16;
    char **p = realloc(l->paths, cap * sizeof(*p));
    if (!p) {
      fail("out of memory");
      l->err = 1;
      return -1;
    }
    l->paths = p;
    l->cap = cap;
  }
  size_t len = strlen(name);
  char *s = malloc(len + 2);
  if (!s) {
    fail("out of memory");
    l->err = 1;
    return -1;
  }
  s[0] = '/';
  memcpy(s + 1, name, len + 1);
  l->paths[l->n++] = s;
  return 0;
}

static int by_path(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* TYPE and SHAPE of a dataset's or an attribute's type and space into ty and
 * sh, its element count into npts; -1 (after a message) on failure. */
static int describe(const char *what, hid_t t, hid_t s, buf *ty, buf *sh, hssize_t *npts) {
  *npts = 0;
  if (t < 0 || s < 0) {
    fail("cannot read the type or the shape of %s", what);
    return -1;
  }
  if (type_name(ty, t) < 0) {
    fail("%s: a type whose raw bytes are not its values (variable-length, reference) or an "
         "unreadable type",
         what);
    return -1;
  }
  const H5S_class_t sc = H5Sget_simple_extent_type(s);
  if (sc == H5S_SCALAR) {
    put(sh, "scalar");
    *npts = 1;
  } else if (sc == H5S_NULL) {
    put(sh, "null");
  } else {
    hsize_t dims[H5S_MAX_RANK];
    const int nd = H5Sget_simple_extent_dims(s, dims, NULL);
    *npts = H5Sget_simple_extent_npoints(s);
    if (nd < 0 || *npts < 0) {
      fail("cannot read the shape of %s", what);
      return -1;
    }
    for (int i = 0; i < nd; i++) put(sh, "%s%" PRIuMAX, i ? "x" : "", (uintmax_t)dims[i]);
    if (nd == 0) put(sh, "scalar");
  }
  if (ty->oom || sh->oom) {
    fail("out of memory");
    return -1;
  }
  return 0;
}

/* Prints the line of a dataset (attr NULL) or of attribute attr of object
 * path; an absent attribute prints nothing. */
static int digest(hid_t f, const char *path, const char *attr) {
  char what[1024];
  snprintf(what, sizeof(what), "%s%s%s", path, attr ? "@" : "", attr ? attr : "");
  hid_t o = H5I_INVALID_HID, a = H5I_INVALID_HID;
  if (attr) {
    if (H5Lexists(f, path, H5P_DEFAULT) <= 0) return 0;
    o = H5Oopen(f, path, H5P_DEFAULT);
    if (o < 0) {
      fail("cannot open %s", path);
      return -1;
    }
    const htri_t has = H5Aexists(o, attr);
    if (has <= 0) {
      H5Oclose(o);
      if (has == 0) return 0;
      fail("cannot look for attribute %s", what);
      return -1;
    }
    a = H5Aopen(o, attr, H5P_DEFAULT);
  } else {
    o = H5Dopen2(f, path, H5P_DEFAULT);
  }
  if (o < 0 || (attr && a < 0)) {
    fail("cannot open %s", what);
    if (o >= 0) H5Oclose(o);
    return -1;
  }
  hid_t t = attr ? H5Aget_type(a) : H5Dget_type(o);
  hid_t s = attr ? H5Aget_space(a) : H5Dget_space(o);
  buf ty = {0}, sh = {0};
  unsigned char *data = NULL;
  hssize_t npts = 0;
  int err = describe(what, t, s, &ty, &sh, &npts) < 0;
  uint64_t h = FNV_OFFSET;
  /* a compound is read packed: the file's padding bytes are not data */
  hid_t mt = H5I_INVALID_HID;
  if (!err && npts > 0) {
    mt = H5Tcopy(t);
    if (mt < 0 || (H5Tget_class(t) == H5T_COMPOUND && H5Tpack(mt) < 0)) {
      fail("cannot make the memory type of %s", what);
      err = 1;
    }
  }
  if (!err && npts > 0) {
    const size_t bytes = (size_t)npts * H5Tget_size(mt);
    data = malloc(bytes);
    if (!data) {
      fail("out of memory for %zu bytes of %s", bytes, what);
      err = 1;
    } else if ((attr ? H5Aread(a, mt, data)
                     : H5Dread(o, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data)) < 0) {
      fail("reading %s failed", what);
      err = 1;
    } else {
      h = fnv1a(h, data, bytes);
    }
  }
  if (!err) printf("%s %s %s %016" PRIx64 "\n", what, ty.s, sh.s, h);
  free(data);
  free(ty.s);
  free(sh.s);
  if (mt >= 0) H5Tclose(mt);
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  if (a >= 0) H5Aclose(a);
  H5Oclose(o);
  return err ? -1 : 0;
}

static int usage(void) {
  fprintf(stderr, "usage: h5digest [-a OBJECT@ATTRIBUTE]... FILE.h5\n"
                  "  one line per dataset, sorted by path: PATH TYPE SHAPE FNV-1a-64; then one\n"
                  "  per attribute asked for that the file has: OBJECT@ATTRIBUTE TYPE SHAPE ...\n");
  return 2;
}

int main(int argc, char **argv) {
  int i = 1;
  for (; i + 1 < argc && !strcmp(argv[i], "-a"); i += 2) {
    const char *at = strchr(argv[i + 1], '@');
    if (argv[i + 1][0] != '/' || !at || !at[1]) return usage();
  }
  if (i != argc - 1 || argv[i][0] == '-') return usage();
  const char *file = argv[i];
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    fail("cannot open %s as an HDF5 file", file);
    return 1;
  }
  list l = {0};
  int err = H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, visit, &l) < 0 || l.err;
  if (err && !l.err) fail("%s: walking the groups failed", file);
  if (!err && l.n == 0) {
    fail("%s has no dataset", file);
    err = 1;
  }
  if (!err) qsort(l.paths, l.n, sizeof(*l.paths), by_path);
  for (size_t k = 0; !err && k < l.n; k++) err = digest(f, l.paths[k], NULL) < 0;
  for (size_t k = 0; k < l.n; k++) free(l.paths[k]);
  free(l.paths);
  for (int k = 1; !err && k < argc - 1; k += 2) {
    char obj[1024];
    const char *at = strchr(argv[k + 1], '@');
    snprintf(obj, sizeof(obj), "%.*s", (int)(at - argv[k + 1]), argv[k + 1]);
    err = digest(f, obj, at + 1) < 0;
  }
  if (H5Fclose(f) < 0 && !err) {
    fail("closing %s failed", file);
    err = 1;
  }
  if (!err && (fflush(stdout) != 0 || ferror(stdout))) {
    fail("writing the digest failed");
    err = 1;
  }
  return err ? 1 : 0;
}
