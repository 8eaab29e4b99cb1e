/* The workload of probe.h through littlefs (the C sources fsoc-bench's littlefs2 builds), on
 * the same RAM NAND: one littlefs block per NAND block, reads and programs of whole pages,
 * caches of one page, a 128-byte lookahead, every buffer static (no heap). */
#include <stdio.h>
#include <string.h>

#include "lfs.h"
#include "probe.h"
#include "ram_flash.h"

#define PAGE 2048
#define SPARE 64
static unsigned char read_cache[PAGE], prog_cache[PAGE], file_cache[PAGE], spare[SPARE];
static uint32_t lookahead[128 / 4];
static FsocFlashDriver driver;
static uint32_t blocks_per_chip;

static int bd_read(const struct lfs_config *config, lfs_block_t block, lfs_off_t offset, void *buffer, lfs_size_t size) {
    (void)config;
    static unsigned char page[PAGE];
    for (lfs_size_t done = 0; done < size; done += PAGE) {
        uint32_t page_index = (offset + done) / PAGE;
        int answer = driver.read_page(driver.context, block / blocks_per_chip, block % blocks_per_chip, page_index, page, spare);
        if (answer < 0 || answer == FSOC_FLASH_UNCORRECTABLE) return LFS_ERR_IO;
        memcpy((unsigned char *)buffer + done, page, PAGE);
    }
    return 0;
}

static int bd_prog(const struct lfs_config *config, lfs_block_t block, lfs_off_t offset, const void *buffer,
                   lfs_size_t size) {
    (void)config;
    memset(spare, 0xFF, SPARE);
    for (lfs_size_t done = 0; done < size; done += PAGE) {
        uint32_t page_index = (offset + done) / PAGE;
        if (driver.program_page(driver.context, block / blocks_per_chip, block % blocks_per_chip, page_index,
                                (const unsigned char *)buffer + done, spare) != 0)
            return LFS_ERR_IO;
    }
    return 0;
}

static int bd_erase(const struct lfs_config *config, lfs_block_t block) {
    (void)config;
    return driver.erase_block(driver.context, block / blocks_per_chip, block % blocks_per_chip) == 0 ? 0 : LFS_ERR_IO;
}

static int bd_sync(const struct lfs_config *config) {
    (void)config;
    return 0;
}

static unsigned char buffer[8192];

int probe_workload(ProbeRam *ram) {
    RamFlash flash;
    if (ram_flash_init(&flash, 4, 2048, 64, PAGE, SPARE) != 0) return 1;
    driver = ram_flash_driver(&flash);
    blocks_per_chip = flash.blocks_per_chip;
    static lfs_t lfs;
    static lfs_file_t file;
    static lfs_dir_t dir;
    const struct lfs_config config = {
        .read = bd_read,
        .prog = bd_prog,
        .erase = bd_erase,
        .sync = bd_sync,
        .read_size = PAGE,
        .prog_size = PAGE,
        .block_size = PAGE * 64,
        .block_count = 4 * 2048,
        .block_cycles = 500,
        .cache_size = PAGE,
        .lookahead_size = sizeof lookahead,
        .read_buffer = read_cache,
        .prog_buffer = prog_cache,
        .lookahead_buffer = lookahead,
    };
    struct lfs_file_config file_config = {.buffer = file_cache};
    if (lfs_format(&lfs, &config) != 0 || lfs_mount(&lfs, &config) != 0 || lfs_mkdir(&lfs, "/d") != 0) return 2;
    char path[32];
    for (int index = 0; index < 16; index++) {
        snprintf(path, sizeof path, "/d/f%02d", index);
        memset(buffer, index, sizeof buffer);
        if (lfs_file_opencfg(&lfs, &file, path, LFS_O_WRONLY | LFS_O_CREAT, &file_config) != 0 ||
            lfs_file_write(&lfs, &file, buffer, sizeof buffer) != (lfs_ssize_t)sizeof buffer ||
            lfs_file_sync(&lfs, &file) != 0 || lfs_file_close(&lfs, &file) != 0)
            return 3;
    }
    struct lfs_info info;
    int listed = 0;
    if (lfs_dir_open(&lfs, &dir, "/d") != 0) return 4;
    while (lfs_dir_read(&lfs, &dir, &info) > 0) listed += info.type == LFS_TYPE_REG;
    if (lfs_dir_close(&lfs, &dir) != 0 || listed != 16) return 4;
    for (int index = 0; index < 16; index++) {
        snprintf(path, sizeof path, "/d/f%02d", index);
        if (lfs_file_opencfg(&lfs, &file, path, LFS_O_RDONLY, &file_config) != 0 ||
            lfs_file_read(&lfs, &file, buffer, sizeof buffer) != (lfs_ssize_t)sizeof buffer || buffer[100] != index ||
            lfs_file_close(&lfs, &file) != 0)
            return 5;
    }
    if (lfs_rename(&lfs, "/d", "/e") != 0 || lfs_remove(&lfs, "/e/f00") != 0 || lfs_unmount(&lfs) != 0) return 6;
    ram->heap_peak_bytes = 0; /* LFS_NO_MALLOC: every buffer is static */
    ram->state_bytes = sizeof lfs + sizeof file + sizeof dir + sizeof read_cache + sizeof prog_cache + sizeof file_cache +
                       sizeof lookahead;
    ram_flash_free(&flash);
    return 0;
}
