/* HDF5 helpers shared by data, checkpoints, outputs and metrics. */
#ifndef MT_IO_H
#define MT_IO_H

#include "core/core.h"

#include <hdf5.h>

/* HDF5 here is not built thread-safe: every HDF5 call made while another
 * thread might make one (the prefetching loader) holds this lock. */
void mt_h5_lock(void);
void mt_h5_unlock(void);
/* Silences HDF5's own error stack printing; errors are reported by us. */
void mt_h5_quiet(void);

#define MT_H5(expr)                                                          \
  do {                                                                       \
    if ((expr) < 0) return MT_ERR(MT_ERR_HDF5, "%s failed", #expr);        \
  } while (0)

/* Writes a dataset `name` of the given shape at loc (serial): float32 from
 * float data (mt_h5_write_floats, or mt_h5_write_tensor with MT_FP32),
 * float64 from double data (MT_FP64). */
int mt_h5_write_floats(hid_t loc, const char *name, int ndim, const int64_t *shape,
                       const float *data);
int mt_h5_write_tensor(hid_t loc, const char *name, int ndim, const int64_t *shape,
                       const void *data, mt_dtype dtype);
/* Writes a scalar attribute to loc. */
int mt_h5_attr_double(hid_t loc, const char *name, double v);
int mt_h5_attr_string(hid_t loc, const char *name, const char *v);

/* Writes every tensor of the model's table from the flat buffer params,
 * and its buffers (m->buf), into a new file (serial, call on one rank), via
 * a temporary name and a rename. The buffers' type is the model's
 * (m->dtype): float32 datasets, or float64 ones (from params as double and
 * m->buf64) for MT_FP64. */
int mt_h5_save_model(const char *path, const mt_model *m, const void *params);

/* Reads every tensor of the model's table by name from path (PyTorch names
 * and layouts, float32, float64 or any float type, converted to the model's
 * type) into the flat buffer params (float, or double for MT_FP64), and its
 * buffers into m->buf (m->buf64); a missing tensor or another shape is an
 * error naming the tensor and both shapes; errors name option, the one
 * that gave path ("-init_from", "-model_file"). */
int mt_h5_load_model(const char *path, const char *option, mt_model *m, void *params);

/* The learning curve: one row per epoch and validation set. */
typedef struct {
  int epoch;
  long step;
  double train_loss, lr, samples_per_s, seconds;
  int set;
  double val_loss, val_acc;
  double metric[MT_METRICS_MAX]; /* a user model's metrics (NaN: none)      */
} mt_curve_row;

/* Rewrites DIR/curve.csv and DIR/curve.h5 (rank 0); the first nmetric
 * metric[] values of each row are the columns metric.NAME, NAME from
 * metric_names (NaN is an empty CSV cell). */
int mt_curve_write(const char *dir, const mt_curve_row *rows, int nrows,
                   char val_names[][MT_PATH_MAX], int nval,
                   char metric_names[][MT_METRIC_NAME_MAX], int nmetric);

/* mkdir -p */
/* A text file written whole or not at all: mt_replace_open opens PATH.tmp
 * for writing (its name into tmp, len bytes); mt_replace_commit flushes and
 * closes f and renames it to path. A failure names the file (a full disk
 * or quota: MT_WRITE_FAILED) and leaves no PATH.tmp; path is then as it
 * was. */
int mt_replace_open(const char *path, char *tmp, size_t len, FILE **f);
int mt_replace_commit(FILE *f, const char *tmp, const char *path);
int mt_mkdir_p(const char *dir);

#endif
