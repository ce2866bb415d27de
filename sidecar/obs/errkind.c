/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include <kvstash/abi.h>

#include "obs/errkind.h"

static const char *const err_names[ERRK_COUNT] = {
	[ERRK_INVAL] = "invalid",	 [ERRK_RANGE] = "block_out_of_range",
	[ERRK_TOOBIG] = "too_many_keys", [ERRK_FAULT] = "bad_arguments",
	[ERRK_NOTSUP] = "unknown_op",	 [ERRK_PERM] = "not_permitted",
	[ERRK_UNSEALED] = "unsealed",	 [ERRK_NOLEASE] = "unknown_lease",
	[ERRK_ALREADY] = "lease_already_used", [ERRK_ACCES] = "foreign_lease",
	[ERRK_NOSPC] = "pool_full",	 [ERRK_BUSY] = "lease_limit",
	[ERRK_IO] = "copy_failed",	 [ERRK_CANCELED] = "canceled",
	[ERRK_NOMEM] = "out_of_memory",	 [ERRK_OTHER] = "other",
};

enum err_kind err_kind_of(int e)
{
	switch (-e) {
	case EINVAL: return ERRK_INVAL;
	case ERANGE: return ERRK_RANGE;
	case E2BIG: return ERRK_TOOBIG;
	case EFAULT: return ERRK_FAULT;
	case EOPNOTSUPP: return ERRK_NOTSUP;
	case EPERM: return ERRK_PERM;
	case KVS_EUNSEALED: return ERRK_UNSEALED;
	case ENOENT: return ERRK_NOLEASE;
	case EALREADY: return ERRK_ALREADY;
	case EACCES: return ERRK_ACCES;
	case ENOSPC: return ERRK_NOSPC;
	case EBUSY: return ERRK_BUSY;
	case EIO: return ERRK_IO;
	case ECANCELED: return ERRK_CANCELED;
	case ENOMEM: return ERRK_NOMEM;
	default: return ERRK_OTHER;
	}
}

const char *err_kind_name(enum err_kind k)
{
	return k < ERRK_COUNT ? err_names[k] : "other";
}
