/* The integer functions the GPU shares with the CPU (src/cuda/bits.h),
 * checked on the host against the CPU's own, bit for bit (built with CUDA,
 * runs without a GPU: bits.h is plain C outside nvcc, and nvcc compiles
 * the same source for the device):
 *  - bf16 and fp16 -> fp32 on all 65536 inputs each;
 *  - fp32 -> bf16 and fp32 -> fp16 on every fp32 pattern of the exponents
 *    where the rules change (fp16 subnormals and the flush below 2^-25,
 *    the smallest fp16 normals, the overflow at 65520, inf and NaN; both
 *    signs: 2 x 17 x 2^23 patterns), on every 4093rd pattern of the rest,
 *    and on hand-picked ties;
 *  - mt_rand64, mt_randu, mt_key and mt_dropout_key's keys on millions of
 *    (key, counter) pairs;
 *  - the index arithmetic of the gathering backwards (which outputs of a
 *    pooling window or a convolution tap read an input) and of the
 *    optimizer's tensor lookup, against brute force. */
#include "core/core.h"
#include "cuda/bits.h"
#include "nn/nn.h"
#include "nn/precision.h"
#include "testutil.h"

static uint32_t fbits(float f) { return mt_f32_bits(f); }

/* mismatches of both fp32 -> 16-bit rules on patterns u, u + step, ... */
static void sweep(uint64_t lo, uint64_t hi, uint64_t step, uint64_t *nbf, uint64_t *nfp,
                  uint64_t *count) {
  for (uint64_t u = lo; u < hi; u += step) {
    const float f = mt_f32_from_bits((uint32_t)u);
    *nbf += mt_cu_bf16_from_float(f) != mt_bf16_from_float(f);
    *nfp += mt_cu_fp16_from_float(f) != mt_fp16_from_float(f);
    (*count)++;
  }
}

static void test_16bit(void) {
  int bad_bf = 0, bad_fp = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    bad_bf += fbits(mt_cu_float_from_bf16((uint16_t)h)) != fbits(mt_float_from_bf16((uint16_t)h));
    bad_fp += fbits(mt_cu_float_from_fp16((uint16_t)h)) != fbits(mt_float_from_fp16((uint16_t)h));
  }
  CHECK(bad_bf == 0, "bf16 -> fp32: all 65536 inputs give the CPU's bits (%d differ)", bad_bf);
  CHECK(bad_fp == 0, "fp16 -> fp32: all 65536 inputs give the CPU's bits, NaNs made quiet (%d differ)",
        bad_fp);

  uint64_t nbf = 0, nfp = 0, count = 0;
  /* exponents 101..114 (fp16 subnormals, the flush, the first normals)
   * and 141..143 (65504, the tie at 65520, overflow), 255 (inf, NaN) */
  static const uint32_t exps[] = {101, 102, 103, 104, 105, 106, 107, 108, 109,
                                  110, 111, 112, 113, 114, 141, 142, 255};
  for (int s = 0; s < 2; s++)
    for (size_t e = 0; e < sizeof(exps) / sizeof(exps[0]); e++) {
      const uint64_t base = ((uint64_t)s << 31) | ((uint64_t)exps[e] << 23);
      sweep(base, base + (1u << 23), 1, &nbf, &nfp, &count);
    }
  sweep(0, 1ull << 32, 4093, &nbf, &nfp, &count); /* everything else, sampled */
  /* ties: exactly half-way patterns of both formats around every exponent */
  for (uint64_t e = 0; e < 256; e++)
    for (uint64_t m = 0; m < 64; m++) {
      const uint64_t u = (e << 23) | (m << 17) | 0x8000u; /* a bf16 tie */
      const uint64_t v = (e << 23) | (m << 14) | 0x1000u; /* an fp16 normal tie */
      sweep(u, u + 1, 1, &nbf, &nfp, &count);
      sweep(v, v + 1, 1, &nbf, &nfp, &count);
      sweep(u | 0x80000000u, (u | 0x80000000u) + 1, 1, &nbf, &nfp, &count);
    }
  CHECK(nbf == 0, "fp32 -> bf16: %llu patterns give the CPU's bits (%llu differ)",
        (unsigned long long)count, (unsigned long long)nbf);
  CHECK(nfp == 0, "fp32 -> fp16: %llu patterns give the CPU's bits (%llu differ)",
        (unsigned long long)count, (unsigned long long)nfp);
}

