/* Checkpoint files, the format: valid names, the checksum ("mt-possum-1")
 * and its check against the stored value, the element types and HDF5 types
 * of a dtype, the parallel property lists, and the attribute and dataset
 * helpers that the writer, the reader and the trainer state share (the
 * per-sample outputs use them too). The lowest layer of the checkpoint code:
 * it calls nothing of the others. Layout and contracts: ckpt_format.h. */
#include "io/ckpt_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ============================================================== names */

int mt_ckpt_name_ok(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n >= MT_NAME_MAX || !strcmp(name, ".")) return 0;
  for (size_t i = 0; i < n; i++)
    if (name[i] == '/' || (unsigned char)name[i] < 32 || name[i] == 127) return 0;
  return 1;
}

/* ========================================================== checksum */

void mt_ckpt_sum64(const double *x, size_t n, uint64_t i0, uint64_t s[2]) {
  /* s[0] += sum u_j; s[1] += sum (i0 + j + 1) u_j, with 64-bit u_j: every
   * product is taken modulo 2^64, as the sums are */
  uint64_t a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (size_t j = 0; j < n; j++) {
    uint64_t u;
    memcpy(&u, &x[j], sizeof(u));
    a += u;
    b += (uint64_t)j * u;
  }
  s[0] += a;
  s[1] += b + (i0 + 1) * a;
}

void mt_ckpt_sum_dt(mt_dtype dtype, const void *x, size_t n, uint64_t i0, uint64_t s[2]) {
  if (dtype == MT_FP64)
    mt_ckpt_sum64(x, n, i0, s);
  else
    mt_ckpt_sum(x, n, i0, s);
}

void mt_ckpt_sum(const float *x, size_t n, uint64_t i0, uint64_t s[2]) {
  /* s[0] += sum u_j; s[1] += sum (i0 + j + 1) u_j, in blocks short enough
   * that the in-block index fits 32 bits (one 32x32->64 multiply). */
  const size_t blk = (size_t)1 << 30;
  for (size_t k = 0; k < n; k += blk) {
    const uint32_t m = (uint32_t)(n - k < blk ? n - k : blk);
    const float *xk = x + k;
    uint64_t a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (uint32_t j = 0; j < m; j++) {
      uint32_t u;
      memcpy(&u, &xk[j], sizeof(u));
      a += u;
      b += (uint64_t)j * u;
    }
    s[0] += a;
    s[1] += b + (i0 + k + 1) * a;
  }
}

int mt_ckpt_checksum_compare(const char *path, const uint64_t *sums, const uint64_t *stored,
                             int n, const char *(*name)(void *, int, char *, size_t),
                             void *ctx) {
  for (int k = 0; k < n; k++) {
    if (sums[2 * k] == stored[2 * k] && sums[2 * k + 1] == stored[2 * k + 1]) continue;
    char nm[2 * MT_NAME_MAX + 2];
    return MT_ERR(MT_ERR_DATA, "checkpoint %s: tensor %s fails its checksum: the file is damaged "
                  "(stored %016llx:%016llx, data gives %016llx:%016llx)", path,
                  name(ctx, k, nm, sizeof(nm)), (unsigned long long)stored[2 * k],
                  (unsigned long long)stored[2 * k + 1], (unsigned long long)sums[2 * k],
                  (unsigned long long)sums[2 * k + 1]);
  }
  return 0;
}

/* ================================ HDF5 types, property lists, messages */

static herr_t reason_walk(unsigned n, const H5E_error2_t *e, void *data) {
  char *buf = ((char **)data)[0];
  size_t cap = (size_t)((char **)data)[1];
  (void)n;
  if (buf[0] == '\0' && e->desc && e->desc[0]) snprintf(buf, cap, "%s", e->desc);
  return 0;
}

void mt_ckpt_h5_reason(char *buf, size_t cap) {
  if (!cap) return;
  buf[0] = '\0';
  void *data[2] = {buf, (void *)cap};
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, reason_walk, data);
  if (!buf[0]) snprintf(buf, cap, "no detail from HDF5");
}

void mt_ckpt_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
  size_t k = 0;
  if (!cap) return;
  buf[0] = '\0';
  k += (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < ndim && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (k < cap) snprintf(buf + k, cap - k, ")");
}

hid_t mt_ckpt_fapl(MPI_Comm comm) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return H5I_INVALID_HID;
  /* collective metadata: rank 0 reads and broadcasts, writes are
   * collective; objects of 1 MiB or more start on a 1 MiB boundary; the
   * 1.8 object format (readable by HDF5 >= 1.8) checksums its metadata and
   * keeps large attributes in dense storage. */
  if (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0 ||
      H5Pset_all_coll_metadata_ops(fapl, 1) < 0 || H5Pset_coll_metadata_write(fapl, 1) < 0 ||
      H5Pset_alignment(fapl, MT_CKPT_ALIGN, MT_CKPT_ALIGN) < 0 ||
      H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0) {
    H5Pclose(fapl);
    return H5I_INVALID_HID;
  }
  return fapl;
}

hid_t mt_ckpt_dxpl(void) {
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (dxpl < 0) return H5I_INVALID_HID;
  if (H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) < 0) {
    H5Pclose(dxpl);
    return H5I_INVALID_HID;
  }
  return dxpl;
}

size_t mt_ckpt_esz(mt_dtype dtype) { return dtype == MT_FP64 ? sizeof(double) : sizeof(float); }

hid_t mt_ckpt_h5_file_type(mt_dtype dtype) {
  return dtype == MT_FP64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
}

