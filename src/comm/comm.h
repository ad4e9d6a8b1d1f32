/* The distributed environment: world and node communicators. */
#ifndef MT_COMM_H
#define MT_COMM_H

#include "mpitrain/mpitrain.h"

typedef struct {
  MPI_Comm world; /* a duplicate of MPI_COMM_WORLD owned by mpitrain        */
  MPI_Comm node;  /* ranks sharing memory with this one                    */
  int rank, size;
  int local_rank, local_size; /* within the node                           */
  int nnodes, node_id;
  int node_cores;             /* online cores of this node                 */
} mt_comm;

/* Collective over MPI_COMM_WORLD. */
int mt_comm_create(mt_comm *c);
void mt_comm_destroy(mt_comm *c);
/* Threads per rank: requested if > 0, else the node's cores / its ranks. */
int mt_comm_default_threads(const mt_comm *c, int requested);

#endif
