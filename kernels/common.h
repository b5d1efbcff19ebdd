/* Shared by every kernel family: the export macro and fixed-width types. Each family lives in its own .c
 * file. The same sources also build natively (gcc, for the benchmark's C baseline), where the wasm-only
 * attributes disappear. */
#ifndef DCOMM_KERNELS_COMMON_H
#define DCOMM_KERNELS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __wasm__
/* Pointers and lengths cross the JS boundary as wasm32 i32 (size_t is 32-bit there). */
#define DC_EXPORT(name) __attribute__((export_name(#name), used))
#else
#define DC_EXPORT(name)
#endif

#endif
