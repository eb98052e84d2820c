/* Parsing of operator-written sizes: "1GiB", "512MiB", "4096", "5%". */
#ifndef MEMBAL_SIZE_PARSE_H
#define MEMBAL_SIZE_PARSE_H

#include <stdbool.h>
#include <stdint.h>

/* Bytes with an optional suffix, as libvirt reads them (case-insensitive):
 * B or bytes; K/KiB, M/MiB, G/GiB, T/TiB binary; KB, MB, GB, TB decimal
 * (powers of 1000).  Returns 0, or -1 for empty, negative, fractional,
 * unknown suffix or overflow. */
int size_parse(const char *text, uint64_t *bytes);

/* A size, or a percentage ("5%", "2.5%") of total. */
int size_or_percent_parse(const char *text, uint64_t total, uint64_t *bytes);

/* "1.5 GiB", "384 MiB", "12 KiB" into buf. */
const char *size_format(uint64_t bytes, char *buf, unsigned len);

#endif