hid_t mt_ckpt_h5_mem_type(mt_dtype dtype) {
  return dtype == MT_FP64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT;
}

/* --------------------------------------------------- attribute writing */

static int attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, hid_t space,
                      const void *v) {
  hid_t a = H5Acreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = a < 0 ? -1 : H5Awrite(a, mtype, v);
  if (a >= 0 && H5Aclose(a) < 0) st = -1;
  if (st < 0) {
    char why[256];
    mt_ckpt_h5_reason(why, sizeof(why));
    return MT_ERR(MT_ERR_HDF5, "writing attribute %s failed: %s", name, why);
  }
  return 0;
}

int mt_ckpt_attr_int(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  if (sp < 0) return MT_ERR(MT_ERR_HDF5, "H5Screate for attribute %s failed", name);
  int err = attr_write(loc, name, ftype, mtype, sp, v);
  H5Sclose(sp);
  return err;
}

int mt_ckpt_attr_str(hid_t loc, const char *name, const char *v) {
  hid_t ty = H5Tcopy(H5T_C_S1);
  hid_t sp = H5Screate(H5S_SCALAR);
  int err = 0;
  if (ty < 0 || sp < 0 || H5Tset_size(ty, strlen(v) + 1) < 0 ||
      H5Tset_strpad(ty, H5T_STR_NULLTERM) < 0)
    err = MT_ERR(MT_ERR_HDF5, "making the type of attribute %s failed", name);
  else
    err = attr_write(loc, name, ty, ty, sp, v);
  if (sp >= 0) H5Sclose(sp);
  if (ty >= 0) H5Tclose(ty);
  return err;
}

int mt_ckpt_attr_array(hid_t loc, const char *name, hid_t ftype, hid_t mtype, size_t n,
                       const void *v) {
  hsize_t dim = (hsize_t)n;
  hid_t sp = n ? H5Screate_simple(1, &dim, NULL) : H5Screate(H5S_NULL);
  if (sp < 0) return MT_ERR(MT_ERR_HDF5, "H5Screate for attribute %s failed", name);
  static const char none = 0;
  int err = attr_write(loc, name, ftype, mtype, sp, n ? v : &none);
  H5Sclose(sp);
  return err;
}

/* --------------------------------------------------- attribute reading */

int mt_ckpt_attr_read_str_id(hid_t a, char **out) {
  *out = NULL;
  hid_t ty = H5Aget_type(a), sp = H5Aget_space(a);
  int rc = -1;
  if (ty >= 0 && sp >= 0 && H5Tget_class(ty) == H5T_STRING &&
      H5Sget_simple_extent_npoints(sp) == 1) {
    htri_t vl = H5Tis_variable_str(ty);
    if (vl > 0) {
      hid_t mt = H5Tcopy(H5T_C_S1);
      char *s = NULL;
      if (mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &s) >= 0) {
        *out = strdup(s ? s : "");
        rc = *out ? 0 : -1;
      }
      if (s) H5free_memory(s);
      if (mt >= 0) H5Tclose(mt);
    } else if (vl == 0) {
      size_t n = H5Tget_size(ty);
      char *s = malloc(n + 1);
      if (s && H5Aread(a, ty, s) >= 0) {
        s[n] = '\0';
        *out = s;
        rc = 0;
      } else {
        free(s);
      }
    }
  }
  if (sp >= 0) H5Sclose(sp);
  if (ty >= 0) H5Tclose(ty);
  return rc;
}

int mt_ckpt_attr_read_str(hid_t loc, const char *name, char **out) {
  *out = NULL;
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  int rc = a < 0 ? -1 : mt_ckpt_attr_read_str_id(a, out);
  if (a >= 0) H5Aclose(a);
  if (rc) return MT_ERR(MT_ERR_DATA, "attribute %s is not a readable string", name);
  return 0;
}

/* ------------------------------------------------------------ datasets */

int mt_ckpt_checksum_read(hid_t d, uint64_t s[2]) {
  if (H5Aexists(d, "checksum") <= 0) return -1;
  hid_t a = H5Aopen(d, "checksum", H5P_DEFAULT);
  hid_t sp = a < 0 ? H5I_INVALID_HID : H5Aget_space(a);
  hid_t ty = a < 0 ? H5I_INVALID_HID : H5Aget_type(a);
  int ok = sp >= 0 && ty >= 0 && H5Tget_class(ty) == H5T_INTEGER &&
           H5Sget_simple_extent_npoints(sp) == 2 && H5Aread(a, H5T_NATIVE_UINT64, s) >= 0;
  if (ty >= 0) H5Tclose(ty);
  if (sp >= 0) H5Sclose(sp);
  if (a >= 0) H5Aclose(a);
  return ok ? 0 : -1;
}

int mt_ckpt_dataset_shape(hid_t d, int *nd, int64_t *shape, int *bits) {
  hid_t ty = H5Dget_type(d), sp = H5Dget_space(d);
  const size_t sz = ty >= 0 && H5Tget_class(ty) == H5T_FLOAT ? H5Tget_size(ty) : 0;
  *bits = sz == 4 ? 32 : sz == 8 ? 64 : 0;
  *nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  hsize_t dims[H5S_MAX_RANK];
  int ok = *nd >= 0 && *nd <= H5S_MAX_RANK && H5Sget_simple_extent_dims(sp, dims, NULL) >= 0;
  for (int k = 0; ok && k < *nd && k < MT_MAX_DIMS; k++) shape[k] = (int64_t)dims[k];
  if (sp >= 0) H5Sclose(sp);
  if (ty >= 0) H5Tclose(ty);
  return ok ? 0 : -1;
}
