#define _POSIX_C_SOURCE 200809L
#include "aiinfra/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

ai_status file_read_stream(void *fp_, size_t max_bytes, char **data, size_t *len, ai_err *err)
{
    FILE *fp = fp_;
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    if (!p) return ai_err_set(err, AI_ERR_NOMEM, "out of memory reading stream");
    for (;;) {
        if (n + 1 >= cap) {
            if (max_bytes && cap > max_bytes + 1) {
                free(p);
                return ai_err_set(err, AI_ERR_RANGE, "input larger than %zu bytes", max_bytes);
            }
            char *q = realloc(p, cap * 2);
            if (!q) { free(p); return ai_err_set(err, AI_ERR_NOMEM, "out of memory reading stream"); }
            p = q;
            cap *= 2;
        }
        size_t got = fread(p + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) break;
    }
    if (ferror(fp)) { free(p); return ai_err_set(err, AI_ERR_IO, "read error: %s", strerror(errno)); }
    if (max_bytes && n > max_bytes) {
        free(p);
        return ai_err_set(err, AI_ERR_RANGE, "input larger than %zu bytes", max_bytes);
    }
    p[n] = '\0';
    *data = p;
    *len = n;
    return AI_OK;
}

ai_status file_read_all(const char *path, size_t max_bytes, char **data, size_t *len, ai_err *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return ai_err_set(err, AI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    ai_status st = file_read_stream(fp, max_bytes, data, len, err);
    fclose(fp);
    if (st != AI_OK) ai_err_prefix(err, "%s", path);
    return st;
}

ai_status file_map_open(file_map *m, const char *path, ai_err *err)
{
    m->data = NULL;
    m->len = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ai_err_set(err, AI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return ai_err_set(err, AI_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ai_err_set(err, AI_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) { close(fd); return AI_OK; }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return ai_err_set(err, AI_ERR_IO, "%s: cannot mmap: %s", path, strerror(errno));
    m->data = p;
    m->len = (size_t)st.st_size;
    return AI_OK;
}

void file_map_close(file_map *m)
{
    if (m->data) munmap((void *)m->data, m->len);
    m->data = NULL;
    m->len = 0;
}

int file_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int file_is_regular(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
