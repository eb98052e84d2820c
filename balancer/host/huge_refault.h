/*
 * Whether this host faults memory back in huge pages after it was given
 * back 4 KiB at a time and then again in whole 2 MiB blocks.
 *
 * A balloon's pages go back to the host 4 KiB at a time (QEMU discards
 * each balloon page with madvise(MADV_DONTNEED)), which splits the
 * transparent huge page behind guest RAM into a page table of 4 KiB
 * entries; the guest's next touch of that memory is then faulted in 4 KiB
 * at a time, which costs the host (and the guest waiting on it) about 40
 * times what huge pages cost per 4 KiB touched (bench/fault_cost).  The
 * probe speaks for guest RAM in private anonymous memory (QEMU's
 * default), not for memfd or shared memory, which is discarded with
 * fallocate under shmem's huge page rules.  Free page
 * reporting hands free guest memory back in 2 MiB blocks; on kernels that
 * free a page table a discard has emptied (CONFIG_PT_RECLAIM), the next
 * touch of such a block faults in a huge page again.  The probe does just
 * that to 2 MiB of its own memory, once.
 */
#ifndef MEMBAL_HOST_HUGE_REFAULT_H
#define MEMBAL_HOST_HUGE_REFAULT_H

#include <stdbool.h>

/* true if it does; false with *why set (a sentence, static) if it does
 * not, or cannot be told (no transparent huge page for the probe). */
bool huge_refault_probe(const char **why);

#endif
