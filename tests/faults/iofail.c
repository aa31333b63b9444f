/*
 * The I/O fault shim of stepwell's fault suite. Loaded into a sidecar with
 * LD_PRELOAD, it fails one chosen call: the Nth write (write, pwrite,
 * pwrite64, writev) or the Nth sync (fsync, fdatasync) on a file under a
 * directory, counted while an "arm" file exists, with EIO or ENOSPC. Everything else passes through untouched. Settings, from the
 * environment:
 *
 *   STEPWELL_IOFAIL_DIR    only files under this directory count
 *   STEPWELL_IOFAIL_OP     "write" or "sync"
 *   STEPWELL_IOFAIL_NTH    which counted call fails (1 = the first)
 *   STEPWELL_IOFAIL_ERRNO  "EIO" (the default) or "ENOSPC"
 *   STEPWELL_IOFAIL_ARM    calls count only while this file exists
 *   STEPWELL_IOFAIL_FIRED  created when the fault has been injected
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static atomic_long counted;
static atomic_int fired;

/* Whether fd is a file under STEPWELL_IOFAIL_DIR. */
static int watched(int fd) {
    const char *dir = getenv("STEPWELL_IOFAIL_DIR");
    char link[64], path[4096];
    if (dir == NULL) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return strncmp(path, dir, strlen(dir)) == 0;
}

/* Whether this call of kind `op` on fd is the one to fail. */
static int should_fail(const char *op, int fd) {
    const char *want = getenv("STEPWELL_IOFAIL_OP");
    if (want == NULL || strcmp(want, op) != 0 || atomic_load(&fired) || !watched(fd)) return 0;
    const char *arm = getenv("STEPWELL_IOFAIL_ARM");
    if (arm == NULL || access(arm, F_OK) != 0) return 0;
    const char *nth = getenv("STEPWELL_IOFAIL_NTH");
    if (atomic_fetch_add(&counted, 1) + 1 != (nth ? atol(nth) : 1)) return 0;
    if (atomic_exchange(&fired, 1)) return 0;
    const char *mark = getenv("STEPWELL_IOFAIL_FIRED");
    if (mark != NULL) {
        int f = open(mark, O_CREAT | O_WRONLY, 0644);
        if (f >= 0) close(f);
    }
    const char *name = getenv("STEPWELL_IOFAIL_ERRNO");
    errno = (name != NULL && strcmp(name, "ENOSPC") == 0) ? ENOSPC : EIO;
    return 1;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t write(int fd, const void *buf, size_t n) {
    return should_fail("write", fd) ? -1 : REAL(write)(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
    return should_fail("write", fd) ? -1 : REAL(pwrite)(fd, buf, n, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t offset) {
    return should_fail("write", fd) ? -1 : REAL(pwrite64)(fd, buf, n, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    return should_fail("write", fd) ? -1 : REAL(writev)(fd, iov, count);
}

int fsync(int fd) {
    return should_fail("sync", fd) ? -1 : REAL(fsync)(fd);
}

int fdatasync(int fd) {
    return should_fail("sync", fd) ? -1 : REAL(fdatasync)(fd);
}
