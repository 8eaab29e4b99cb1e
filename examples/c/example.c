/* fsoc's C library on a 1 GiB array of four RAM NAND chips (ram_flash.c): format, mount,
 * write files and directories, list, rename, remove, check, unmount, mount again and read
 * everything back. Prints what the flash did and the heap the library held at most.
 * Exit status 0 only if every step and every byte read back is right. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fsoc.h"
#include "ram_flash.h"

#define FILE_COUNT 64
#define CHECK(call)                                                                                 \
    do {                                                                                            \
        long long answer_ = (long long)(call);                                                      \
        if (answer_ < 0) {                                                                          \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, strerror((int)-answer_)); \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

/* File i's size and its j-th byte: sizes from 1 byte to about 48 KiB, contents per file. */
static uint32_t file_size(int index) { return 1u + (uint32_t)index * 777u; }
static uint8_t file_byte(int index, uint32_t offset) { return (uint8_t)(offset * 31u + (uint32_t)index * 7u + offset / 251u); }

static uint8_t buffer[64 * 1024];

static int write_files(FsocVolume *volume) {
    for (int index = 0; index < FILE_COUNT; index++) {
        char path[64];
        snprintf(path, sizeof path, "/logs/run-%02d.log", index);
        uint32_t size = file_size(index);
        for (uint32_t offset = 0; offset < size; offset++) buffer[offset] = file_byte(index, offset);
        FsocFile file;
        CHECK(fsoc_file_open(volume, path, FSOC_O_WRONLY | FSOC_O_CREAT | FSOC_O_EXCL, 0644, &file));
        /* Two writes, the second through a seek, to use the position. */
        uint32_t half = size / 2;
        if (fsoc_file_write(volume, file, buffer, half) != (int64_t)half) return 1;
        CHECK(fsoc_file_seek(volume, file, half, FSOC_SEEK_SET));
        if (fsoc_file_write(volume, file, buffer + half, size - half) != (int64_t)(size - half)) return 1;
        if (index % 8 == 7) CHECK(fsoc_file_sync(volume, file)); /* durable from here on */
        CHECK(fsoc_file_close(volume, file));
    }
    return 0;
}

static int read_files(FsocVolume *volume, const char *directory) {
    for (int index = 0; index < FILE_COUNT; index++) {
        char path[64];
        snprintf(path, sizeof path, "%s/run-%02d.log", directory, index);
        FsocFile file;
        CHECK(fsoc_file_open(volume, path, FSOC_O_RDONLY, 0, &file));
        uint32_t size = file_size(index);
        int64_t read = fsoc_file_read(volume, file, buffer, sizeof buffer);
        if (read != (int64_t)size) {
            fprintf(stderr, "%s: read %" PRId64 " bytes, expected %" PRIu32 "\n", path, read, size);
            return 1;
        }
        for (uint32_t offset = 0; offset < size; offset++) {
            if (buffer[offset] != file_byte(index, offset)) {
                fprintf(stderr, "%s: byte %" PRIu32 " differs\n", path, offset);
                return 1;
            }
        }
        if (fsoc_file_read(volume, file, buffer, sizeof buffer) != 0) return 1; /* end of file */
        CHECK(fsoc_file_close(volume, file));
    }
    return 0;
}

