/* SPDX-License-Identifier: MIT */
/*
 * Fault injection for the SSD tier's tests: rules that make the Nth data
 * I/O of a drive fail, tear, lie or vanish, so every failure path runs
 * against real files without kernel fault modules.  Compiled in always,
 * inert unless configured (ssd_config.faults, else $KVSTASH_SSD_FAULTS);
 * an unconfigured drive pays one NULL test per I/O.
 *
 * Rules, separated by ';' or newlines ("@FILE" reads them from FILE):
 *
 *   [dD:]OP@N=ACTION    the Nth OP (1-based) of drive D (default: any)
 *   [dD:]OP%N=ACTION    every Nth OP
 *
 *   OP      write (block writes), read (block reads), any (both),
 *           sync (the datasyncs that make regions' erases durable)
 *   ACTION  eio     complete with -EIO, nothing submitted
 *           enodev  complete with -ENODEV (a removed device)
 *           short   submit half the bytes, report the short count
 *           tear    submit half the bytes, report the full count (the
 *                   device lied: a torn block that only its checksum finds)
 *           flip    (read) flip one bit of the payload after it arrived
 *
 * Counting is per drive and per OP, from ssd_open().
 */
#ifndef KVS_SSD_FAULT_H
#define KVS_SSD_FAULT_H

#include <stdbool.h>
#include <stdint.h>

enum ssd_fault {
	SSD_FAULT_NONE,
	SSD_FAULT_EIO,
	SSD_FAULT_ENODEV,
	SSD_FAULT_SHORT,
	SSD_FAULT_TEAR,
	SSD_FAULT_FLIP,
};

struct ssd_faults;

/* NULL or empty @spec: *ret = NULL (inert).  -EINVAL with @err on a bad rule. */
int ssd_faults_parse(const char *spec, struct ssd_faults **ret, char *err, size_t errlen);
void ssd_faults_free(struct ssd_faults *f);

/* Count one I/O of @drive and return the fault to inject (thread-safe). */
enum ssd_fault ssd_fault_next(struct ssd_faults *f, unsigned drive, bool write);
/* The same for one datasync of @drive (eio and enodev apply; "any" does not count it). */
enum ssd_fault ssd_fault_sync(struct ssd_faults *f, unsigned drive);

#endif /* KVS_SSD_FAULT_H */
