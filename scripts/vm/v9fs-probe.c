/* v9fs-probe: the system calls the guest's busybox cannot make, for scripts/vm/v9fs-workload.sh.
 * Each subcommand checks one behaviour of the file system under PATH and exits 0 when it holds,
 * 1 with a line on stderr saying what differed. Built static on the host (gcc -static) and
 * carried into the guest, which has no C library.
 *
 *   lock FILE      fcntl record locks and flock: a lock, F_GETLK from another process, release
 *   utime FILE     utimensat with explicit times (nanoseconds kept), then UTIME_NOW/UTIME_OMIT
 *   append FILE    O_APPEND writes land at the end, even a pwrite at offset 0
 *   unlinked DIR   a file unlinked while open can still be written and read through its fd
 *   excl DIR       O_CREAT|O_EXCL on an existing name is EEXIST; O_CREAT alone opens it
 *   mmap FILE      a shared writable mapping's stores reach the file (msync, reopen, read)
 *   fsync FILE     write, fsync, fdatasync, ftruncate on an open fd
 *   seekdir DIR    telldir/seekdir: resuming a listing at a remembered position
 *   statfs DIR     statfs(2) prints type, block size, blocks, free, files, name length
 *   pipe-size FIFO grows an open FIFO's buffer to 4 MiB (F_SETPIPE_SZ; the FIFO must be held
 *                  open by someone else, as the buffer belongs to the open pipe)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what) {
  fprintf(stderr, "v9fs-probe: %s: %s\n", what, errno ? strerror(errno) : "unexpected result");
  return 1;
}

#define CHECK(condition, what) \
  do { \
    errno = 0; \
    if (!(condition)) return fail(what); \
  } while (0)

static int file_size(const char *path, off_t *size) {
  struct stat status;
  if (stat(path, &status) != 0) return -1;
  *size = status.st_size;
  return 0;
}

static int probe_lock(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  CHECK(fd >= 0, "open");
  struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 100};
  CHECK(fcntl(fd, F_SETLK, &lock) == 0, "F_SETLK write lock");
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    int other = open(path, O_RDWR);
    struct flock query = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 50, .l_len = 10};
    if (other < 0 || fcntl(other, F_GETLK, &query) != 0) _exit(10);
    if (query.l_type != F_WRLCK || query.l_pid != getppid()) _exit(11); /* the parent's lock */
    struct flock take = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(other, F_SETLK, &take) == 0 || (errno != EAGAIN && errno != EACCES)) _exit(12);
    struct flock beyond = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 200, .l_len = 1};
    if (fcntl(other, F_SETLK, &beyond) != 0) _exit(13); /* a range nobody holds */
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child, "waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "v9fs-probe: lock seen from another process: check %d failed\n", WEXITSTATUS(status));
    return 1;
  }
  lock.l_type = F_UNLCK;
  CHECK(fcntl(fd, F_SETLK, &lock) == 0, "F_SETLK unlock");
  struct flock query = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
  CHECK(fcntl(fd, F_GETLK, &query) == 0 && query.l_type == F_UNLCK, "F_GETLK after unlock");
  CHECK(flock(fd, LOCK_EX) == 0, "flock LOCK_EX");
  CHECK(flock(fd, LOCK_UN) == 0, "flock LOCK_UN");
  CHECK(close(fd) == 0, "close");
  return 0;
}

static int probe_utime(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT, 0644);
  CHECK(fd >= 0 && close(fd) == 0, "create");
  struct timespec times[2] = {{1000000000, 500000000}, {1234567890, 250000000}};
  CHECK(utimensat(AT_FDCWD, path, times, 0) == 0, "utimensat explicit");
  struct stat status;
  CHECK(stat(path, &status) == 0, "stat");
  /* The Linux 6.1 client keeps times to the second (its superblock's time granularity) and
   * sends Tsetattr without the nanoseconds, so either the nanoseconds set or none come back. */
  CHECK(status.st_atim.tv_sec == 1000000000, "atime seconds as set");
  CHECK(status.st_atim.tv_nsec == 500000000 || status.st_atim.tv_nsec == 0, "atime nanoseconds as set or none");
  CHECK(status.st_mtim.tv_sec == 1234567890, "mtime seconds as set");
  CHECK(status.st_mtim.tv_nsec == 250000000 || status.st_mtim.tv_nsec == 0, "mtime nanoseconds as set or none");
  time_t before = time(NULL);
  struct timespec now_mtime[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  CHECK(utimensat(AT_FDCWD, path, now_mtime, 0) == 0, "utimensat UTIME_NOW");
  CHECK(stat(path, &status) == 0, "stat");
  CHECK(status.st_atim.tv_sec == 1000000000, "atime kept by UTIME_OMIT");
  /* The server's clock sets "now"; host and guest clocks agree to within a minute. */
  if (status.st_mtim.tv_sec < before - 60 || status.st_mtim.tv_sec > before + 60) {
    fprintf(stderr, "v9fs-probe: UTIME_NOW gave mtime %ld, guest clock %ld\n", (long)status.st_mtim.tv_sec,
            (long)before);
    return 1;
  }
  return 0;
}

