/* The start of free linear memory: the TypeScript side owns everything above it (a stack allocator in
 * wasm/loader.ts), so the module needs no malloc and therefore no import for memory growth. */
#include "common.h"

#ifdef __wasm__
extern unsigned char __heap_base;

DC_EXPORT(heap_base) uintptr_t heap_base(void) { return (uintptr_t)&__heap_base; }
#endif
