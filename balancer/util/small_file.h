/*
 * Small kernel-provided text files (/proc, /sys, cgroupfs): read whole,
 * NUL-terminated and bounded; written in one plain write (no temp file and
 * rename, which cgroupfs and sysfs do not allow).
 */
#ifndef MEMBAL_SMALL_FILE_H
#define MEMBAL_SMALL_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The file's text (g_free it), at most max bytes of it; NULL with errno. */
char *small_file_read(const char *path, size_t max);
/* dir/file into buf (len bytes with the NUL).  0, or -1 with errno. */
int small_file_read_at(const char *dir, const char *file, char *buf, size_t len);
/* A decimal number from dir/file; "max" (cgroup v2's no limit) sets
 * *is_max when is_max is given.  0, or -1. */
int small_file_read_u64(const char *dir, const char *file, uint64_t *out, bool *is_max);
/* text into dir/file.  0, or -1 with errno. */
int small_file_write_at(const char *dir, const char *file, const char *text);

#endif
