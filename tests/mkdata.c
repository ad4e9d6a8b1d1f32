/* mkdata: data files and checks for the test scripts.
 *
 *   mkdata synth OUT.h5 N D C SEED [uint8|image]  learnable synthetic classes
 *   mkdata regress OUT.h5 N D K SEED         float targets y (N,K) of x (N,D)
 *   mkdata bad KIND OUT.h5                   a small file broken in one way
 *   mkdata compare A.h5 B.h5 RTOL [SKIP]     float32 and float64 datasets of A vs
 *                                            B (names containing SKIP left out;
 *                                            compared as doubles, so float32
 *                                            against float64 works too)
 *   mkdata types FILE.h5 [float32|float64]   each root dataset's type; with a
 *                                            type: every float dataset of it
 *   mkdata flip FILE.h5 DATASET [BYTE]       flips the lowest bit of byte BYTE
 *                                            (default 0) of a contiguous
 *                                            dataset's data in the file
 *   mkdata unattr FILE.h5 NAME               removes root attribute NAME
 *   mkdata unlink FILE.h5 NAME               removes root dataset NAME (a data
 *                                            file without /y: -mode predict's)
 *   mkdata stats FILE.h5                     shapes, label histogram, mean x
 *   mkdata outstats FILE.h5 [N]              an outputs file (src/io/outputs.h):
 *                                            rows in order, mean loss, accuracy
 *   mkdata rows A.h5 B.h5 RTOL [subset]      outputs files row by row
 *   mkdata outindex FILE.h5                  an outputs file's /index, one a line
 *
 * synth: class c has a mean vector m_c (entries N(0, 1.5^2), fixed by D and C
 * so that sets made with different seeds are the same task); a sample of
 * class y is m_y + N(0, 1) noise, so classes are well separated and an MLP
 * reaches high accuracy. float32 by default; with "uint8" the value
 * v = 0.5 + x/12 is stored as round(255 v) clipped to 0..255 with scale 1/255.
 * With "image" (D a square s*s) /x is float32 (N, 1, s, s), for the cnn.
 * The file is a function of (N, D, C, SEED) only.
 *
 * Exit status: 0 success, 1 failure (one line on stderr), 2 usage error.
 *
 * This file: the command line (main) and the helpers of mkdata.h; the
 * subcommands are in mkdata_make.c (synth, regress, bad), mkdata_inspect.c
 * (compare, stats, types), mkdata_outputs.c (outstats, rows, outindex) and
 * mkdata_edit.c (flip, unattr, unlink). */
#include "mkdata.h"

#include <hdf5.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mk_fail(const char *fmt, ...) {
  va_list ap;
  fputs("mkdata: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int mk_parse_long(const char *s, long lo, long hi, const char *what, long *v) {
  char *end;
  *v = strtol(s, &end, 10);
  if (!*s || *end || *v < lo || *v > hi) {
    mk_fail("%s: '%s' is not an integer in %ld..%ld", what, s, lo, hi);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  if (argc >= 2 && !strcmp(argv[1], "synth")) return cmd_synth(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "bad")) return cmd_bad(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "regress")) return cmd_regress(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "compare")) return cmd_compare(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "stats")) return cmd_stats(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "outstats")) return cmd_outstats(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "rows")) return cmd_rows(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "outindex")) return cmd_outindex(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "types")) return cmd_types(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "flip")) return cmd_flip(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "unattr")) return cmd_unattr(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "unlink")) return cmd_unlink(argc - 2, argv + 2);
  fprintf(stderr,
          "usage: mkdata synth OUT.h5 N D C SEED [uint8|image]\n"
          "       mkdata regress OUT.h5 N D K SEED\n"
          "       mkdata bad KIND OUT.h5   (KIND: nox noy xdtype ydtype xrank nmismatch\n"
          "                                 label_high label_neg empty garbage noclasses noscale\n"
          "                                 hugeclasses)\n"
          "       mkdata compare A.h5 B.h5 RTOL [SKIP]\n"
          "       mkdata stats FILE.h5\n"
          "       mkdata outstats FILE.h5 [N]\n"
          "       mkdata rows A.h5 B.h5 RTOL [subset]\n"
          "       mkdata outindex FILE.h5\n"
          "       mkdata types FILE.h5 [float32|float64]\n"
          "       mkdata flip FILE.h5 DATASET [BYTE]\n"
          "       mkdata unattr FILE.h5 NAME\n"
          "       mkdata unlink FILE.h5 NAME\n");
  return 2;
}
