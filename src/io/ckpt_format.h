/* Checkpoint files, the format: what a checkpoint file looks like on disk,
 * the names it may hold, its checksum, and the HDF5 helpers (types,
 * property lists, attributes, datasets) that the writer, the reader, the
 * trainer state and the per-sample outputs share. The lowest layer of the
 * checkpoint code (checkpoint.h lists the others); it needs only io.h.
 *
 * File layout (format version MT_CKPT_FORMAT):
 *
 *   /                       attributes: format (int), mpitrain_version,
 *                           world_size (int), backend, options (strings),
 *                           created (UTC time), checksum_algorithm,
 *                           run_id (16 hex digits: the run that wrote it,
 *                           the same across its restarts; absent in older
 *                           files; pruning removes only its run's files)
 *   /<buffer>/<tensor>      float32 dataset with the tensor's shape, e.g.
 *                           /params/layers.0.weight, /exp_avg/layers.0.weight
 *                           (float64 for a run under -precision fp64: all
 *                           tensors of a file have the type of its run);
 *                           attribute checksum: uint64[2] (below)
 *   /trainer_state          a group whose attributes are the trainer's typed
 *                           key/value entries (mt_ckpt_state): int64 and
 *                           double scalars, strings, int64 and double arrays
 *
 * Checksum ("mt-possum-1"). For a tensor with elements x_0 .. x_{N-1} in
 * row-major order, let u_i be the 32-bit pattern of x_i (float32; the
 * 64-bit pattern for float64). The stored value is
 *
 *     { sum_i u_i ,  sum_i (i + 1) * u_i }   both modulo 2^64.
 *
 * Both sums are linear, so the part of any slice [a, b) adds up to the whole
 * whatever the split: each rank sums the elements it writes (or reads), one
 * MPI_Allreduce adds the parts, and the value is the same bit for bit at any
 * rank count. Any change of a single element (a flipped byte) changes the
 * first sum; moved or swapped elements change the second. The checksum is
 * verified on every read and by mt_ckpt_verify. (HDF5's Fletcher32 filter
 * was not used: it needs chunked storage, and parallel filtered writes in
 * HDF5 1.10 redistribute whole chunks between ranks; see bench/ckpt_bench.c.)
 *
 * Nothing here is collective. Functions that return int return 0 or an
 * MT_ERR_* code (with its message), except where a comment says -1. HDF5
 * calls are made under mt_h5_lock() by the caller. */
#ifndef MT_CKPT_FORMAT_H
#define MT_CKPT_FORMAT_H

#include "io/io.h"

#define MT_CKPT_FORMAT 1
#define MT_CKPT_MAX_BUFS 16
#define MT_CKPT_STATE_GROUP "trainer_state"
#define MT_CKPT_CHECKSUM_NAME "mt-possum-1"

/* ---------------------------------------------------------------- names */

/* Whether name is a valid key / buffer name: 1 to MT_NAME_MAX-1
 * characters, not ".", no '/' and no control characters. */
int mt_ckpt_name_ok(const char *name);

/* ------------------------------------------------------------- checksum */

/* Adds to s the checksum part of n elements that start at row-major index
 * i0 of their tensor: float elements (32-bit patterns), or double ones
 * (64-bit patterns) with mt_ckpt_sum64; mt_ckpt_sum_dt picks by dtype. */
void mt_ckpt_sum(const float *x, size_t n, uint64_t i0, uint64_t s[2]);
void mt_ckpt_sum64(const double *x, size_t n, uint64_t i0, uint64_t s[2]);
void mt_ckpt_sum_dt(mt_dtype dtype, const void *x, size_t n, uint64_t i0, uint64_t s[2]);

/* Compares the summed checksums sums[2k..2k+1] with the stored ones for
 * k < n (the same on all ranks); the first mismatch fails with MT_ERR_DATA
 * naming the file and the tensor (name(ctx, k, buf, cap) returns its name,
 * written into buf) and both values. */
int mt_ckpt_checksum_compare(const char *path, const uint64_t *sums, const uint64_t *stored,
                             int n, const char *(*name)(void *, int, char *, size_t),
                             void *ctx);

/* ----------------------------------------------------- HDF5 types, lists */

/* Bytes of an element, its HDF5 file and memory types, for a dtype. */
size_t mt_ckpt_esz(mt_dtype dtype);
hid_t mt_ckpt_h5_file_type(mt_dtype dtype);
hid_t mt_ckpt_h5_mem_type(mt_dtype dtype);

/* File access list for the MPI-IO driver over comm (collective metadata),
 * a collective transfer list; H5I_INVALID_HID on failure. The caller
 * closes them (H5Pclose). */
/* Objects of this many bytes or more start on a multiple of it (file
 * system stripes): mt_ckpt_fapl's alignment. */
#define MT_CKPT_ALIGN ((hsize_t)1 << 20)
hid_t mt_ckpt_fapl(MPI_Comm comm);
hid_t mt_ckpt_dxpl(void);

/* The most specific message of HDF5's error stack (after a failed call). */
void mt_ckpt_h5_reason(char *buf, size_t cap);
/* "(10, 784)" */
void mt_ckpt_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* ----------------------------------------------------------- attributes */

/* Attributes: scalar int, string, and a 1-d array (n >= 0). */
int mt_ckpt_attr_int(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v);
int mt_ckpt_attr_str(hid_t loc, const char *name, const char *v);
int mt_ckpt_attr_array(hid_t loc, const char *name, hid_t ftype, hid_t mtype, size_t n,
                       const void *v);
/* Reads a string attribute (fixed or variable length) into a new string. */
int mt_ckpt_attr_read_str(hid_t loc, const char *name, char **out);
/* The same for the open scalar attribute a: *out a new string (free it),
 * or NULL and -1 (no message) when a is not one or cannot be read. */
int mt_ckpt_attr_read_str_id(hid_t a, char **out);

/* ------------------------------------------------------------- datasets */

/* The tensor's checksum attribute of dataset d into s[2]; -1 (no message)
 * when it is missing or is not two integers. */
int mt_ckpt_checksum_read(hid_t d, uint64_t s[2]);
/* The file's shape of dataset d (*nd dimensions, the first MT_MAX_DIMS of
 * them into shape) and its element type into *bits: 32 (float32), 64
 * (float64) or 0 (anything else); -1 (no message) when they cannot be read. */
int mt_ckpt_dataset_shape(hid_t d, int *nd, int64_t *shape, int *bits);

#endif
