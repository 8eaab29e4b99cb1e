/* Power cuts driven from C: a seeded workload of single operations, each made durable before
 * the next (fsoc_file_sync or fsoc_volume_transact), runs on a 2-chip RAM NAND array
 * (ram_flash.c) with the power cut at its 1st, 2nd, ... N-th program or erase: every one.
 * After each cut the flash is powered on and mounted again, and the volume must be exactly
 * the state before the interrupted operation or the state after it (the operation may have
 * become durable just before the cut), with fsck clean, and it must take new writes.
 *
 * Usage: powercut [SEED [STEPS]]; a failure prints the seed and cut point to replay. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsoc.h"
#include "ram_flash.h"

#define FILES 6
#define FILE_BYTES_MAX 20000

/* The model: what the volume must hold. */
typedef struct Model {
    int present[FILES];
    uint32_t size[FILES];
    uint8_t bytes[FILES][FILE_BYTES_MAX];
} Model;

typedef struct Step {
    enum { CREATE, WRITE, TRUNCATE, RENAME, REMOVE } kind;
    int file, other;
    uint32_t offset, length;
    uint8_t seed;
} Step;

static uint64_t rng_state;
static uint32_t next_random(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void file_path(int file, char *path) { snprintf(path, 16, "/file-%d", file); }

static uint8_t pattern(uint8_t seed, uint32_t offset) { return (uint8_t)(seed + offset * 13u + offset / 509u); }

/* A step that is valid in `model` (chosen from the seeded generator). */
static Step choose(const Model *model) {
    for (;;) {
        Step step = {0};
        step.kind = next_random() % 5;
        step.file = (int)(next_random() % FILES);
        step.other = (int)(next_random() % FILES);
        step.seed = (uint8_t)next_random();
        switch (step.kind) {
        case CREATE:
            if (!model->present[step.file]) return step;
            break;
        case WRITE:
            if (!model->present[step.file]) break;
            step.offset = next_random() % (model->size[step.file] + 1);
            step.length = 1 + next_random() % 9000;
            if (step.offset + step.length > FILE_BYTES_MAX) step.length = FILE_BYTES_MAX - step.offset;
            if (step.length > 0) return step;
            break;
        case TRUNCATE:
            if (!model->present[step.file]) break;
            step.length = next_random() % FILE_BYTES_MAX;
            return step;
        case RENAME:
            if (model->present[step.file] && step.other != step.file) return step;
            break;
        case REMOVE:
            if (model->present[step.file]) return step;
            break;
        }
    }
}

static void apply(Model *model, const Step *step) {
    switch (step->kind) {
    case CREATE:
        model->present[step->file] = 1;
        model->size[step->file] = 0;
        break;
    case WRITE:
        for (uint32_t index = 0; index < step->length; index++)
            model->bytes[step->file][step->offset + index] = pattern(step->seed, index);
        if (step->offset + step->length > model->size[step->file])
            model->size[step->file] = step->offset + step->length;
        break;
    case TRUNCATE:
        if (step->length > model->size[step->file])
            memset(model->bytes[step->file] + model->size[step->file], 0, step->length - model->size[step->file]);
        model->size[step->file] = step->length;
        break;
    case RENAME: /* replaces the target */
        model->present[step->other] = 1;
        model->size[step->other] = model->size[step->file];
        memcpy(model->bytes[step->other], model->bytes[step->file], model->size[step->file]);
        model->present[step->file] = 0;
        break;
    case REMOVE:
        model->present[step->file] = 0;
        break;
    }
}

static uint8_t scratch[FILE_BYTES_MAX];

/* Runs one step on the volume, durably; a negative errno when a call failed. */
static int run(FsocVolume *volume, const Step *step) {
    char path[16], other[16];
    file_path(step->file, path);
    file_path(step->other, other);
    FsocFile file;
    int answer;
    switch (step->kind) {
    case CREATE:
    case WRITE:
    case TRUNCATE:
        answer = fsoc_file_open(volume, path,
                                step->kind == CREATE ? FSOC_O_WRONLY | FSOC_O_CREAT | FSOC_O_EXCL : FSOC_O_WRONLY,
                                0644, &file);
        if (answer < 0) return answer;
        if (step->kind == WRITE) {
            for (uint32_t index = 0; index < step->length; index++) scratch[index] = pattern(step->seed, index);
            int64_t moved = fsoc_file_seek(volume, file, step->offset, FSOC_SEEK_SET);
            if (moved >= 0) moved = fsoc_file_write(volume, file, scratch, step->length);
            if (moved < 0) answer = (int)moved;
        } else if (step->kind == TRUNCATE) {
            answer = fsoc_file_truncate(volume, file, step->length);
        }
        if (answer >= 0) answer = fsoc_file_sync(volume, file);
        int closed = fsoc_file_close(volume, file);
        return answer < 0 ? answer : closed;
    case RENAME:
        answer = fsoc_volume_rename(volume, path, other);
        return answer < 0 ? answer : fsoc_volume_transact(volume);
    case REMOVE:
        answer = fsoc_volume_remove(volume, path);
        return answer < 0 ? answer : fsoc_volume_transact(volume);
    }
    return -EINVAL;
}

/* Whether the volume holds exactly `model` (and nothing else in its root). */
static int holds(FsocVolume *volume, const Model *model) {
    int expected = 0;
    for (int index = 0; index < FILES; index++) {
        char path[16];
        file_path(index, path);
        FsocInfo info;
        int answer = fsoc_volume_stat(volume, path, &info);
        if (!model->present[index]) {
            if (answer != -ENOENT) return 0;
            continue;
        }
        expected++;
        if (answer < 0 || info.size_bytes != model->size[index]) return 0;
        FsocFile file;
        if (fsoc_file_open(volume, path, FSOC_O_RDONLY, 0, &file) < 0) return 0;
        int64_t read = fsoc_file_read(volume, file, scratch, sizeof scratch);
        fsoc_file_close(volume, file);
        if (read != (int64_t)model->size[index] || memcmp(scratch, model->bytes[index], model->size[index]) != 0)
            return 0;
    }
    FsocDir dir;
    FsocDirEntry entry;
    int listed = 0;
    if (fsoc_dir_open(volume, "/", &dir) < 0) return 0;
    while (fsoc_dir_read(volume, dir, &entry) == 1) listed++;
    fsoc_dir_close(volume, dir);
    return listed == expected;
}

static Model before, after;
static Step *steps;

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
    int step_count = argc > 2 ? atoi(argv[2]) : 80;
    FsocAllocator heap = ram_flash_heap();
    if (fsoc_set_allocator(&heap) != 0) return 1;
    FsocVolumeConfig config;
    fsoc_volume_config_default(&config);

    RamFlash formatted, flash;
    /* 2 chips x 12 blocks x 64 pages x 2 KiB: 3 MiB, every segment striped over both; small,
     * so that a long workload makes the cleaner reclaim segments (erases) under the cuts. */
    if (ram_flash_init(&formatted, 2, 12, 64, 2048, 64) != 0 || ram_flash_init(&flash, 2, 12, 64, 2048, 64) != 0)
        return 1;
    FsocFlashDriver format_driver = ram_flash_driver(&formatted), driver = ram_flash_driver(&flash);
    if (fsoc_volume_format(&format_driver, &config, seed) != 0) return 1;

    /* The workload, chosen once from the seed, and a run without a cut to count its writes. */
    rng_state = seed;
    steps = calloc((size_t)step_count, sizeof *steps);
    memset(&before, 0, sizeof before);
    for (int index = 0; index < step_count; index++) {
        steps[index] = choose(&before);
        apply(&before, &steps[index]);
    }
    FsocVolume *volume;
    if (ram_flash_copy(&flash, &formatted) != 0 || fsoc_volume_mount(&driver, &config, &volume) != 0) return 1;
    uint64_t writes_at_start = flash.programs + flash.erases;
    for (int index = 0; index < step_count; index++) {
        if (run(volume, &steps[index]) < 0) {
            fprintf(stderr, "seed %" PRIu64 ": step %d failed without a cut\n", seed, index);
            return 1;
        }
    }
    if (fsoc_volume_unmount(volume) != 0) return 1;
    uint64_t writes = flash.programs + flash.erases - writes_at_start;
    uint64_t erases = flash.erases;

    uint64_t cuts = 0, newer = 0;
    for (uint64_t cut = 1; cut <= writes; cut++) {
        if (ram_flash_copy(&flash, &formatted) != 0 || fsoc_volume_mount(&driver, &config, &volume) != 0) return 1;
        ram_flash_arm_cut(&flash, cut);
        memset(&before, 0, sizeof before);
        int interrupted = step_count; /* the step the cut stopped; step_count: the unmount */
        for (int index = 0; index < step_count; index++) {
            after = before;
            apply(&after, &steps[index]);
            if (run(volume, &steps[index]) < 0) {
                interrupted = index;
                break;
            }
            before = after;
        }
        int unmounted = fsoc_volume_unmount(volume); /* frees the volume; fails once the power is off */
        if (!flash.powered_off) {
            fprintf(stderr, "seed %" PRIu64 " cut %" PRIu64 ": the cut never came (unmount %d)\n", seed, cut,
                    unmounted);
            return 1;
        }
        if (interrupted == step_count) after = before;
        ram_flash_power_on(&flash);
        int answer = fsoc_volume_mount(&driver, &config, &volume);
        if (answer != 0) {
            fprintf(stderr, "seed %" PRIu64 " cut %" PRIu64 ": mount after the cut: %s\n", seed, cut,
                    strerror(-answer));
            return 1;
        }
        FsocFsckReport report;
        int is_before = holds(volume, &before), is_after = !is_before && holds(volume, &after);
        if (!is_before && !is_after) {
            fprintf(stderr, "seed %" PRIu64 " cut %" PRIu64 " (in step %d): the volume is neither the state before "
                    "nor after the interrupted step\n", seed, cut, interrupted);
            return 1;
        }
        if (fsoc_volume_fsck(volume, &report) != 0) {
            fprintf(stderr, "seed %" PRIu64 " cut %" PRIu64 ": fsck found %" PRIu64 " violations\n", seed, cut,
                    report.violation_count);
            return 1;
        }
        /* The recovered volume takes new work, durably. */
        FsocFile file;
        if (fsoc_file_open(volume, "/after-the-cut", FSOC_O_WRONLY | FSOC_O_CREAT, 0644, &file) != 0 ||
            fsoc_file_write(volume, file, "ok", 2) != 2 || fsoc_file_sync(volume, file) != 0 ||
            fsoc_file_close(volume, file) != 0 || fsoc_volume_unmount(volume) != 0) {
            fprintf(stderr, "seed %" PRIu64 " cut %" PRIu64 ": the recovered volume refused a write\n", seed, cut);
            return 1;
        }
        cuts++;
        newer += (uint64_t)is_after;
    }
    FsocMemoryUsage memory;
    fsoc_memory_usage(&memory);
    if (memory.current_bytes != 0) {
        fprintf(stderr, "%zu bytes held after the last unmount\n", memory.current_bytes);
        return 1;
    }
    printf("power cuts from C: seed %" PRIu64 ", %d steps (%" PRIu64 " block erases uncut), %" PRIu64
           " cut points (every program and erase): 0 failures; %" PRIu64 " recovered the interrupted step, %" PRIu64
           " the state before it\n",
           seed, step_count, erases, cuts, newer, cuts - newer);
    free(steps);
    ram_flash_free(&flash);
    ram_flash_free(&formatted);
    return 0;
}