int main(void) {
    RamFlash flash;
    /* 4 chips x 2048 blocks x 64 pages x 2 KiB = 1 GiB, 64 spare bytes a page. */
    if (ram_flash_init(&flash, 4, 2048, 64, 2048, 64) != 0) return 1;
    FsocFlashDriver driver = ram_flash_driver(&flash);
    FsocAllocator heap = ram_flash_heap();
    /* Bad input is a negative errno, never a crash: no heap yet, no driver, a bad driver. */
    if (fsoc_volume_format(&driver, NULL, 1) != -ENOMEM) return 1;
    CHECK(fsoc_set_allocator(&heap));
    FsocVolume *volume;
    if (fsoc_volume_mount(NULL, NULL, &volume) != -EFAULT) return 1;
    FsocFlashDriver bad_driver = driver;
    bad_driver.spare_bytes = 8; /* no room for the page tag */
    if (fsoc_volume_format(&bad_driver, NULL, 1) != -EINVAL) return 1;
    bad_driver = driver;
    bad_driver.program_page = NULL;
    if (fsoc_volume_format(&bad_driver, NULL, 1) != -EINVAL) return 1;
    bad_driver = driver;
    bad_driver.chip_count = 1000000000u; /* refused before anything is sized from it */
    if (fsoc_volume_format(&bad_driver, NULL, 1) != -EINVAL) return 1;
    bad_driver = driver;
    bad_driver.page_data_bytes = 1u << 30;
    if (fsoc_volume_format(&bad_driver, NULL, 1) != -EINVAL) return 1;
    FsocVolumeConfig config;
    CHECK(fsoc_volume_config_default(&config));

    int unformatted = fsoc_volume_mount(&driver, &config, &volume);
    if (unformatted >= 0) {
        fprintf(stderr, "an erased flash mounted\n");
        return 1;
    }
    CHECK(fsoc_volume_format(&driver, &config, 0x600dcafe));
    uint64_t programs_at_format = flash.programs, erases_at_format = flash.erases;
    CHECK(fsoc_volume_mount(&driver, &config, &volume));
    CHECK(fsoc_volume_set_time(volume, INT64_C(1795000000) * 1000000000));
    CHECK(fsoc_volume_mkdir(volume, "/logs", 0755));
    if (write_files(volume) != 0) return 1;
    CHECK(fsoc_volume_transact(volume));

    /* List the directory: every file, in name order. */
    FsocDir dir;
    FsocDirEntry entry;
    int listed = 0, answer;
    CHECK(fsoc_dir_open(volume, "/logs", &dir));
    while ((answer = fsoc_dir_read(volume, dir, &entry)) == 1) {
        char expected[32];
        snprintf(expected, sizeof expected, "run-%02d.log", listed);
        if (strcmp(entry.name, expected) != 0 || entry.kind != FSOC_TYPE_FILE) return 1;
        listed++;
    }
    CHECK(answer);
    CHECK(fsoc_dir_close(volume, dir));
    if (listed != FILE_COUNT) return 1;

    /* Errors are negative errno values. */
    FsocFile missing;
    if (fsoc_file_open(volume, "/nope", FSOC_O_RDONLY, 0, &missing) != -ENOENT) return 1;
    if (fsoc_volume_mkdir(volume, "/logs", 0755) != -EEXIST) return 1;
    if (fsoc_volume_remove(volume, "/logs") != -ENOTEMPTY) return 1;
    if (fsoc_file_open(volume, "/logs", FSOC_O_RDONLY, 0, &missing) != -EISDIR) return 1;
    if (fsoc_file_open(volume, "/logs/run-00.log", 0, 0, &missing) != -EINVAL) return 1;
    FsocFile stale = {.number = 999};
    if (fsoc_file_read(volume, stale, buffer, 1) != -EBADF) return 1;
    FsocDir stale_dir = {.number = 999};
    if (fsoc_dir_read(volume, stale_dir, &entry) != -EBADF) return 1;
    /* No more than open_files_max files open at once. */
    FsocFile open_files[64];
    uint32_t opened = 0;
    for (; opened <= config.open_files_max; opened++) {
        answer = fsoc_file_open(volume, "/logs/run-01.log", FSOC_O_RDONLY, 0, &open_files[opened]);
        if (answer < 0) break;
    }
    if (answer != -EMFILE || opened != config.open_files_max) return 1;
    while (opened > 0) CHECK(fsoc_file_close(volume, open_files[--opened]));

    /* A scratch file, truncated and removed; the directory renamed. */
    FsocFile scratch;
    CHECK(fsoc_file_open(volume, "/scratch", FSOC_O_RDWR | FSOC_O_CREAT, 0600, &scratch));
    CHECK(fsoc_file_write(volume, scratch, buffer, 10000));
    CHECK(fsoc_file_truncate(volume, scratch, 100));
    FsocInfo info;
    CHECK(fsoc_file_stat(volume, scratch, &info));
    if (info.size_bytes != 100 || info.kind != FSOC_TYPE_FILE || info.mode != 0600) return 1;
    CHECK(fsoc_file_close(volume, scratch));
    /* Access modes hold: no read through a write-only file, no write through a read-only one. */
    FsocFile write_only, read_only;
    CHECK(fsoc_file_open(volume, "/scratch", FSOC_O_WRONLY, 0, &write_only));
    CHECK(fsoc_file_open(volume, "/scratch", FSOC_O_RDONLY, 0, &read_only));
    if (fsoc_file_read(volume, write_only, buffer, 1) != -EBADF) return 1;
    if (fsoc_file_write(volume, read_only, buffer, 1) != -EBADF) return 1;
    if (fsoc_file_seek(volume, read_only, -1, FSOC_SEEK_SET) != -EINVAL) return 1;
    CHECK(fsoc_file_close(volume, write_only));
    CHECK(fsoc_file_close(volume, read_only));
    if (fsoc_file_close(volume, read_only) != -EBADF) return 1;
    CHECK(fsoc_volume_remove(volume, "/scratch"));
    CHECK(fsoc_volume_rename(volume, "/logs", "/archive"));
    CHECK(fsoc_volume_stat(volume, "/archive", &info));
    if (info.kind != FSOC_TYPE_DIRECTORY) return 1;

    FsocMemoryUsage memory;
    CHECK(fsoc_memory_usage(&memory));
    size_t peak_writing = memory.peak_bytes;
    fsoc_memory_reset_peak();
    FsocFsckReport report;
    if (fsoc_volume_fsck(volume, &report) != 0 || report.files != FILE_COUNT || report.directories != 2) {
        fprintf(stderr, "fsck: %" PRIu64 " violations, %" PRIu64 " files\n", report.violation_count, report.files);
        return 1;
    }
    FsocUsage usage;
    CHECK(fsoc_volume_usage(volume, &usage));
    CHECK(fsoc_memory_usage(&memory));
    size_t peak_checking = memory.peak_bytes;
    CHECK(fsoc_volume_unmount(volume));

    /* Mount again and read everything back. */
    uint64_t reads_before_mount = flash.reads;
    fsoc_memory_reset_peak();
    CHECK(fsoc_volume_mount(&driver, &config, &volume));
    uint64_t mount_reads = flash.reads - reads_before_mount;
    if (read_files(volume, "/archive") != 0) return 1;
    CHECK(fsoc_memory_usage(&memory));
    CHECK(fsoc_volume_unmount(volume));
    CHECK(fsoc_memory_usage(&memory));
    if (memory.current_bytes != 0) {
        fprintf(stderr, "%zu bytes still held after unmount\n", memory.current_bytes);
        return 1;
    }

    printf("fsoc C library on a 1 GiB, 4-chip RAM NAND array (2 KiB pages, 128 KiB blocks):\n");
    printf("  an erased flash does not mount (%s); bad input answers a negative errno: ok\n", strerror(-unformatted));
    printf("  format: %" PRIu64 " page programs, %" PRIu64 " block erases\n", programs_at_format,
           erases_at_format);
    printf("  %d files (1 B to %" PRIu32 " B) written, listed, renamed with their directory, checked: ok\n",
           FILE_COUNT, file_size(FILE_COUNT - 1));
    printf("  volume: %" PRIu64 " of %" PRIu64 " blocks of %" PRIu32 " B free\n", usage.free_blocks,
           usage.total_blocks, usage.block_size_bytes);
    printf("  mount: %" PRIu64 " page reads; every file read back: ok\n", mount_reads);
    printf("  heap held at most: %zu B formatting and writing, %zu B mounting and reading (node cache %" PRIu32
           " B per tree), %zu B during fsck\n",
           peak_writing, memory.peak_bytes, config.cache_bytes, peak_checking);
    printf("  flash in all: %" PRIu64 " reads, %" PRIu64 " programs, %" PRIu64 " erases\n", flash.reads,
           flash.programs, flash.erases);
    ram_flash_free(&flash);
    return 0;
}
