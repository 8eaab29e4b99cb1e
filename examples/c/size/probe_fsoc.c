/* The workload of probe.h through fsoc's C library, with its firmware defaults. */
#include <stdio.h>
#include <string.h>

#include "fsoc.h"
#include "probe.h"
#include "ram_flash.h"

static unsigned char buffer[8192];

int probe_workload(ProbeRam *ram) {
    RamFlash flash;
    if (ram_flash_init(&flash, 4, 2048, 64, 2048, 64) != 0) return 1;
    FsocFlashDriver driver = ram_flash_driver(&flash);
    FsocAllocator heap = ram_flash_heap();
    FsocVolumeConfig config;
    FsocVolume *volume;
    if (fsoc_set_allocator(&heap) != 0 || fsoc_volume_config_default(&config) != 0 ||
        fsoc_volume_format(&driver, &config, 1) != 0 || fsoc_volume_mount(&driver, &config, &volume) != 0 ||
        fsoc_volume_mkdir(volume, "/d", 0755) != 0)
        return 2;
    char path[32];
    for (int index = 0; index < 16; index++) {
        snprintf(path, sizeof path, "/d/f%02d", index);
        memset(buffer, index, sizeof buffer);
        FsocFile file;
        if (fsoc_file_open(volume, path, FSOC_O_WRONLY | FSOC_O_CREAT, 0644, &file) != 0 ||
            fsoc_file_write(volume, file, buffer, sizeof buffer) != (int64_t)sizeof buffer ||
            fsoc_file_sync(volume, file) != 0 || fsoc_file_close(volume, file) != 0)
            return 3;
    }
    FsocDir dir;
    FsocDirEntry entry;
    int listed = 0;
    if (fsoc_dir_open(volume, "/d", &dir) != 0) return 4;
    while (fsoc_dir_read(volume, dir, &entry) == 1) listed++;
    if (fsoc_dir_close(volume, dir) != 0 || listed != 16) return 4;
    for (int index = 0; index < 16; index++) {
        snprintf(path, sizeof path, "/d/f%02d", index);
        FsocFile file;
        if (fsoc_file_open(volume, path, FSOC_O_RDONLY, 0, &file) != 0 ||
            fsoc_file_read(volume, file, buffer, sizeof buffer) != (int64_t)sizeof buffer || buffer[100] != index ||
            fsoc_file_close(volume, file) != 0)
            return 5;
    }
    if (fsoc_volume_rename(volume, "/d", "/e") != 0 || fsoc_volume_remove(volume, "/e/f00") != 0 ||
        fsoc_volume_unmount(volume) != 0)
        return 6;
    FsocMemoryUsage memory;
    fsoc_memory_usage(&memory);
    ram->heap_peak_bytes = memory.peak_bytes;
    ram->state_bytes = 0; /* every byte of state is on the heap */
    ram_flash_free(&flash);
    return 0;
}
