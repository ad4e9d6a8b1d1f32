/* Small per-rank values of mixed types gathered to every rank. */
#include "comm/comm.h"
#include "core/core.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

mt_value mt_value_i64(int64_t v) {
  mt_value x;
  memset(&x, 0, sizeof(x));
  x.type = MT_VALUE_I64;
  x.i = v;
  return x;
}

mt_value mt_value_f64(double v) {
  mt_value x;
  memset(&x, 0, sizeof(x));
  x.type = MT_VALUE_F64;
  x.f = v;
  return x;
}

mt_value mt_value_str(const char *v) {
  mt_value x;
  memset(&x, 0, sizeof(x));
  x.type = MT_VALUE_STR;
  snprintf(x.s, sizeof(x.s), "%s", v ? v : "");
  return x;
}

static const char *type_name(int type) {
  switch (type) {
  case MT_VALUE_I64: return "int64";
  case MT_VALUE_F64: return "double";
  case MT_VALUE_STR: return "string";
  default: return "invalid";
  }
}

/* The MPI datatype of one mt_value: its four fields at their offsets, with
 * the struct's extent (so an array of them is described exactly). */
static int value_type(MPI_Datatype *dt) {
  int len[4] = {1, 1, 1, MT_VALUE_STR_MAX};
  MPI_Aint off[4] = {offsetof(mt_value, type), offsetof(mt_value, i), offsetof(mt_value, f),
                     offsetof(mt_value, s)};
  MPI_Datatype ty[4] = {MPI_INT, MPI_INT64_T, MPI_DOUBLE, MPI_CHAR}, raw;
  MT_MPI(MPI_Type_create_struct(4, len, off, ty, &raw));
  int rc = MPI_Type_create_resized(raw, 0, (MPI_Aint)sizeof(mt_value), dt);
  MPI_Type_free(&raw);
  if (rc != MPI_SUCCESS) return mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Type_create_resized");
  rc = MPI_Type_commit(dt);
  if (rc != MPI_SUCCESS) {
    MPI_Type_free(dt);
    return mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Type_commit");
  }
  return 0;
}

int mt_allgather_values(MPI_Comm comm, const mt_value *mine, int n, mt_value *all) {
  int size;
  MT_MPI(MPI_Comm_size(comm, &size));
  /* the same n everywhere, or the all-gather below would be erroneous */
  int nn[2] = {n, -n};
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, nn, 2, MPI_INT, MPI_MAX, comm));
  if (nn[0] != -nn[1] || n < 0)
    return mt_agree(comm, MT_ERR(MT_ERR_ARG, "all-gather of values: the ranks pass from %d to %d "
                                 "values", -nn[1], nn[0]));
  if (n == 0) return 0;
  MPI_Datatype dt;
  MT_CALL(value_type(&dt));
  int rc = MPI_Allgather(mine, n, dt, all, n, dt, comm);
  MPI_Type_free(&dt);
  if (rc != MPI_SUCCESS) return mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Allgather");
  /* every rank holds the same table, so every rank finds the same fault */
  int err = 0;
  for (int r = 0; r < size && !err; r++)
    for (int k = 0; k < n && !err; k++) {
      mt_value *v = &all[(size_t)r * n + k];
      v->s[MT_VALUE_STR_MAX - 1] = '\0';
      if (v->type < MT_VALUE_I64 || v->type > MT_VALUE_STR || v->type != all[k].type)
        err = MT_ERR(MT_ERR_ARG, "all-gather of values: rank %d passes a %s at position %d, "
                     "rank 0 a %s", r, type_name(v->type), k, type_name(all[k].type));
    }
  if (err) return mt_agree(comm, err);
  return 0;
}
