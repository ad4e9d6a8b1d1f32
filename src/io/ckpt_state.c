/* Checkpoint files, the trainer state: the typed key/value store
 * (mt_ckpt_state: set, get, find, free) and its packing into the attributes
 * of /trainer_state (mt_ckpt_state_write) and unpacking from them
 * (mt_ckpt_state_read). Contracts: ckpt_state.h. */
#include "io/ckpt_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ store */

const mt_ckpt_entry *mt_ckpt_state_find(const mt_ckpt_state *s, const char *key) {
  for (int i = 0; s && key && i < s->n; i++)
    if (!strcmp(s->e[i].key, key)) return &s->e[i];
  return NULL;
}

/* The entry for key, emptied (new or with its old value freed). */
static int state_slot(mt_ckpt_state *s, const char *key, mt_ckpt_entry **out) {
  MT_CHECK(s, MT_ERR_ARG, "checkpoint state: NULL state");
  MT_CHECK(mt_ckpt_name_ok(key), MT_ERR_ARG,
           "checkpoint state: invalid key '%s' (1 to %d printable characters, no '/')",
           key ? key : "(null)", MT_NAME_MAX - 1);
  mt_ckpt_entry *e = (mt_ckpt_entry *)mt_ckpt_state_find(s, key);
  if (!e) {
    if (s->n == s->cap) {
      int cap = s->cap ? 2 * s->cap : 16;
      mt_ckpt_entry *ne = realloc(s->e, (size_t)cap * sizeof(*ne));
      MT_CHECK(ne, MT_ERR_MEM, "checkpoint state: cannot grow to %d entries", cap);
      s->e = ne;
      s->cap = cap;
    }
    e = &s->e[s->n++];
  } else {
    free(e->p);
  }
  memset(e, 0, sizeof(*e));
  snprintf(e->key, sizeof(e->key), "%s", key);
  *out = e;
  return 0;
}

/* Drops the entry just made by state_slot (when its value cannot be set). */
static void state_drop(mt_ckpt_state *s, mt_ckpt_entry *e) {
  free(e->p);
  int i = (int)(e - s->e);
  memmove(&s->e[i], &s->e[i + 1], (size_t)(s->n - i - 1) * sizeof(*e));
  s->n--;
}

int mt_ckpt_state_set_i64(mt_ckpt_state *s, const char *key, int64_t v) {
  mt_ckpt_entry *e;
  MT_CALL(state_slot(s, key, &e));
  e->type = MT_CKPT_I64;
  e->n = 1;
  e->i = v;
  return 0;
}

int mt_ckpt_state_set_f64(mt_ckpt_state *s, const char *key, double v) {
  mt_ckpt_entry *e;
  MT_CALL(state_slot(s, key, &e));
  e->type = MT_CKPT_F64;
  e->n = 1;
  e->f = v;
  return 0;
}

static int set_bytes(mt_ckpt_state *s, const char *key, mt_ckpt_type type, const void *v,
                     size_t n, size_t elem, size_t extra) {
  MT_CHECK(v || n == 0, MT_ERR_ARG, "checkpoint state: NULL value for %s", key ? key : "");
  mt_ckpt_entry *e;
  MT_CALL(state_slot(s, key, &e));
  e->type = type;
  e->n = n;
  e->p = malloc(n * elem + extra + 1);
  if (!e->p) {
    state_drop(s, e);
    return MT_ERR(MT_ERR_MEM, "checkpoint state: no memory for %s (%zu values)", key, n);
  }
  if (n) memcpy(e->p, v, n * elem);
  memset((char *)e->p + n * elem, 0, extra + 1);
  return 0;
}

int mt_ckpt_state_set_str(mt_ckpt_state *s, const char *key, const char *v) {
  MT_CHECK(v, MT_ERR_ARG, "checkpoint state: NULL string for %s", key ? key : "");
  return set_bytes(s, key, MT_CKPT_STR, v, strlen(v), 1, 0);
}

int mt_ckpt_state_set_i64s(mt_ckpt_state *s, const char *key, const int64_t *v, size_t n) {
  return set_bytes(s, key, MT_CKPT_I64S, v, n, sizeof(int64_t), 0);
}

int mt_ckpt_state_set_f64s(mt_ckpt_state *s, const char *key, const double *v, size_t n) {
  return set_bytes(s, key, MT_CKPT_F64S, v, n, sizeof(double), 0);
}

