/* The RAM NAND flash driver of ram_flash.h. */
#define _POSIX_C_SOURCE 200809L
#include "ram_flash.h"

#include <stdlib.h>
#include <string.h>

static size_t page_bytes(const RamFlash *flash) { return (size_t)flash->page_data_bytes + flash->spare_bytes; }
static size_t block_bytes(const RamFlash *flash) { return page_bytes(flash) * flash->pages_per_block; }

int ram_flash_init(RamFlash *flash, uint32_t chip_count, uint32_t blocks_per_chip, uint32_t pages_per_block,
                   uint32_t page_data_bytes, uint32_t spare_bytes) {
    memset(flash, 0, sizeof *flash);
    flash->chip_count = chip_count;
    flash->blocks_per_chip = blocks_per_chip;
    flash->pages_per_block = pages_per_block;
    flash->page_data_bytes = page_data_bytes;
    flash->spare_bytes = spare_bytes;
    size_t count = (size_t)chip_count * blocks_per_chip;
    flash->blocks = calloc(count, sizeof *flash->blocks);
    flash->next_page = calloc(count, sizeof *flash->next_page);
    flash->bad = calloc(count, 1);
    return flash->blocks && flash->next_page && flash->bad ? 0 : -1;
}

void ram_flash_free(RamFlash *flash) {
    size_t count = (size_t)flash->chip_count * flash->blocks_per_chip;
    for (size_t index = 0; index < count; index++) free(flash->blocks[index]);
    free(flash->blocks);
    free(flash->next_page);
    free(flash->bad);
    memset(flash, 0, sizeof *flash);
}

int ram_flash_copy(RamFlash *to, const RamFlash *from) {
    size_t count = (size_t)from->chip_count * from->blocks_per_chip;
    for (size_t index = 0; index < count; index++) {
        if (from->blocks[index] == NULL) {
            free(to->blocks[index]);
            to->blocks[index] = NULL;
            continue;
        }
        if (to->blocks[index] == NULL && (to->blocks[index] = malloc(block_bytes(from))) == NULL) return -1;
        memcpy(to->blocks[index], from->blocks[index], block_bytes(from));
    }
    memcpy(to->next_page, from->next_page, count * sizeof *from->next_page);
    memcpy(to->bad, from->bad, count);
    return 0;
}

void ram_flash_arm_cut(RamFlash *flash, uint64_t writes) { flash->writes_until_cut = writes; }
void ram_flash_power_on(RamFlash *flash) {
    flash->powered_off = 0;
    flash->writes_until_cut = 0;
}

/* The block's index, or -1 for an address outside the array. */
static long block_index(const RamFlash *flash, uint32_t chip, uint32_t block) {
    if (chip >= flash->chip_count || block >= flash->blocks_per_chip) return -1;
    return (long)chip * flash->blocks_per_chip + block;
}

/* Whether this write is the one the power cut stops (and powers the flash off). */
static int cut_now(RamFlash *flash) {
    if (flash->writes_until_cut == 0) return 0;
    if (--flash->writes_until_cut > 0) return 0;
    flash->powered_off = 1;
    return 1;
}

static int read_page(void *context, uint32_t chip, uint32_t block, uint32_t page, uint8_t *data, uint8_t *spare) {
    RamFlash *flash = context;
    long index = block_index(flash, chip, block);
    if (flash->powered_off) return FSOC_FLASH_POWER_LOST;
    if (index < 0 || page >= flash->pages_per_block) return FSOC_FLASH_DEVICE_ERROR;
    flash->reads++;
    const uint8_t *cells = flash->blocks[index];
    if (cells == NULL) {
        memset(data, 0xFF, flash->page_data_bytes);
        memset(spare, 0xFF, flash->spare_bytes);
        return FSOC_FLASH_ERASED;
    }
    cells += page * page_bytes(flash);
    memcpy(data, cells, flash->page_data_bytes);
    memcpy(spare, cells + flash->page_data_bytes, flash->spare_bytes);
    return FSOC_FLASH_OK; /* the library tells an erased page from its 0xFF bytes */
}

