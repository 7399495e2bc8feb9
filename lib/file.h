/*
 * file.h - opening the files of a model directory (config, weights,
 * tokenizer) so that a hostile directory cannot hang or mislead the loader:
 * every open is non-blocking (a FIFO named config.json cannot block it),
 * anything but a regular file is refused with QW_ERR_IO naming the file and
 * what it is, and whole-file reads are bounded.
 *
 * Every file the loaders (model.c, safetensors.c, tokenizer*.c) read goes
 * through here.
 */
#ifndef QWI_FILE_H
#define QWI_FILE_H

#include "common.h"

/* Largest text file (JSON, merges.txt) qwi_file_read accepts: real
 * tokenizer.json files are at most a few tens of MB. */
#define QWI_FILE_MAX_TEXT ((uint64_t)256 << 20)

/* Open path read-only for loading. On success *fd is an open descriptor
 * (blocking mode, close-on-exec) of a regular file that the caller closes,
 * and *size (if not NULL) its size. A path that does not exist gives
 * QW_ERR_IO, or, when optional, QW_OK with *fd = -1. A directory, FIFO,
 * device or socket gives QW_ERR_IO "<path>: is a FIFO, not a regular file";
 * any other failure QW_ERR_IO with the errno text. On failure *fd is -1 and
 * nothing is left open. */
qw_status qwi_file_open(const char *path, bool optional, int *fd, uint64_t *size);

/* Read the whole regular file at path (opened as qwi_file_open does). On
 * success *data is a malloc'd buffer of *len bytes plus a terminating NUL
 * (the caller frees it); a missing optional file gives QW_OK with *data NULL
 * and *len 0. A file over QWI_FILE_MAX_TEXT bytes gives QW_ERR_FORMAT; open
 * and read failures QW_ERR_IO; QW_ERR_OUT_OF_MEMORY. Messages name path. On
 * failure *data is NULL and nothing leaks. */
qw_status qwi_file_read(const char *path, bool optional, char **data, size_t *len);

/* 1 if anything (of any type) exists at path, following symlinks, else 0.
 * For choosing between alternative files: the one found is then opened with
 * qwi_file_open, which refuses it if it is not a regular file, rather than
 * silently falling back to another file. */
int qwi_file_exists(const char *path);

/* QW_ERR_INVALID_ARGUMENT naming what ("QW_OPT_MODEL_PATH") when dir is
 * NULL or empty (an empty directory would make "/config.json" of the root
 * the file read), else QW_OK. */
qw_status qwi_file_check_dir(const char *dir, const char *what);

#endif