static void test_generator(void) {
  uint64_t st = 12345, bad64 = 0, badu = 0, badk = 0, n = 0;
  for (int k = 0; k < 64; k++) {
    const uint64_t key = (uint64_t)(tu_uniform(&st) * 9.2e18) ^ ((uint64_t)k << 58);
    for (uint64_t c = 0; c < 65536; c++, n++) {
      const uint64_t counter = c * 0x9E3779B97F4A7C15ULL + (uint64_t)k; /* spread */
      bad64 += mt_cu_rand64(key, counter) != mt_rand64(key, counter);
      badu += fbits(mt_cu_randu(key, c)) != fbits(mt_randu(key, c));
      badk += mt_cu_key(key, c & 7, counter) != mt_key(key, c & 7, counter);
    }
  }
  CHECK(bad64 == 0 && badu == 0 && badk == 0,
        "mt_rand64, mt_randu, mt_key: %llu (key, counter) pairs each give the CPU's bits "
        "(%llu, %llu, %llu differ)",
        (unsigned long long)n, (unsigned long long)bad64, (unsigned long long)badu,
        (unsigned long long)badk);
  /* a dropout layer's key from the device's mt_key is mt_dropout_key */
  const uint64_t k0 = mt_cu_key(7, 3 /* MT_PURPOSE_DROPOUT */, 11);
  CHECK(mt_cu_key(k0, 2 + 1, 5) == mt_dropout_key(7, 11, 5, 2),
        "mt_dropout_key(seed, step, rank, layer) is mt_key(mt_key(seed, 3, step), layer + 1, rank) "
        "on the device too");
}

/* the gathers' index arithmetic against brute force over many geometries */
static void test_index(void) {
  long npool = 0, badpool = 0, nconv = 0, badconv = 0;
  for (int H = 1; H <= 13; H++)
    for (int K = 1; K <= 6; K++)
      for (int S = 1; S <= 4; S++)
        for (int P = 0; 2 * P <= K; P++) {
          if (H + 2 * P < K) continue;
          const int OH = (H + 2 * P - K) / S + 1;
          for (int x = 0; x < H; x++, npool++) {
            int lo = OH, hi = -1, lo2, hi2;
            for (int o = 0; o < OH; o++)
              if (o * S - P <= x && x < o * S - P + K) lo = o < lo ? o : lo, hi = o;
            mt_cu_pool_cover(x, K, S, P, OH, &lo2, &hi2);
            badpool += lo <= hi ? lo2 != lo || hi2 != hi : lo2 <= hi2;
          }
        }
  CHECK(badpool == 0, "pooling: the outputs covering an input, %ld cases as brute force (%ld differ)",
        npool, badpool);
  for (int H = 1; H <= 13; H++)
    for (int K = 1; K <= 5; K++)
      for (int S = 1; S <= 3; S++)
        for (int P = 0; P <= 3; P++)
          for (int D = 1; D <= 3; D++) {
            const int e = D * (K - 1) + 1;
            if (e > H + 2 * P) continue;
            const int OH = (H + 2 * P - e) / S + 1;
            for (int x = 0; x < H; x++)
              for (int kk = 0; kk < K; kk++, nconv++) {
                int want = -1;
                for (int o = 0; o < OH; o++)
                  if (o * S - P + kk * D == x) want = o;
                badconv += mt_cu_conv_out(x, kk, S, P, D, OH) != want;
              }
          }
  CHECK(badconv == 0, "conv2d: the output reading an input through a tap, %ld cases as brute force (%ld differ)",
        nconv, badconv);
  uint64_t st = 99;
  long nseg = 0, badseg = 0;
  mt_cuda_seg seg[20];
  for (int trial = 0; trial < 200; trial++) {
    const int n = 1 + trial % 20;
    uint64_t off = trial % 3 ? 0 : 5; /* sometimes a gap before the first */
    for (int k = 0; k < n; k++) {
      seg[k].offset = off;
      seg[k].numel = 1 + (uint64_t)(fabs(tu_uniform(&st)) * 50);
      off += (seg[k].numel + 15) & ~(uint64_t)15; /* mt_param_table's padding */
    }
    for (int64_t i = 0; i < (int64_t)off + 5; i++, nseg++) {
      int want = -1;
      for (int k = 0; k < n; k++)
        if (i >= (int64_t)seg[k].offset && i < (int64_t)(seg[k].offset + seg[k].numel)) want = k;
      badseg += mt_cu_find_seg(seg, n, i) != want;
    }
  }
  CHECK(badseg == 0, "optimizer: the tensor of a flat element (or padding), %ld cases as a linear scan "
        "(%ld differ)", nseg, badseg);
}

int main(void) {
  test_16bit();
  test_generator();
  test_index();
  return tu_finish("test_cuda_bits");
}