static int program_page(void *context, uint32_t chip, uint32_t block, uint32_t page, const uint8_t *data,
                        const uint8_t *spare) {
    RamFlash *flash = context;
    long index = block_index(flash, chip, block);
    if (flash->powered_off) return FSOC_FLASH_POWER_LOST;
    if (index < 0 || page >= flash->pages_per_block || flash->bad[index]) return FSOC_FLASH_DEVICE_ERROR;
    if (page < flash->next_page[index]) return FSOC_FLASH_DEVICE_ERROR; /* not erased, or out of order */
    if (flash->blocks[index] == NULL) {
        if ((flash->blocks[index] = malloc(block_bytes(flash))) == NULL) return FSOC_FLASH_DEVICE_ERROR;
        memset(flash->blocks[index], 0xFF, block_bytes(flash));
    }
    uint8_t *cells = flash->blocks[index] + page * page_bytes(flash);
    flash->next_page[index] = page + 1;
    if (cut_now(flash)) {
        memcpy(cells, data, flash->page_data_bytes / 2); /* torn: half the data, no spare */
        return FSOC_FLASH_POWER_LOST;
    }
    flash->programs++;
    memcpy(cells, data, flash->page_data_bytes);
    memcpy(cells + flash->page_data_bytes, spare, flash->spare_bytes);
    return FSOC_FLASH_OK;
}

static int erase_block(void *context, uint32_t chip, uint32_t block) {
    RamFlash *flash = context;
    long index = block_index(flash, chip, block);
    if (flash->powered_off) return FSOC_FLASH_POWER_LOST;
    if (index < 0 || flash->bad[index]) return FSOC_FLASH_DEVICE_ERROR;
    if (cut_now(flash)) return FSOC_FLASH_POWER_LOST; /* cut before the erase began */
    flash->erases++;
    free(flash->blocks[index]);
    flash->blocks[index] = NULL;
    flash->next_page[index] = 0;
    return FSOC_FLASH_OK;
}

static int is_bad_block(void *context, uint32_t chip, uint32_t block) {
    RamFlash *flash = context;
    long index = block_index(flash, chip, block);
    if (flash->powered_off) return FSOC_FLASH_POWER_LOST;
    return index < 0 ? FSOC_FLASH_DEVICE_ERROR : flash->bad[index];
}

static int mark_bad_block(void *context, uint32_t chip, uint32_t block) {
    RamFlash *flash = context;
    long index = block_index(flash, chip, block);
    if (flash->powered_off) return FSOC_FLASH_POWER_LOST;
    if (index < 0) return FSOC_FLASH_DEVICE_ERROR;
    flash->bad[index] = 1;
    return FSOC_FLASH_OK;
}

FsocFlashDriver ram_flash_driver(RamFlash *flash) {
    FsocFlashDriver driver = {
        .context = flash,
        .chip_count = flash->chip_count,
        .blocks_per_chip = flash->blocks_per_chip,
        .pages_per_block = flash->pages_per_block,
        .page_data_bytes = flash->page_data_bytes,
        .spare_bytes = flash->spare_bytes,
        .read_latency_ns = 25000,     /* SLC: tR 25 us, tPROG 200 us, tBERS 1.5 ms */
        .program_latency_ns = 200000,
        .erase_latency_ns = 1500000,
        .read_page = read_page,
        .program_page = program_page,
        .erase_block = erase_block,
        .is_bad_block = is_bad_block,
        .mark_bad_block = mark_bad_block,
        .sync = NULL, /* every call is complete when it returns */
    };
    return driver;
}

static void *heap_allocate(void *context, size_t size, size_t align) {
    (void)context;
    if (align < sizeof(void *)) align = sizeof(void *);
    void *pointer = NULL;
    return posix_memalign(&pointer, align, size ? size : 1) == 0 ? pointer : NULL;
}

static void heap_release(void *context, void *pointer, size_t size, size_t align) {
    (void)context;
    (void)size;
    (void)align;
    free(pointer);
}

FsocAllocator ram_flash_heap(void) {
    FsocAllocator heap = {.context = NULL, .allocate = heap_allocate, .release = heap_release};
    return heap;
}
