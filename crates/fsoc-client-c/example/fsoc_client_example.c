/* A C program using fsoc's client library: connects to `fsoc serve` at the address given
 * (unix:PATH or tcp:HOST:PORT), makes a directory and a file, writes, fsyncs, reads back,
 * renames, links, lists, and checks the errors it gets for bad requests. Prints what it does
 * and "ok" at the end; exits 1 at the first surprise.
 *
 *   cargo build --release -p fsoc-client-c
 *   gcc -std=c11 -Wall -Wextra -Werror -I crates/fsoc-client-c/include \
 *       crates/fsoc-client-c/example/fsoc_client_example.c \
 *       target/release/libfsoc_client_c.a -lpthread -ldl -lm -o fsoc_client_example
 *   fsoc serve volume.img --listen unix:/tmp/fsoc.sock &
 *   ./fsoc_client_example unix:/tmp/fsoc.sock
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsoc_client.h"

/* Stops the program with a message unless `call` returned `expected`. */
#define EXPECT(call, expected)                                                                 \
    do {                                                                                       \
        long long got_ = (long long)(call);                                                    \
        long long want_ = (long long)(expected);                                               \
        if (got_ != want_) {                                                                   \
            fprintf(stderr, "%s:%d: %s gave %lld (%s), expected %lld\n", __FILE__, __LINE__,   \
                    #call, got_, got_ < 0 ? strerror((int)-got_) : "-", want_);                \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static const char GREETING[] = "hello from C, through 9P2000.L\n";

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s unix:PATH|tcp:HOST:PORT\n", argv[0]);
        return 2;
    }
    FsocClient *client = NULL;
    int error = fsoc_connect(argv[1], NULL, &client);
    if (error < 0) {
        fprintf(stderr, "cannot connect to %s: %s\n", argv[1], strerror(-error));
        return 1;
    }
    printf("connected to %s\n", argv[1]);

    EXPECT(fsoc_mkdir(client, "c-example", 0755), 0);
    EXPECT(fsoc_mkdir(client, "c-example", 0755), -EEXIST);

    FsocFile *file = NULL;
    EXPECT(fsoc_open(client, "c-example/greeting.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644, &file), 0);
    EXPECT(fsoc_write(file, (const uint8_t *)GREETING, strlen(GREETING)), strlen(GREETING));
    EXPECT(fsoc_pwrite(file, (const uint8_t *)"H", 1, 0), 1);
    EXPECT(fsoc_seek(file, 0, SEEK_END), strlen(GREETING));
    EXPECT(fsoc_fsync(file), 0);
    EXPECT(fsoc_close(file), 0);
    EXPECT(fsoc_open(client, "c-example/greeting.txt", O_WRONLY | O_CREAT | O_EXCL, 0644, &file), -EEXIST);

    FsocStat stat;
    EXPECT(fsoc_stat(client, "c-example/greeting.txt", &stat), 0);
    EXPECT(stat.size_bytes, strlen(GREETING));
    EXPECT(S_ISREG(stat.mode), 1);
    EXPECT(stat.mode & 07777, 0644);
    printf("wrote %llu bytes to c-example/greeting.txt (inode %llu)\n", (unsigned long long)stat.size_bytes,
           (unsigned long long)stat.inode);

    char text[128] = {0};
    EXPECT(fsoc_open(client, "/c-example/greeting.txt", O_RDONLY, 0, &file), 0);
    EXPECT(fsoc_read(file, (uint8_t *)text, sizeof text - 1), strlen(GREETING));
    EXPECT(fsoc_read(file, (uint8_t *)text, sizeof text - 1), 0); /* the end */
    EXPECT(fsoc_pread(file, (uint8_t *)text, 5, 0), 5);
    EXPECT(memcmp(text, "Hello", 5), 0);
    EXPECT(fsoc_write(file, (const uint8_t *)"x", 1), -EBADF); /* opened read-only */
    EXPECT(fsoc_close(file), 0);
    printf("read back: %s", text);

    EXPECT(fsoc_rename(client, "c-example/greeting.txt", "c-example/renamed.txt"), 0);
    EXPECT(fsoc_stat(client, "c-example/greeting.txt", &stat), -ENOENT);
    EXPECT(fsoc_symlink(client, "renamed.txt", "c-example/link"), 0);
    char target[64] = {0};
    EXPECT(fsoc_readlink(client, "c-example/link", (uint8_t *)target, sizeof target), strlen("renamed.txt"));
    EXPECT(strcmp(target, "renamed.txt"), 0);
    EXPECT(fsoc_stat(client, "c-example/link", &stat), 0); /* followed */
    EXPECT(S_ISREG(stat.mode), 1);
    EXPECT(fsoc_lstat(client, "c-example/link", &stat), 0);
    EXPECT(S_ISLNK(stat.mode), 1);
    EXPECT(fsoc_link(client, "c-example/renamed.txt", "c-example/hard"), 0);
    EXPECT(fsoc_stat(client, "c-example/renamed.txt", &stat), 0);
    EXPECT(stat.link_count, 2);

    FsocDir *dir = NULL;
    FsocDirEntry entry;
    int entries = 0, files = 0, links = 0;
    EXPECT(fsoc_opendir(client, "c-example", &dir), 0);
    while ((error = fsoc_readdir(dir, &entry)) == 1) {
        printf("  %s (inode %llu, type %u)\n", entry.name, (unsigned long long)entry.inode, entry.kind);
        entries += 1;
        files += entry.kind == DT_REG;
        links += entry.kind == DT_LNK;
    }
    EXPECT(error, 0);
    fsoc_closedir(dir);
    EXPECT(entries, 3);
    EXPECT(files, 2);
    EXPECT(links, 1);

    EXPECT(fsoc_rmdir(client, "c-example"), -ENOTEMPTY);
    EXPECT(fsoc_unlink(client, "c-example/link"), 0);
    EXPECT(fsoc_unlink(client, "c-example/hard"), 0);
    EXPECT(fsoc_unlink(client, "c-example/missing"), -ENOENT);
    EXPECT(fsoc_open(client, "c-example/renamed.txt", O_RDONLY | O_DIRECTORY, 0, &file), -EINVAL);
    EXPECT(fsoc_open(client, NULL, O_RDONLY, 0, &file), -EFAULT);

    FsocStatFs usage;
    EXPECT(fsoc_statfs(client, &usage), 0);
    printf("volume: %llu of %llu blocks of %u bytes free\n", (unsigned long long)usage.free_block_count,
           (unsigned long long)usage.block_count, usage.block_size_bytes);
    EXPECT(fsoc_sync(client), 0);
    fsoc_disconnect(client);
    printf("ok\n");
    return 0;
}
