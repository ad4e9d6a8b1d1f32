/* Checkpoint files, the trainer state: typed key/value entries kept in a
 * checkpoint as the attributes of /trainer_state (layout: ckpt_format.h).
 * The store itself (set, get, find, free) touches no file; packing and
 * unpacking (mt_ckpt_state_write, mt_ckpt_state_read) are for the writer and
 * the reader of checkpoint files, under mt_h5_lock(). Above ckpt_format. */
#ifndef MT_CKPT_STATE_H
#define MT_CKPT_STATE_H

#include "io/ckpt_format.h"

typedef enum {
  MT_CKPT_I64 = 1, /* int64 scalar                                          */
  MT_CKPT_F64,     /* double scalar                                         */
  MT_CKPT_STR,     /* string                                                */
  MT_CKPT_I64S,    /* int64 array                                           */
  MT_CKPT_F64S     /* double array                                          */
} mt_ckpt_type;

typedef struct {
  char key[MT_NAME_MAX];
  mt_ckpt_type type;
  size_t n;     /* array length; string length (without the NUL); 1 scalar  */
  int64_t i;    /* MT_CKPT_I64                                              */
  double f;     /* MT_CKPT_F64                                              */
  void *p;      /* arrays and strings, owned by the state                   */
} mt_ckpt_entry;

/* Typed key/value entries saved as attributes of /trainer_state: epoch,
 * step in epoch, global step, rng keys, sampler position, schedule state,
 * the learning curve as arrays, loss-scaler and accountant slots, ...
 * A zero-filled struct is an empty state; mt_ckpt_state_free empties it.
 * Keys are 1 to MT_NAME_MAX-1 printable characters without '/'. Setting an
 * existing key replaces its value (and type). Unsigned 64-bit values (rng
 * keys) are stored as int64 with the same bits: cast both ways. */
typedef struct {
  mt_ckpt_entry *e;
  int n, cap;
} mt_ckpt_state;

/* ------------------------------------------------------------ the store */

/* Setters: key gets v (arrays and strings are copied into s; v may be NULL
 * when n is 0). Fail with MT_ERR_ARG naming the key when it is invalid or
 * v is NULL (s unchanged), MT_ERR_MEM when s cannot grow (unchanged) or
 * the copy cannot be made (then key is no longer in s). */
int mt_ckpt_state_set_i64(mt_ckpt_state *s, const char *key, int64_t v);
int mt_ckpt_state_set_f64(mt_ckpt_state *s, const char *key, double v);
int mt_ckpt_state_set_str(mt_ckpt_state *s, const char *key, const char *v);
int mt_ckpt_state_set_i64s(mt_ckpt_state *s, const char *key, const int64_t *v, size_t n);
int mt_ckpt_state_set_f64s(mt_ckpt_state *s, const char *key, const double *v, size_t n);
/* The entry called key, or NULL. */
const mt_ckpt_entry *mt_ckpt_state_find(const mt_ckpt_state *s, const char *key);
/* Getters fail with MT_ERR_DATA naming the key when it is missing or holds
 * another type. Array and string pointers point into s (valid until s
 * changes); *n receives the array length. */
int mt_ckpt_state_get_i64(const mt_ckpt_state *s, const char *key, int64_t *v);
int mt_ckpt_state_get_f64(const mt_ckpt_state *s, const char *key, double *v);
int mt_ckpt_state_get_str(const mt_ckpt_state *s, const char *key, const char **v);
int mt_ckpt_state_get_i64s(const mt_ckpt_state *s, const char *key, const int64_t **v,
                           size_t *n);
int mt_ckpt_state_get_f64s(const mt_ckpt_state *s, const char *key, const double **v,
                           size_t *n);
/* Frees every entry and leaves s empty (zero-filled); s may be NULL. */
void mt_ckpt_state_free(mt_ckpt_state *s);

/* ------------------------------------------------------ pack and unpack */

/* Creates the group /trainer_state in file (with the group creation list
 * gcpl) and writes every entry of st (may be NULL: none) as one of its
 * attributes. Not collective by itself: under the MPI-IO driver every rank
 * makes the same calls with the same st. Fails (MT_ERR_HDF5; MT_ERR_ARG for
 * an entry of no known type) naming the file or the entry. */
int mt_ckpt_state_write(hid_t file, hid_t gcpl, const char *path, const mt_ckpt_state *st);
/* Reads the entries of /trainer_state into st (empty on entry). Fails
 * (MT_ERR_DATA; MT_ERR_MEM) naming path, and the entry where one is at
 * fault, when the group is missing or an entry is unreadable or of another
 * type; st then holds the entries read before it (the caller frees st). */
int mt_ckpt_state_read(hid_t file, const char *path, mt_ckpt_state *st);

#endif
