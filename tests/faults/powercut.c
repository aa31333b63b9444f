/*
 * The power-cut shim of stepwell's fault suite. Loaded into a sidecar with
 * LD_PRELOAD, it keeps an undo journal of every change the sidecar makes to
 * the files under one directory (the SQLite store's), so that after a
 * SIGKILL the test can put the files back as a power loss would have left
 * them: what was not made durable by an fsync is undone (power_loss.rs,
 * journal.rs). Settings, from the environment:
 *
 *   STEPWELL_POWERCUT_DIR  only files under this directory are journalled
 *   STEPWELL_POWERCUT_LOG  the journal: a file outside that directory,
 *                          appended to with the real libc calls and never
 *                          synced (the page cache survives a SIGKILL)
 *
 * Each record is one write(2) of: a tag byte, the path (u32 length, bytes),
 * then the tag's fields, integers as little-endian u64:
 *
 *   W  a write (write, pwrite, pwrite64, writev, pwritev), journalled before
 *      it is made: offset, file size before, the old bytes of the range
 *      (short where it lies past the end), and the new bytes (for torn
 *      writes). write(2) writes at the fd's offset, or at the end (O_APPEND).
 *   T  ftruncate/ftruncate64: size before, new size, the bytes cut off.
 *   S  fsync/fdatasync of a file: its earlier records are durable.
 *   C  open/open64/openat/openat64/creat with O_CREAT made a new file.
 *   D  fsync/fdatasync of a directory: every file created in it earlier is
 *      durable (its directory entry is on disk).
 *
 * A global mutex makes "read the old bytes, journal, write" one step, as
 * SQLite writes from several threads. Not modelled: the -shm file (the
 * wal-index, which SQLite rebuilds from the WAL at the first open after a
 * crash, so it is not journalled at all), unlink and rename (passed through;
 * a file unlinked before the cut stays unlinked), fallocate, and writes
 * through mmap. Everything else passes through untouched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int journal = -1;

/* A growing record buffer. */
struct buf {
    char *data;
    size_t len, cap;
};

static void put(struct buf *b, const void *bytes, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *data = realloc(b->data, cap);
        if (data == NULL) abort();
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
}

static void put_u64(struct buf *b, uint64_t v) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; i++) bytes[i] = (unsigned char)(v >> (8 * i));
    put(b, bytes, 8);
}

/* Starts a record: tag and path. */
static void start(struct buf *b, char tag, const char *path) {
    uint32_t n = (uint32_t)strlen(path);
    unsigned char len[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 24)};
    put(b, &tag, 1);
    put(b, len, 4);
    put(b, path, n);
}

