#include "policies/guest_table.h"

#include <stdlib.h>
#include <string.h>

static guest_table_key *at(const guest_table *t, size_t i)
{
    return (guest_table_key *)(t->items + i * t->size);
}

void guest_table_init(guest_table *t, size_t entry_size, size_t max_entries)
{
    memset(t, 0, sizeof(*t));
    t->size = entry_size;
    t->max = max_entries;
}

void *guest_table_lookup(guest_table *t, size_t hint, const char *id)
{
    id = id ? id : "";
    if (hint < t->n && strcmp(at(t, hint)->id, id) == 0)
        return at(t, hint);
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(at(t, i)->id, id) == 0)
            return at(t, i);
    return NULL;
}

void *guest_table_get(guest_table *t, size_t hint, const char *id)
{
    guest_table_key *k = guest_table_lookup(t, hint, id);
    if (!k) {
        if (t->n == t->cap) {
            size_t ncap = t->cap ? t->cap * 2 : 16;
            if (ncap > t->max)
                ncap = t->max;
            unsigned char *items = ncap > t->cap ? realloc(t->items, ncap * t->size) : NULL;
            if (!items)
                return NULL;
            t->items = items;
            t->cap = ncap;
        }
        char *copy = strdup(id ? id : "");
        if (!copy)
            return NULL;
        k = at(t, t->n++);
        memset(k, 0, t->size);
        k->id = copy;
    }
    k->seen = true;
    return k;
}

void guest_table_sweep(guest_table *t)
{
    size_t kept = 0;
    for (size_t i = 0; i < t->n; i++) {
        guest_table_key *k = at(t, i);
        if (!k->seen) {
            free(k->id);
            continue;
        }
        k->seen = false;
        if (kept != i)
            memcpy(at(t, kept), k, t->size);
        kept++;
    }
    t->n = kept;
}

void guest_table_clear(guest_table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(at(t, i)->id);
    free(t->items);
    memset(t, 0, sizeof(*t));
}
