/* name_table.h - a fixed-capacity hash table from NUL-terminated names to pointers,
 * used by the safetensors readers for O(1) tensor lookup and duplicate detection.
 * Sized once for n names (two-pass style: count, then allocate); never grows. */
#ifndef AIINFRA_NAME_TABLE_H
#define AIINFRA_NAME_TABLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct name_table {
    struct name_entry {
        const char *name; /* NULL: empty slot; not owned */
        const void *item;
    } *slots;
    uint64_t mask;
} name_table;

bool name_table_init(name_table *t, uint64_t n);  /* room for n names; false on OOM */
void name_table_free(name_table *t);
/* Inserts name -> item. When name is already there, returns the existing item and
 * inserts nothing; otherwise returns NULL. At most n inserts. */
const void *name_table_put(name_table *t, const char *name, const void *item);
const void *name_table_find(const name_table *t, const char *name);

#endif
