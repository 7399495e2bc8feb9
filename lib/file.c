/*
 * file.c - safe opening and reading of model directory files (see file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

/* Open non-blocking (so opening a FIFO without a writer returns at once
 * instead of waiting forever), check the type on the descriptor itself (no
 * race with a stat of the name), then go back to blocking reads. */
qw_status qwi_file_open(const char *path, bool optional, int *fd, uint64_t *size) {
    *fd = -1;
    if (size) *size = 0;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) {
        int e = errno;
        if (optional && e == ENOENT) return QW_OK;
        return qwi_fail(QW_ERR_IO, "open %s: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return qwi_fail(QW_ERR_IO, "stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return qwi_fail(QW_ERR_IO, "%s: is %s, not a regular file", path, file_kind(sb.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return qwi_fail(QW_ERR_IO, "fcntl %s: %s", path, strerror(e));
    }
    *fd = f;
    if (size) *size = (uint64_t)sb.st_size;
    return QW_OK;
}

/* Whole file into a NUL-terminated malloc'd buffer (contract in file.h). */
qw_status qwi_file_read(const char *path, bool optional, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    qw_status st = qwi_file_open(path, optional, &fd, &size);
    if (st != QW_OK || fd < 0) return st;
    if (size > QWI_FILE_MAX_TEXT) {
        close(fd);
        return qwi_fail(QW_ERR_FORMAT, "%s: %llu bytes, more than the %llu a model text file "
                        "(JSON, merges.txt) may have", path, (unsigned long long)size,
                        (unsigned long long)QWI_FILE_MAX_TEXT);
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory for %llu bytes", path,
                        (unsigned long long)size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, (size_t)size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return qwi_fail(QW_ERR_IO, "read %s: %s", path,
                            e ? strerror(e) : "the file shrank while it was read");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *data = buf;
    *len = got;
    return QW_OK;
}

/* 1 if stat(path) succeeds: something of any type is there. */
int qwi_file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* INVALID_ARGUMENT for a NULL or empty directory path, naming what. */
qw_status qwi_file_check_dir(const char *dir, const char *what) {
    if (!dir || !*dir)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s is %s: give a model directory", what,
                        dir ? "empty" : "NULL");
    return QW_OK;
}