static int probe_append(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0 && write(fd, "0123456789", 10) == 10 && close(fd) == 0, "initial write");
  fd = open(path, O_WRONLY | O_APPEND);
  CHECK(fd >= 0, "open O_APPEND");
  CHECK(write(fd, "abc", 3) == 3, "append write");
  CHECK(pwrite(fd, "de", 2, 0) == 2, "pwrite with O_APPEND"); /* Linux: appends anyway */
  CHECK(close(fd) == 0, "close");
  char bytes[32] = {0};
  fd = open(path, O_RDONLY);
  CHECK(fd >= 0, "reopen");
  ssize_t count = read(fd, bytes, sizeof bytes);
  close(fd);
  if (count != 15 || memcmp(bytes, "0123456789abcde", 15) != 0) {
    fprintf(stderr, "v9fs-probe: after appends read %zd bytes: %.*s\n", count, (int)(count > 0 ? count : 0),
            bytes);
    return 1;
  }
  return 0;
}

static int probe_unlinked(const char *directory) {
  char path[4096];
  snprintf(path, sizeof path, "%s/unlinked-while-open", directory);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0, "create");
  CHECK(write(fd, "before", 6) == 6, "write before unlink");
  CHECK(unlink(path) == 0, "unlink");
  CHECK(access(path, F_OK) != 0 && errno == ENOENT, "name gone after unlink");
  CHECK(pwrite(fd, "after", 5, 6) == 5, "write after unlink");
  char bytes[16] = {0};
  CHECK(pread(fd, bytes, sizeof bytes, 0) == 11 && memcmp(bytes, "beforeafter", 11) == 0, "read after unlink");
  struct stat status;
  CHECK(fstat(fd, &status) == 0 && status.st_size == 11, "fstat after unlink");
  CHECK(close(fd) == 0, "close");
  return 0;
}

static int probe_excl(const char *directory) {
  char path[4096];
  snprintf(path, sizeof path, "%s/exclusive", directory);
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0 && close(fd) == 0, "first O_EXCL create");
  CHECK(open(path, O_WRONLY | O_CREAT | O_EXCL, 0600) < 0 && errno == EEXIST, "second O_EXCL is EEXIST");
  fd = open(path, O_WRONLY | O_CREAT, 0600);
  CHECK(fd >= 0 && close(fd) == 0, "O_CREAT of an existing file opens it");
  struct stat status;
  CHECK(stat(path, &status) == 0 && (status.st_mode & 07777) == 0600, "mode of the created file");
  CHECK(unlink(path) == 0, "unlink");
  return 0;
}

static int probe_mmap(const char *path) {
  const size_t size = 3 * 4096 + 100;
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0, "create");
  CHECK(ftruncate(fd, (off_t)size) == 0, "ftruncate");
  unsigned char *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(map != MAP_FAILED, "mmap shared writable");
  for (size_t index = 0; index < size; index++) map[index] = (unsigned char)(index * 7 + 3);
  CHECK(msync(map, size, MS_SYNC) == 0, "msync");
  CHECK(munmap(map, size) == 0 && close(fd) == 0, "munmap, close");
  fd = open(path, O_RDONLY);
  CHECK(fd >= 0, "reopen");
  unsigned char *bytes = malloc(size);
  CHECK(bytes && read(fd, bytes, size) == (ssize_t)size, "read back");
  for (size_t index = 0; index < size; index++) {
    if (bytes[index] != (unsigned char)(index * 7 + 3)) {
      fprintf(stderr, "v9fs-probe: byte %zu read back as %u\n", index, bytes[index]);
      return 1;
    }
  }
  free(bytes);
  close(fd);
  return 0;
}

