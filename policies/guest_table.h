/*
 * Per-guest memory a policy keeps across ticks (histories, what reclaim
 * learnt), keyed by the guest's id.  Entries are structs of the policy's
 * own type whose first member is a guest_table_key; the table owns the id.
 * A lookup is O(1) when guests come in the same order as last tick (the
 * index is the hint), else linear.  Entries a tick did not get are dropped
 * by guest_table_sweep, so the table cannot outgrow the guests.
 */
#ifndef MEMBAL_GUEST_TABLE_H
#define MEMBAL_GUEST_TABLE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *id;
    bool seen;   /* got this tick */
} guest_table_key;

typedef struct {
    unsigned char *items;
    size_t n, cap;
    size_t size; /* bytes per entry */
    size_t max;  /* entries at most */
} guest_table;

void guest_table_init(guest_table *t, size_t entry_size, size_t max_entries);
/* The entry for id, or NULL. */
void *guest_table_lookup(guest_table *t, size_t hint, const char *id);
/* The entry for id, created zeroed when new, marked seen; NULL when out of
 * memory or full.  Pointers from earlier calls may move. */
void *guest_table_get(guest_table *t, size_t hint, const char *id);
/* Drop the entries not got since the last sweep, keeping the order. */
void guest_table_sweep(guest_table *t);
void guest_table_clear(guest_table *t);

#endif
