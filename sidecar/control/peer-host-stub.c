/* SPDX-License-Identifier: MIT */
/*
 * Without libkvspeer (configure found no libucx-dev or nettle-dev): a
 * configured peer service is refused with the reason, a fetching QUERY is
 * answered -EOPNOTSUPP by its worker (worker_env.peer is false), and
 * nothing else changes.
 */
#include <errno.h>
#include <stdio.h>

#include "control/daemon.h"
#include "control/peer-host.h"
#include "io/worker.h"
#include "obs/log.h"

#define NOT_BUILT                                                                    \
	"[cluster] peer_listen is set, but peer transfer is not compiled in (kvstashd " \
	"was built without libkvspeer: apt-get install libucx-dev nettle-dev, configure " \
	"--with-ucx)"

int peer_check_config(const struct kvs_config *cfg, char *why, size_t wl)
{
	why[0] = '\0';
	if (!cfg->peer_listen || !cfg->peer_listen[0])
		return 0;
	snprintf(why, wl, "%s", NOT_BUILT);
	return -EOPNOTSUPP;
}

int peer_init(struct daemon *d)
{
	if (!d->cfg->peer_listen || !d->cfg->peer_listen[0])
		return 0;
	return log_error_errno(EOPNOTSUPP, "%s", NOT_BUILT);
}

void peer_set_epoch(struct daemon *d, uint64_t epoch)
{
	(void)d, (void)epoch;
}

void peer_shutdown(struct daemon *d)
{
	(void)d;
}

void peer_fini(struct daemon *d)
{
	(void)d;
}

bool peer_sample(struct daemon *d, struct kvspeer_stats *ret_stats,
		 struct kvspeer_peer_info *ret_peers, unsigned max, unsigned *ret_nr)
{
	(void)d, (void)ret_stats, (void)ret_peers, (void)max, (void)ret_nr;
	return false;
}

void peer_fetch(struct daemon *d, struct op *op, const char *addr, const char *node,
		uint64_t epoch, uint32_t nkeys)
{
	(void)d, (void)addr, (void)node, (void)epoch, (void)nkeys;
	op->fetch_err = -EOPNOTSUPP;
	worker_cluster_done(op);
}
