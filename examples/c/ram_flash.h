/* A RAM NAND flash for fsoc's C library: the driver a firmware engineer writes for a real chip,
 * but over memory. It keeps NAND's rules (a page is programmed once after its block's erase,
 * in ascending order within the block; an erase sets every byte to 0xFF) and refuses calls
 * that break them, so a library bug shows up here as a failed call, not as silent success.
 * Blocks are allocated on their first program, so a 1 GiB array costs only what is written.
 *
 * A power cut can be armed: the cut-th program or erase from then on does not complete (a cut
 * program leaves the page torn: the first half of its data, the rest and its spare erased),
 * and every call after it answers FSOC_FLASH_POWER_LOST until ram_flash_power_on. */
#ifndef RAM_FLASH_H
#define RAM_FLASH_H

#include <stdint.h>
#include "fsoc.h"

typedef struct RamFlash {
    uint32_t chip_count, blocks_per_chip, pages_per_block, page_data_bytes, spare_bytes;
    uint8_t **blocks;        /* chip-major; NULL: erased and not allocated */
    uint32_t *next_page;     /* per block: pages programmed since its erase */
    uint8_t *bad;            /* per block: marked bad */
    uint64_t reads, programs, erases;
    /* Power cut: 0 disarmed; else the number of programs and erases left before the cut. */
    uint64_t writes_until_cut;
    int powered_off;
} RamFlash;

int ram_flash_init(RamFlash *flash, uint32_t chip_count, uint32_t blocks_per_chip, uint32_t pages_per_block,
                   uint32_t page_data_bytes, uint32_t spare_bytes);
void ram_flash_free(RamFlash *flash);
/* Copies every block of `from` into `to` (both initialised with the same geometry). */
int ram_flash_copy(RamFlash *to, const RamFlash *from);
/* The driver the library calls, over `flash`, with datasheet-like SLC latencies. */
FsocFlashDriver ram_flash_driver(RamFlash *flash);
/* Arms a cut at the `writes`-th program or erase from now (0 disarms). */
void ram_flash_arm_cut(RamFlash *flash, uint64_t writes);
void ram_flash_power_on(RamFlash *flash);

/* A heap over malloc that the library is handed with fsoc_set_allocator. */
FsocAllocator ram_flash_heap(void);

#endif
