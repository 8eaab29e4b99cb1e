/* The heap fsoc's C library needs on a full volume: a 1 GiB, 4-chip RAM NAND array filled
 * with 1 MiB files until -ENOSPC (a transaction every 64 files), then unmounted, mounted again,
 * one file removed (room again) and one small synced write made. Prints the heap held and the
 * most held in both phases, with the firmware defaults and with the configurable parts at their
 * least (no node cache, 4 dirty nodes, 1-page batches): what the volume itself needs. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fsoc.h"
#include "ram_flash.h"

static unsigned char chunk[64 * 1024];

static int fill(int least) {
    RamFlash flash;
    if (ram_flash_init(&flash, 4, 2048, 64, 2048, 64) != 0) return 1;
    FsocFlashDriver driver = ram_flash_driver(&flash);
    FsocVolumeConfig config;
    FsocVolume *volume;
    if (fsoc_volume_config_default(&config) != 0) return 1;
    if (least) {
        config.cache_bytes = 0;
        config.dirty_nodes_max = 4;
        config.io_batch_pages = 1;
    }
    if (fsoc_volume_format(&driver, &config, 1) != 0 || fsoc_volume_mount(&driver, &config, &volume) != 0) return 1;
    fsoc_memory_reset_peak();
    memset(chunk, 0x3C, sizeof chunk);
    int files = 0, answer = 0;
    while (answer >= 0) {
        char path[32];
        snprintf(path, sizeof path, "/file-%d", files);
        FsocFile file;
        if ((answer = fsoc_file_open(volume, path, FSOC_O_WRONLY | FSOC_O_CREAT, 0644, &file)) < 0) break;
        for (int index = 0; index < 16 && answer >= 0; index++)
            answer = (int)fsoc_file_write(volume, file, chunk, sizeof chunk);
        fsoc_file_close(volume, file);
        if (answer >= 0 && ++files % 64 == 0) answer = fsoc_volume_transact(volume);
    }
    if (answer != -ENOSPC) {
        fprintf(stderr, "filling ended with %s, not ENOSPC\n", strerror(-answer));
        return 1;
    }
    FsocUsage usage;
    FsocMemoryUsage filled, remounted;
    int committed = fsoc_volume_transact(volume);
    if (committed != 0) fprintf(stderr, "transact after ENOSPC: %s\n", strerror(-committed));
    if (committed != 0 || fsoc_volume_usage(volume, &usage) != 0 ||
        fsoc_memory_usage(&filled) != 0 || fsoc_volume_unmount(volume) != 0)
        return 1;
    fsoc_memory_reset_peak();
    FsocFile file;
    if (fsoc_volume_mount(&driver, &config, &volume) != 0 || fsoc_volume_remove(volume, "/file-0") != 0 ||
        fsoc_volume_transact(volume) != 0 || fsoc_file_open(volume, "/small", FSOC_O_WRONLY | FSOC_O_CREAT, 0644, &file) != 0 ||
        fsoc_file_write(volume, file, chunk, 100) != 100 || fsoc_file_sync(volume, file) != 0 ||
        fsoc_file_close(volume, file) != 0 || fsoc_memory_usage(&remounted) != 0 || fsoc_volume_unmount(volume) != 0)
        return 1;
    printf("a full 1 GiB, 4-chip volume (%d files of 1 MiB, %llu of %llu blocks free), %s: heap at most %zu B "
           "while filling; after a remount, a remove and a small synced write %zu B held, at most %zu B\n",
           files, (unsigned long long)usage.free_blocks, (unsigned long long)usage.total_blocks,
           least ? "no node cache, 4 dirty nodes, 1-page batches" : "firmware defaults", filled.peak_bytes,
           remounted.current_bytes, remounted.peak_bytes);
    ram_flash_free(&flash);
    return 0;
}

int main(void) {
    FsocAllocator heap = ram_flash_heap();
    if (fsoc_set_allocator(&heap) != 0) return 1;
    return fill(0) != 0 || fill(1) != 0;
}
