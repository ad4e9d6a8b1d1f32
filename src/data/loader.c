/* Prefetching loader: two slots; a reader thread fills batch b+1 while the
 * caller computes on batch b. Batch b lives in slot b % 2; the thread may
 * read batch r once the caller has released batch r-2 (asked for r-1). */
#include "data/data.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct mt_loader {
  mt_dataset *d;
  int max_rows, prefetch;
  /* the plan */
  int64_t *idx;
  int64_t *off;
  int *counts;
  int nb, cap_idx, cap_b;
  /* slots */
  float *x[2];
  int32_t *y[2];
  float *t[2];
  int32_t *tok[2];
  void *scratch[2];
  int slot_batch[2]; /* batch held by the slot, -1 if none               */
  int next_read;     /* next batch the thread reads                        */
  int released;      /* batches the caller is done with                    */
  int handed;        /* batches handed out                                 */
  /* thread */
  pthread_t th;
  int has_thread, stop, busy, err;
  char errmsg[1024];
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static int read_batch(mt_loader *L, int b, int slot) {
  return mt_dataset_read(L->d, L->idx + L->off[b], L->counts[b], L->x[slot], L->y[slot],
                         L->t[slot], L->tok[slot], L->scratch[slot]);
}

static void *reader(void *arg) {
  mt_loader *L = arg;
  pthread_mutex_lock(&L->mu);
  for (;;) {
    while (!L->stop && (L->err || L->next_read >= L->nb || L->next_read >= L->released + 2))
      pthread_cond_wait(&L->cv, &L->mu);
    if (L->stop) break;
    int b = L->next_read, slot = b % 2;
    L->busy = 1;
    pthread_mutex_unlock(&L->mu);
    int e = read_batch(L, b, slot);
    pthread_mutex_lock(&L->mu);
    L->busy = 0;
    if (e) {
      L->err = e;
      snprintf(L->errmsg, sizeof(L->errmsg), "%s", mt_error_message());
      mt_error_clear();
    } else {
      L->slot_batch[slot] = b;
      L->next_read = b + 1;
    }
    pthread_cond_broadcast(&L->cv);
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

int mt_loader_create(mt_loader **out, mt_dataset *d, int max_rows, int prefetch) {
  mt_loader *L;
  *out = NULL;
  MT_CALL(mt_calloc(&L, 1, sizeof(*L), "loader"));
  L->d = d;
  L->max_rows = max_rows;
  L->prefetch = prefetch;
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv, NULL);
  *out = L;
  size_t rows = (size_t)max_rows, feat = (size_t)d->spec.sample_numel;
  for (int s = 0; s < 2; s++) {
    if (d->spec.tokens) {
      MT_CALL(mt_calloc(&L->tok[s], rows * (feat + 1), sizeof(int32_t), "token batch"));
    } else {
      MT_CALL(mt_calloc(&L->x[s], rows * feat, sizeof(float), "input batch"));
      MT_CALL(mt_calloc(&L->y[s], rows, sizeof(int32_t), "label batch"));
      if (d->spec.ntargets)
        MT_CALL(mt_calloc(&L->t[s], rows * (size_t)d->spec.ntargets, sizeof(float), "target batch"));
    }
    size_t scratch = mt_dataset_scratch_size(d, max_rows);
    if (scratch) MT_CALL(mt_calloc(&L->scratch[s], scratch, 1, "read buffer"));
    L->slot_batch[s] = -1;
  }
  if (prefetch) {
    MT_CHECK(pthread_create(&L->th, NULL, reader, L) == 0, MT_ERR_STATE,
             "cannot start the data loader thread");
    L->has_thread = 1;
  }
  return 0;
}

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int mt_loader_start(mt_loader *L, const int64_t *idx, const int *counts, int nb) {
  pthread_mutex_lock(&L->mu);
  while (L->busy) pthread_cond_wait(&L->cv, &L->mu);
  int64_t total = 0;
  for (int b = 0; b < nb; b++) total += counts[b];
  int err = 0;
  if (total > L->cap_idx) {
    mt_free(&L->idx);
    err = mt_calloc(&L->idx, (size_t)total, sizeof(int64_t), "batch plan");
    L->cap_idx = err ? 0 : (int)total;
  }
  if (!err && nb > L->cap_b) {
    mt_free(&L->off);
    mt_free(&L->counts);
    err = mt_calloc(&L->off, (size_t)nb, sizeof(int64_t), "batch plan");
    if (!err) err = mt_calloc(&L->counts, (size_t)nb, sizeof(int), "batch plan");
    L->cap_b = err ? 0 : nb;
  }
  if (!err) {
    int64_t o = 0;
    for (int b = 0; b < nb; b++) {
      if (counts[b] > L->max_rows) {
        err = MT_ERR(MT_ERR_ARG, "batch of %d rows exceeds the loader's %d", counts[b], L->max_rows);
        break;
      }
      L->off[b] = o;
      L->counts[b] = counts[b];
      memcpy(L->idx + o, idx + o, (size_t)counts[b] * sizeof(int64_t));
      qsort(L->idx + o, (size_t)counts[b], sizeof(int64_t), cmp64);
      o += counts[b];
    }
  }
  L->nb = err ? 0 : nb;
  L->next_read = L->released = L->handed = 0;
  L->slot_batch[0] = L->slot_batch[1] = -1;
  L->err = 0;
  pthread_cond_broadcast(&L->cv);
  pthread_mutex_unlock(&L->mu);
  return err;
}

int mt_loader_next(mt_loader *L, mt_batch *bt) {
  MT_CHECK(L->handed < L->nb, MT_ERR_STATE, "data loader: no batch left in the plan");
  int b = L->handed, slot = b % 2;
  if (!L->has_thread) {
    MT_CALL(read_batch(L, b, slot));
  } else {
    pthread_mutex_lock(&L->mu);
    L->released = b; /* batches before b are done with */
    pthread_cond_broadcast(&L->cv);
    while (L->slot_batch[slot] != b && !L->err) pthread_cond_wait(&L->cv, &L->mu);
    int err = L->slot_batch[slot] == b ? 0 : L->err;
    pthread_mutex_unlock(&L->mu);
    if (err) return MT_ERR(err, "%s", L->errmsg);
  }
  L->handed++;
  const mt_data_spec *sp = &L->d->spec;
  if (sp->tokens)
    *bt = (mt_batch){.n = L->counts[b], .tokens = L->tok[slot], .tokens_len = sp->sample_numel + 1};
  else if (sp->ntargets)
    *bt = (mt_batch){.n = L->counts[b], .x = L->x[slot], .targets = L->t[slot],
                     .x_len = sp->sample_numel, .targets_len = sp->ntargets};
  else
    *bt = (mt_batch){.n = L->counts[b], .x = L->x[slot], .labels = L->y[slot],
                     .x_len = sp->sample_numel};
  bt->ids = L->idx + L->off[b];
  return 0;
}

void mt_loader_destroy(mt_loader **pL) {
  mt_loader *L = *pL;
  if (!L) return;
  if (L->has_thread) {
    pthread_mutex_lock(&L->mu);
    L->stop = 1;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
    pthread_join(L->th, NULL);
  }
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv);
  for (int s = 0; s < 2; s++) {
    mt_free(&L->x[s]);
    mt_free(&L->y[s]);
    mt_free(&L->t[s]);
    mt_free(&L->tok[s]);
    mt_free(&L->scratch[s]);
  }
  mt_free(&L->idx);
  mt_free(&L->off);
  mt_free(&L->counts);
  mt_free(pL);
}
