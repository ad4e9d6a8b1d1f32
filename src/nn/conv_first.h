/* The weight gradient of a convolution with few input channels whose output
 * gradient is in a blocked layout (conv_first.c, used by conv.c). */
#ifndef MT_NN_CONV_FIRST_H
#define MT_NN_CONV_FIRST_H

#include "nn/nn.h"

/* Whether conv_first_bwd_w serves shape s: stride 1, dilation 1, one
 * group (and then an output in nChw8c or nChw16c). */
int conv_first_fits(const mt_conv2d_shape *s);

/* dw (OC,IC,KH,KW) += correlation of inp (B,IC,H,W, NCHW) with dout
 * (B,OC,OH,OW in nChw{c->dst_block}c); db (OC) += its sums when db.
 * Nonzero: no memory for its scratch (nothing added). */
int conv_first_bwd_w(float *dw, float *db, const float *dout, const float *inp, int B,
                     const mt_conv2d *c);

#endif