static const char *type_name(mt_ckpt_type t) {
  switch (t) {
  case MT_CKPT_I64: return "an int64";
  case MT_CKPT_F64: return "a double";
  case MT_CKPT_STR: return "a string";
  case MT_CKPT_I64S: return "an int64 array";
  case MT_CKPT_F64S: return "a double array";
  }
  return "an unknown type";
}

static int state_get(const mt_ckpt_state *s, const char *key, mt_ckpt_type type,
                     const mt_ckpt_entry **e) {
  *e = mt_ckpt_state_find(s, key);
  MT_CHECK(*e, MT_ERR_DATA, "checkpoint state has no entry %s", key ? key : "(null)");
  MT_CHECK((*e)->type == type, MT_ERR_DATA, "checkpoint state entry %s is %s, not %s", key,
           type_name((*e)->type), type_name(type));
  return 0;
}

int mt_ckpt_state_get_i64(const mt_ckpt_state *s, const char *key, int64_t *v) {
  const mt_ckpt_entry *e;
  MT_CALL(state_get(s, key, MT_CKPT_I64, &e));
  *v = e->i;
  return 0;
}

int mt_ckpt_state_get_f64(const mt_ckpt_state *s, const char *key, double *v) {
  const mt_ckpt_entry *e;
  MT_CALL(state_get(s, key, MT_CKPT_F64, &e));
  *v = e->f;
  return 0;
}

int mt_ckpt_state_get_str(const mt_ckpt_state *s, const char *key, const char **v) {
  const mt_ckpt_entry *e;
  MT_CALL(state_get(s, key, MT_CKPT_STR, &e));
  *v = e->p;
  return 0;
}

int mt_ckpt_state_get_i64s(const mt_ckpt_state *s, const char *key, const int64_t **v,
                           size_t *n) {
  const mt_ckpt_entry *e;
  MT_CALL(state_get(s, key, MT_CKPT_I64S, &e));
  *v = e->p;
  *n = e->n;
  return 0;
}

int mt_ckpt_state_get_f64s(const mt_ckpt_state *s, const char *key, const double **v,
                           size_t *n) {
  const mt_ckpt_entry *e;
  MT_CALL(state_get(s, key, MT_CKPT_F64S, &e));
  *v = e->p;
  *n = e->n;
  return 0;
}

void mt_ckpt_state_free(mt_ckpt_state *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) free(s->e[i].p);
  free(s->e);
  memset(s, 0, sizeof(*s));
}

/* ========================================== pack into, unpack from HDF5 */

int mt_ckpt_state_write(hid_t file, hid_t gcpl, const char *path, const mt_ckpt_state *st) {
  hid_t g = H5Gcreate2(file, MT_CKPT_STATE_GROUP, H5P_DEFAULT, gcpl, H5P_DEFAULT);
  if (g < 0) return MT_ERR(MT_ERR_HDF5, "checkpoint %s: cannot create /%s", path,
                           MT_CKPT_STATE_GROUP);
  int err = 0;
  for (int i = 0; st && i < st->n && !err; i++) {
    const mt_ckpt_entry *e = &st->e[i];
    switch (e->type) {
    case MT_CKPT_I64:
      err = mt_ckpt_attr_int(g, e->key, H5T_STD_I64LE, H5T_NATIVE_INT64, &e->i);
      break;
    case MT_CKPT_F64:
      err = mt_ckpt_attr_int(g, e->key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &e->f);
      break;
    case MT_CKPT_STR:
      err = mt_ckpt_attr_str(g, e->key, e->p);
      break;
    case MT_CKPT_I64S:
      err = mt_ckpt_attr_array(g, e->key, H5T_STD_I64LE, H5T_NATIVE_INT64, e->n, e->p);
      break;
    case MT_CKPT_F64S:
      err = mt_ckpt_attr_array(g, e->key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, e->n, e->p);
      break;
    default:
      err = MT_ERR(MT_ERR_ARG, "checkpoint state entry %s has an invalid type", e->key);
    }
  }
  if (H5Gclose(g) < 0 && !err) err = MT_ERR(MT_ERR_HDF5, "closing /%s failed", MT_CKPT_STATE_GROUP);
  return err;
}

