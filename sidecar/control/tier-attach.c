/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include <urcu/urcu-memb.h>

#include "control/daemon.h"
#include "control/tier-attach.h"
#include "io/worker.h"
#include "obs/log.h"
#include "ssd/ssd.h"
#include "store/store.h"

int tier_check_config(const struct kvs_config *cfg, char *why, size_t wl)
{
	struct ssd_conf_paths paths;
	struct ssd_config sc;
	int r;

	why[0] = '\0';
	r = ssd_config_from_kvs(cfg, &sc, &paths, why, wl);
	if (r < 0) {
		if (!why[0])
			snprintf(why, wl, "[ssd]: %s", strerror(-r));
		return r;
	}
#if !HAVE_LIBURING
	if (sc.nr_paths) {
		snprintf(why, wl,
			 "[ssd] path is set, but the SSD tier is not compiled in "
			 "(kvstashd was built without liburing)");
		r = -EOPNOTSUPP;
	}
#endif
	ssd_conf_paths_free(&paths);
	return r;
}

/* A drive thread calls into the store (RCU read side, call_rcu): a registered reader. */
static void drive_thread_init(void *arg)
{
	(void)arg;
	urcu_memb_register_thread();
}

static void drive_thread_fini(void *arg)
{
	(void)arg;
	urcu_memb_unregister_thread();
}

static void on_ssd_log(void *arg, int level, int err, const char *msg)
{
	(void)arg;
	log_full(level, err, "ssd", "%s", msg);
}

/*
 * The store's wake hook (a drive thread, no lock held): reads ended, so
 * parked LOADs may go on.  The workers are started after the tier is set
 * and stopped after tier_close() returned (lifecycle.c), so the array is
 * stable while a drive thread can call this.
 */
static void tier_wake(void *arg)
{
	struct daemon *d = arg;
	unsigned n = __atomic_load_n(&d->nr_workers, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < n; i++)
		worker_wake(d->workers[i]);
}

/* A start-up error: the module's reason names the path and its errno already. */
static int tier_error(int r, const char *err, const char *what)
{
	if (!err[0])
		return log_error_errno(r, "ssd: %s", what);
	log_error("ssd: %s", err);
	return r;
}

int tier_init(struct daemon *d)
{
	struct ssd_buf bufs[POOL_MAX_REGIONS];
	struct ssd_conf_paths paths;
	struct ssd_config sc;
	char err[512] = "";
	int r;

	r = ssd_config_from_kvs(d->cfg, &sc, &paths, err, sizeof(err));
	if (r < 0)
		return tier_error(r, err, "bad [ssd] section");
	if (sc.nr_paths == 0)
		return 0; /* no [ssd]: DRAM only, as without the tier */
	for (unsigned i = 0; i < d->pool->nr_regions; i++)
		bufs[i] = (struct ssd_buf){ d->pool->regions[i].base, d->pool->regions[i].size };
	sc.bufs = bufs;
	sc.nr_bufs = d->pool->nr_regions;
	sc.cb_arg = d->store;
	sc.thread_init = drive_thread_init;
	sc.thread_fini = drive_thread_fini;
	sc.write_done = store_ssd_write_done;
	sc.read_done = store_ssd_read_done;
	sc.idle = store_ssd_idle;
	sc.log = on_ssd_log;
	r = ssd_open(&sc, &d->ssd, err, sizeof(err));
	ssd_conf_paths_free(&paths);
	if (r < 0)
		return tier_error(r, err, "cannot open the drives");
	/* Before any worker exists: nothing spills or reads before this. */
	store_set_ssd(d->store, d->ssd, d->cfg->ssd_write_ahead, tier_wake, d);
	log_info("ssd: %u drive%s, recovering the index while DRAM serves", sc.nr_paths,
		 sc.nr_paths == 1 ? "" : "s");
	return 0;
}

void tier_close(struct daemon *d)
{
	struct ssd_stats st;

	if (!d->ssd)
		return;
	ssd_get_stats(d->ssd, &st);
	log_info("ssd: closing %u drive%s: draining queued writes, syncing", st.nr_drives,
		 st.nr_drives == 1 ? "" : "s");
	ssd_close(d->ssd);
	d->ssd = NULL;
}
