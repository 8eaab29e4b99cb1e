/* The size and RAM probes (measure.sh): one workload, the same for fsoc and littlefs, on the
 * same 1 GiB array of four RAM NAND chips (ram_flash.c). */
#ifndef PROBE_H
#define PROBE_H

#include <stddef.h>

typedef struct ProbeRam {
    size_t heap_peak_bytes;  /* most heap held at once during the workload */
    size_t state_bytes;      /* the library's state and buffers the caller holds (structs, caches) */
} ProbeRam;

/* Format, mount, mkdir, 16 files of 8 KiB written and synced, listed, read back and checked,
 * a rename, a remove, unmount. 0 on success. */
int probe_workload(ProbeRam *ram);

#endif