static int read_entry(hid_t a, const char *path, mt_ckpt_state *st) {
  char key[MT_NAME_MAX];
  ssize_t kl = H5Aget_name(a, sizeof(key), key);
  if (kl < 0 || kl >= MT_NAME_MAX)
    return MT_ERR(MT_ERR_DATA, "checkpoint %s: an entry of /%s has an unreadable or too long name",
                  path, MT_CKPT_STATE_GROUP);
  hid_t ty = H5Aget_type(a), sp = H5Aget_space(a);
  H5T_class_t cls = ty >= 0 ? H5Tget_class(ty) : H5T_NO_CLASS;
  H5S_class_t sc = sp >= 0 ? H5Sget_simple_extent_type(sp) : H5S_NO_CLASS;
  hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
  int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  if (sp >= 0) H5Sclose(sp);
  if (ty >= 0) H5Tclose(ty);
  int num = cls == H5T_INTEGER || cls == H5T_FLOAT, err = 0;
  hid_t mt = cls == H5T_INTEGER ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
  if (cls == H5T_STRING && sc == H5S_SCALAR) {
    char *s;
    if (mt_ckpt_attr_read_str_id(a, &s)) goto bad;
    err = mt_ckpt_state_set_str(st, key, s);
    free(s);
  } else if (num && sc == H5S_SCALAR) {
    int64_t i;
    double f;
    if (H5Aread(a, mt, cls == H5T_INTEGER ? (void *)&i : (void *)&f) < 0) goto bad;
    err = cls == H5T_INTEGER ? mt_ckpt_state_set_i64(st, key, i)
                             : mt_ckpt_state_set_f64(st, key, f);
  } else if (num && (sc == H5S_NULL || (sc == H5S_SIMPLE && nd == 1))) {
    size_t n = sc == H5S_NULL ? 0 : (size_t)np;
    void *v = malloc(n * 8 + 8);
    if (!v) return MT_ERR(MT_ERR_MEM, "checkpoint %s: state entry %s (%zu values)", path, key, n);
    if (n && H5Aread(a, mt, v) < 0) {
      free(v);
      goto bad;
    }
    err = cls == H5T_INTEGER ? mt_ckpt_state_set_i64s(st, key, v, n)
                             : mt_ckpt_state_set_f64s(st, key, v, n);
    free(v);
  } else {
    goto bad;
  }
  return err;
bad:
  return MT_ERR(MT_ERR_DATA, "checkpoint %s: state entry %s is unreadable or of an unsupported "
                "type (int64, double, string, 1-d int64 or double array)", path, key);
}

int mt_ckpt_state_read(hid_t file, const char *path, mt_ckpt_state *st) {
  htri_t ex = H5Lexists(file, MT_CKPT_STATE_GROUP, H5P_DEFAULT);
  MT_CHECK(ex > 0, MT_ERR_DATA, "checkpoint %s: has no group /%s", path, MT_CKPT_STATE_GROUP);
  hid_t g = H5Gopen2(file, MT_CKPT_STATE_GROUP, H5P_DEFAULT);
  if (g < 0)
    return MT_ERR(MT_ERR_DATA, "checkpoint %s: cannot open /%s", path, MT_CKPT_STATE_GROUP);
  /* in the order written when the file tracks it, else by name */
  H5_index_t idx = H5_INDEX_NAME;
  unsigned flags = 0;
  hid_t gcpl = H5Gget_create_plist(g);
  if (gcpl >= 0 && H5Pget_attr_creation_order(gcpl, &flags) >= 0 && (flags & H5P_CRT_ORDER_INDEXED))
    idx = H5_INDEX_CRT_ORDER;
  if (gcpl >= 0) H5Pclose(gcpl);
  H5O_info_t oi;
  int err = 0;
  if (H5Oget_info2(g, &oi, H5O_INFO_NUM_ATTRS) < 0)
    err = MT_ERR(MT_ERR_DATA, "checkpoint %s: cannot count the entries of /%s", path,
                 MT_CKPT_STATE_GROUP);
  for (hsize_t i = 0; !err && i < oi.num_attrs; i++) {
    hid_t a = H5Aopen_by_idx(g, ".", idx, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) {
      err = MT_ERR(MT_ERR_DATA, "checkpoint %s: cannot open entry %llu of /%s", path,
                   (unsigned long long)i, MT_CKPT_STATE_GROUP);
      break;
    }
    err = read_entry(a, path, st);
    H5Aclose(a);
  }
  H5Gclose(g);
  return err;
}
