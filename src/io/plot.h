/* The picture of the run: OUTPUT_DIR/curve.png, drawn by gnuplot from the
 * CSV files the run already writes (curve.csv, dp.csv, loss_scale.csv). */
#ifndef MT_IO_PLOT_H
#define MT_IO_PLOT_H

#include "io/io.h"

/* The picture's size in pixels (tests/test_plot.sh reads it back). */
#define MT_PLOT_WIDTH 1024
#define MT_PLOT_HEIGHT 768

typedef struct {
  const char *dir;           /* OUTPUT_DIR, holding curve.csv          */
  const mt_curve_row *rows;  /* the learning curve (curve.csv's rows)  */
  int nrows;
  char (*val_names)[MT_PATH_MAX]; /* the validation sets' files        */
  int nval;
  const char *title;         /* the picture's heading                  */
  int dp;                    /* DIR/dp.csv holds epsilon by epoch       */
  int loss_scale;            /* DIR/loss_scale.csv holds the scale by step */
  double steps_per_epoch;    /* to put loss_scale.csv's steps in epochs */
  double timeout;            /* seconds gnuplot may take               */
} mt_plot_spec;

/* Rank 0, after curve.csv (and dp.csv, loss_scale.csv) are written: writes
 * DIR/curve.gp and runs gnuplot on it (the program MT_GNUPLOT names, else
 * `gnuplot` on PATH; no shell) with DIR/curve.gp.log taking its messages,
 * into DIR/curve.png.tmp, renamed to DIR/curve.png when gnuplot exits 0.
 * gnuplot is killed (its process group) after p->timeout seconds.
 * Never an error: returns 1 when the picture was drawn, 0 when not, after
 * printing one warning to stderr (gnuplot missing, failed or too slow;
 * a file that could not be written); the caller then stops drawing. */
int mt_plot_curve(const mt_plot_spec *p);

#endif
