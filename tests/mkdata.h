/* Shared by the files of mkdata (mkdata*.c): the error line, the integer
 * argument parser, and each subcommand's entry. A subcommand gets the
 * arguments after its name and returns the exit status: 0 success, 1
 * failure (one line on stderr), 2 usage error. */
#ifndef MT_MKDATA_H
#define MT_MKDATA_H

/* "mkdata: error: " and the message, one line on stderr */
void mk_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* *v = s as an integer in lo..hi; else -1 and an error naming what */
int mk_parse_long(const char *s, long lo, long hi, const char *what, long *v);

/* data files (mkdata_make.c) */
int cmd_synth(int argc, char **argv);
int cmd_regress(int argc, char **argv);
int cmd_bad(int argc, char **argv);
/* any HDF5 file's datasets (mkdata_inspect.c) */
int cmd_compare(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_types(int argc, char **argv);
/* outputs files (mkdata_outputs.c) */
int cmd_outstats(int argc, char **argv);
int cmd_rows(int argc, char **argv);
int cmd_outindex(int argc, char **argv);
/* changes to a file in place (mkdata_edit.c) */
int cmd_flip(int argc, char **argv);
int cmd_unattr(int argc, char **argv);
int cmd_unlink(int argc, char **argv);

#endif
