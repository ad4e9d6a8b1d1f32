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

/* Writes a float32 dataset `name` of the given shape at loc (serial). */
int mt_h5_write_floats(hid_t loc, const char *name, int ndim, const int64_t *shape,
                       const float *data);
/* Writes a scalar attribute to loc. */
int mt_h5_attr_double(hid_t loc, const char *name, double v);
int mt_h5_attr_string(hid_t loc, const char *name, const char *v);

/* Writes every tensor of the model's table from the flat buffer params,
 * and its buffers (m->buf), into a new file (serial, call on one rank), via
 * a temporary name and a rename. */
int mt_h5_save_model(const char *path, const mt_model *m, const float *params);

/* Reads every tensor of the model's table by name from path (PyTorch names
 * and layouts, float32 or any float type) into the flat buffer params, and
 * its buffers into m->buf; a missing tensor or another shape is an error
 * naming the tensor and both shapes. */
int mt_h5_load_model(const char *path, mt_model *m, float *params);

/* The learning curve: one row per epoch and validation set. */
typedef struct {
  int epoch;
  long step;
  double train_loss, lr, samples_per_s, seconds;
  int set;
  double val_loss, val_acc;
} mt_curve_row;

/* Appends rows to DIR/curve.csv and rewrites DIR/curve.h5 (rank 0). */
int mt_curve_write(const char *dir, const mt_curve_row *rows, int nrows,
                   char val_names[][MT_PATH_MAX], int nval);

/* mkdir -p */
int mt_mkdir_p(const char *dir);

#endif
