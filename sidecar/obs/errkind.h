/* SPDX-License-Identifier: MIT */
/*
 * Error kinds: the bounded set of labels kvstash_errors_total{kind} counts
 * failed operations under, one per -errno a CQE can carry (abi.h), and
 * "other" for the rest.
 */
#ifndef KVS_ERRKIND_H
#define KVS_ERRKIND_H

enum err_kind {
	ERRK_INVAL,
	ERRK_RANGE,
	ERRK_TOOBIG,
	ERRK_FAULT,
	ERRK_NOTSUP,
	ERRK_PERM,
	ERRK_UNSEALED,
	ERRK_NOLEASE,
	ERRK_ALREADY,
	ERRK_ACCES,
	ERRK_NOSPC,
	ERRK_BUSY,
	ERRK_IO,
	ERRK_CANCELED,
	ERRK_NOMEM,
	ERRK_OTHER,
	ERRK_COUNT,
};

/* The kind of a CQE's res (-errno). */
enum err_kind err_kind_of(int neg_errno);
/* Its label value: "pool_full", ...; "other" for anything out of range. */
const char *err_kind_name(enum err_kind k);

#endif /* KVS_ERRKIND_H */