static int probe_fsync(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0, "create");
  CHECK(write(fd, "durable", 7) == 7, "write");
  CHECK(fsync(fd) == 0, "fsync");
  CHECK(fdatasync(fd) == 0, "fdatasync");
  CHECK(ftruncate(fd, 3) == 0, "ftruncate");
  struct stat status;
  CHECK(fstat(fd, &status) == 0 && status.st_size == 3, "size after ftruncate");
  CHECK(close(fd) == 0, "close");
  off_t size = 0;
  CHECK(file_size(path, &size) == 0 && size == 3, "size by path");
  return 0;
}

static int probe_seekdir(const char *directory) {
  DIR *listing = opendir(directory);
  CHECK(listing != NULL, "opendir");
  static long positions[4096];
  static char names[4096][256];
  int count = 0;
  for (;;) {
    long position = telldir(listing);
    struct dirent *entry = readdir(listing);
    if (!entry) break;
    if (count == 4096) return fail("more than 4096 entries");
    positions[count] = position;
    snprintf(names[count], sizeof names[count], "%s", entry->d_name);
    count++;
  }
  CHECK(count >= 2, "at least . and ..");
  for (int start = count / 2; start >= 0; start -= count / 2 > 0 ? count / 2 : 1) {
    seekdir(listing, positions[start]);
    for (int index = start; index < count; index++) {
      struct dirent *entry = readdir(listing);
      if (!entry || strcmp(entry->d_name, names[index]) != 0) {
        fprintf(stderr, "v9fs-probe: after seekdir to entry %d, entry %d is %s, was %s\n", start, index,
                entry ? entry->d_name : "(end)", names[index]);
        return 1;
      }
    }
    if (start == 0) break;
  }
  closedir(listing);
  return 0;
}

static int probe_statfs(const char *directory) {
  struct statfs stats;
  CHECK(statfs(directory, &stats) == 0, "statfs");
  printf("type %#lx bsize %ld blocks %lu bfree %lu bavail %lu files %lu ffree %lu namelen %ld\n",
         (unsigned long)stats.f_type, (long)stats.f_bsize, (unsigned long)stats.f_blocks,
         (unsigned long)stats.f_bfree, (unsigned long)stats.f_bavail, (unsigned long)stats.f_files,
         (unsigned long)stats.f_ffree, (long)stats.f_namelen);
  CHECK(stats.f_blocks > 0 && stats.f_bfree <= stats.f_blocks && stats.f_bavail <= stats.f_bfree, "block counts");
  CHECK(stats.f_bsize >= 512 && stats.f_namelen == 255, "block size and name length");
  return 0;
}

/* The fd transport writes a message into the FIFO without blocking and relies on poll to
 * learn when the rest fits. Its poll keeps two wait queues per connection, and a pipe opened
 * for reading and writing takes both, so the writing FIFO's wake-up is never registered: a
 * message larger than the free buffer (64 KiB by default) stalls for ever. A buffer larger than
 * any msize makes every message fit at once. */
static int probe_pipe_size(const char *path) {
  int fd = open(path, O_RDWR | O_NONBLOCK);
  CHECK(fd >= 0, "open the FIFO");
  CHECK(fcntl(fd, F_SETPIPE_SZ, 4 << 20) >= (4 << 20), "F_SETPIPE_SZ 4 MiB");
  CHECK(close(fd) == 0, "close");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: v9fs-probe COMMAND PATH, COMMAND one of lock, utime, append, unlinked, excl,\n"
                    "       mmap, fsync, seekdir, statfs, pipe-size\n");
    return 2;
  }
  const char *command = argv[1], *path = argv[2];
  if (!strcmp(command, "lock")) return probe_lock(path);
  if (!strcmp(command, "utime")) return probe_utime(path);
  if (!strcmp(command, "append")) return probe_append(path);
  if (!strcmp(command, "unlinked")) return probe_unlinked(path);
  if (!strcmp(command, "excl")) return probe_excl(path);
  if (!strcmp(command, "mmap")) return probe_mmap(path);
  if (!strcmp(command, "fsync")) return probe_fsync(path);
  if (!strcmp(command, "seekdir")) return probe_seekdir(path);
  if (!strcmp(command, "statfs")) return probe_statfs(path);
  if (!strcmp(command, "pipe-size")) return probe_pipe_size(path);
  fprintf(stderr, "v9fs-probe: unknown command %s\n", command);
  return 2;
}