/* Appends a finished record to the journal, in one write, and frees it. */
static void emit(struct buf *b) {
    if (journal < 0) {
        const char *log = getenv("STEPWELL_POWERCUT_LOG");
        if (log == NULL) abort();
        journal = REAL(open)(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (journal < 0) abort();
    }
    size_t done = 0;
    while (done < b->len) {
        ssize_t n = REAL(write)(journal, b->data + done, b->len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) abort();
        done += (size_t)n;
    }
    free(b->data);
}

/* Whether an absolute path is under STEPWELL_POWERCUT_DIR (and not -shm). */
static int watched_path(const char *path) {
    const char *dir = getenv("STEPWELL_POWERCUT_DIR");
    if (dir == NULL || path == NULL) return 0;
    size_t n = strlen(dir), len = strlen(path);
    if (strncmp(path, dir, n) != 0 || (path[n] != '/' && path[n] != '\0')) return 0;
    return !(len >= 4 && strcmp(path + len - 4, "-shm") == 0);
}

/* The path of fd into `path`, if it is watched. */
static int watched(int fd, char *path, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, size - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return watched_path(path);
}

static int64_t file_size(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* Reads [offset, offset + n) of fd, short past the end, into b. */
static void put_old(struct buf *b, int fd, int64_t offset, size_t n, int64_t size) {
    size_t have = offset >= size ? 0 : (size_t)(size - offset < (int64_t)n ? size - offset : (int64_t)n);
    char *old = malloc(have ? have : 1);
    if (old == NULL) abort();
    size_t got = 0;
    while (got < have) {
        ssize_t r = pread(fd, old + got, have - got, offset + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    put_u64(b, got);
    put(b, old, got);
    free(old);
}

/* Journals a W record of the iovecs about to be written at offset (-1: the
 * fd's offset, or the end with O_APPEND). Called with the lock held. */
static void journal_write(int fd, const char *path, const struct iovec *iov, int count, int64_t offset) {
    int64_t size = file_size(fd);
    if (offset < 0) offset = (fcntl(fd, F_GETFL) & O_APPEND) ? size : (int64_t)lseek(fd, 0, SEEK_CUR);
    size_t total = 0;
    for (int i = 0; i < count; i++) total += iov[i].iov_len;
    struct buf b = {0};
    start(&b, 'W', path);
    put_u64(&b, (uint64_t)offset);
    put_u64(&b, (uint64_t)size);
    put_old(&b, fd, offset, total, size);
    put_u64(&b, total);
    for (int i = 0; i < count; i++) put(&b, iov[i].iov_base, iov[i].iov_len);
    emit(&b);
}

/* A marker record (S, C or D) for path. */
static void marker(char tag, const char *path) {
    struct buf b = {0};
    start(&b, tag, path);
    emit(&b);
}

/* The journalled form of every write: lock, journal, write, unlock. */
#define JOURNALLED(fd, iov, count, offset, call)                        \
    do {                                                                \
        char path_[4096];                                               \
        if (!watched(fd, path_, sizeof path_)) return call;             \
        pthread_mutex_lock(&lock);                                      \
        journal_write(fd, path_, iov, count, offset);                   \
        __typeof__(call) result_ = call;                                \
        int errno_ = errno;                                             \
        pthread_mutex_unlock(&lock);                                    \
        errno = errno_;                                                 \
        return result_;                                                 \
    } while (0)

ssize_t write(int fd, const void *buf, size_t n) {
    struct iovec iov = {(void *)buf, n};
    JOURNALLED(fd, &iov, 1, -1, REAL(write)(fd, buf, n));
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
    struct iovec iov = {(void *)buf, n};
    JOURNALLED(fd, &iov, 1, (int64_t)offset, REAL(pwrite)(fd, buf, n, offset));
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t offset) {
    struct iovec iov = {(void *)buf, n};
    JOURNALLED(fd, &iov, 1, (int64_t)offset, REAL(pwrite64)(fd, buf, n, offset));
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    JOURNALLED(fd, iov, count, -1, REAL(writev)(fd, iov, count));
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    JOURNALLED(fd, iov, count, (int64_t)offset, REAL(pwritev)(fd, iov, count, offset));
}

/* Journals a T record for cutting or growing fd to length. */
static void journal_truncate(int fd, const char *path, int64_t length) {
    int64_t size = file_size(fd);
    struct buf b = {0};
    start(&b, 'T', path);
    put_u64(&b, (uint64_t)size);
    put_u64(&b, (uint64_t)length);
    if (length < size) {
        put_old(&b, fd, length, (size_t)(size - length), size);
    } else {
        put_u64(&b, 0);
    }
    emit(&b);
}

#define TRUNCATED(fd, length, call)                                     \
    do {                                                                \
        char path_[4096];                                               \
        if (!watched(fd, path_, sizeof path_)) return call;             \
        pthread_mutex_lock(&lock);                                      \
        journal_truncate(fd, path_, (int64_t)(length));                 \
        int result_ = call;                                             \
        int errno_ = errno;                                             \
        pthread_mutex_unlock(&lock);                                    \
        errno = errno_;                                                 \
        return result_;                                                 \
    } while (0)

int ftruncate(int fd, off_t length) {
    TRUNCATED(fd, length, REAL(ftruncate)(fd, length));
}

int ftruncate64(int fd, off64_t length) {
    TRUNCATED(fd, length, REAL(ftruncate64)(fd, length));
}

/* After a successful sync of fd: S for a file, D for a directory. */
static int synced(int fd, int result) {
    char path[4096];
    struct stat st;
    if (result != 0 || !watched(fd, path, sizeof path) || fstat(fd, &st) != 0) return result;
    int errno_ = errno;
    pthread_mutex_lock(&lock);
    marker(S_ISDIR(st.st_mode) ? 'D' : 'S', path);
    pthread_mutex_unlock(&lock);
    errno = errno_;
    return result;
}

int fsync(int fd) {
    return synced(fd, REAL(fsync)(fd));
}

int fdatasync(int fd) {
    return synced(fd, REAL(fdatasync)(fd));
}

/* The absolute form of path (relative to dirfd) into out. */
static void absolute(int dirfd, const char *path, char *out, size_t size) {
    if (path[0] == '/') {
        snprintf(out, size, "%s", path);
        return;
    }
    char base[4096] = "";
    if (dirfd == AT_FDCWD) {
        if (getcwd(base, sizeof base) == NULL) base[0] = '\0';
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof base - 1);
        base[n > 0 ? n : 0] = '\0';
    }
    snprintf(out, size, "%s/%s", base, path);
}

/* Opens with `call`, journalling C if O_CREAT made a new watched file. */
#define CREATING(dirfd, path, flags, call)                              \
    do {                                                                \
        char abs_[4096];                                                \
        if (!((flags) & O_CREAT)) return call;                          \
        absolute(dirfd, path, abs_, sizeof abs_);                       \
        if (!watched_path(abs_)) return call;                           \
        pthread_mutex_lock(&lock);                                      \
        int existed_ = access(abs_, F_OK) == 0;                         \
        int fd_ = call;                                                 \
        int errno_ = errno;                                             \
        if (fd_ >= 0 && !existed_) marker('C', abs_);                   \
        pthread_mutex_unlock(&lock);                                    \
        errno = errno_;                                                 \
        return fd_;                                                     \
    } while (0)

static mode_t mode_of(int flags, va_list args) {
    return ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    CREATING(AT_FDCWD, path, flags, REAL(open)(path, flags, mode));
}

int open64(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    CREATING(AT_FDCWD, path, flags, REAL(open64)(path, flags, mode));
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    CREATING(dirfd, path, flags, REAL(openat)(dirfd, path, flags, mode));
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    CREATING(dirfd, path, flags, REAL(openat64)(dirfd, path, flags, mode));
}

int creat(const char *path, mode_t mode) {
    CREATING(AT_FDCWD, path, O_CREAT, REAL(creat)(path, mode));
}
