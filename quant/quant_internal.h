/* quant_internal.h: shared between the reference code's two files (quant.c,
 * quant_kquants.c), never included from outside quant/. */
#ifndef SP_QUANT_INTERNAL_H
#define SP_QUANT_INTERNAL_H

#include <stdint.h>

#include "quant/quant.h"

/* The K-quant halves of the reference code (quant/quant_kquants.c), called by the
 * dispatch in quant/quant.c. Same meaning as the quant.h functions of the same name
 * for types Q4_K, Q5_K, Q6_K (and Q8_K for dequantize/quantize). */
void quant__kquants_dequantize_row(quant_type type, float *dst, const void *src, int64_t n);
void quant__kquants_quantize_row(quant_type type, void *dst, const float *src, int64_t n);
float quant__kquants_vec_dot_ref(quant_type type, const void *w, const void *a, int64_t n);

#endif
