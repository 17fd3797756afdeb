/* name_table.c - open addressing with linear probing, capacity a power of two >= 2n
 * (so the load factor stays <= 1/2 and a probe always meets an empty slot). */
#include "formats/name_table.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

bool name_table_init(name_table *t, uint64_t n)
{
    uint64_t cap = 8;
    while (cap < 2 * n) cap *= 2;
    t->slots = cap <= SIZE_MAX / sizeof *t->slots ? calloc((size_t)cap, sizeof *t->slots) : NULL;
    t->mask = cap - 1;
    return t->slots != NULL;
}

void name_table_free(name_table *t)
{
    free(t->slots);
    t->slots = NULL;
}

static uint64_t slot_of(const name_table *t, const char *name)
{
    uint64_t h = XXH3_64bits(name, strlen(name)) & t->mask;
    while (t->slots[h].name && strcmp(t->slots[h].name, name)) h = (h + 1) & t->mask;
    return h;
}

const void *name_table_put(name_table *t, const char *name, const void *item)
{
    uint64_t h = slot_of(t, name);
    if (t->slots[h].name) return t->slots[h].item;
    t->slots[h].name = name;
    t->slots[h].item = item;
    return NULL;
}

const void *name_table_find(const name_table *t, const char *name)
{
    if (!t->slots) return NULL;
    uint64_t h = slot_of(t, name);
    return t->slots[h].name ? t->slots[h].item : NULL;
}
