/* fileio.h - checked file I/O: read a whole file, or map it read-only. */
#ifndef AIINFRA_FILEIO_H
#define AIINFRA_FILEIO_H

#include <stddef.h>

#include "aiinfra/status.h"

/* Reads all of `path` into a fresh malloc'd, NUL-terminated buffer.
 * `max_bytes` bounds the size (0 = no bound) so a wrong path cannot eat memory. */
ai_status file_read_all(const char *path, size_t max_bytes, char **data, size_t *len, ai_err *err);

/* Reads all of a FILE* stream (e.g. stdin). */
ai_status file_read_stream(void *fp, size_t max_bytes, char **data, size_t *len, ai_err *err);

/* A read-only memory map of a whole file (an empty file maps to data=NULL, len=0). */
typedef struct file_map {
    const unsigned char *data;
    size_t len;
} file_map;

ai_status file_map_open(file_map *m, const char *path, ai_err *err);
void file_map_close(file_map *m);

/* 1 if path is a directory, 0 if not (or absent). */
int file_is_dir(const char *path);
/* 1 if path exists and is a regular file. */
int file_is_regular(const char *path);

#endif
