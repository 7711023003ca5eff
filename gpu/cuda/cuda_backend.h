/* cuda_backend.h: the CUDA backend's entry points, callable from C. This is the only
 * header of gpu/cuda/ that code outside it includes, and it includes no CUDA header:
 * everything CUDA stays behind these two functions (gpu/device.c calls them when the
 * build found nvcc, SP_HAVE_CUDA). */
#ifndef SP_CUDA_BACKEND_H
#define SP_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "gpu/device_internal.h" /* a C header: C linkage from C++ too */

/* Whether a usable CUDA GPU is present (the driver loads, device 0 exists and has
 * compute capability 8.0 or newer). When not, why goes into why (cap bytes). */
bool cuda_backend_probe(char *why, size_t cap);

/* Creates the backend on device 0: one stream, one cuBLAS handle. A missing or
 * unusable GPU is SP_ERR_UNSUPPORTED with the reason (exit status 2). Caller owns *out (dev_destroy). */
sp_status cuda_backend_create(const dev_options *opts, dev_backend **out);

#ifdef __cplusplus
}
#endif

#endif
