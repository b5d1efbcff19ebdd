/* Shared by every kernel family: the export macro, fixed-width types, and the fp16/bf16 bit conversions
 * that the reductions, the casts and the compressors all use. Each family lives in its own .c file. */
#ifndef DCOMM_KERNELS_COMMON_H
#define DCOMM_KERNELS_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Pointers and lengths cross the JS boundary as wasm32 i32; size_t is 32-bit there. */
#define DC_EXPORT(name) __attribute__((export_name(#name), used)) 

#endif
