/* SPDX-License-Identifier: MIT */
/*
 * kvstashd configuration: an INI file (inih) plus command-line overrides
 * of every key.  One table (config.c) names each key, its type, default
 * and help; the parser, the overrides, --check-config and the man page
 * all follow it.
 */
#ifndef KVS_CONFIG_H
#define KVS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define CONFIG_MAX_IDS 64

struct id_list {
	unsigned n;
	uint32_t ids[CONFIG_MAX_IDS];
};

/* [cuda] enable */
enum cuda_enable {
	CUDA_ENABLE_AUTO, /* use the GPUs found */
	CUDA_ENABLE_YES,  /* refuse to start without one */
	CUDA_ENABLE_NO,	  /* host backend only */
};

/* [ssd] write_policy */
enum ssd_write_policy {
	SSD_WRITE_SPILL,  /* every block evicted from DRAM is written */
	SSD_WRITE_FILTER, /* only blocks used in DRAM or evicted before */
};

/* [cuda] mover */
enum cuda_mover {
	CUDA_MOVER_AUTO,   /* batch, or the kernel for fragmented loads: want_path() */
	CUDA_MOVER_DMA,	   /* one cudaMemcpyAsync per piece */
	CUDA_MOVER_KERNEL, /* the gather kernel */
	CUDA_MOVER_BATCH,  /* the copy engines, one cudaMemcpyBatchAsync per batch */
};

/* [cuda] fragmented_loads: how mover = auto moves loads of small pieces */
enum peer_transport {
	PEER_TRANSPORT_TCP, /* libkvspeer's own TCP stream of locked blocks */
	PEER_TRANSPORT_UCX, /* RDMA READ through UCX, verbs only */
};

enum cuda_frag_loads {
	CUDA_FRAG_KERNEL, /* the gather kernel: fastest, but time-slices with the engine's kernels */
	CUDA_FRAG_BATCH,  /* the copy engines: no SM of the engine's */
};

struct kvs_config {
	/* [server] */
	char *socket_path;
	char *socket_group;
	uint32_t socket_mode;
	uint32_t dir_mode;
	struct id_list allow_uids;
	struct id_list allow_gids;
	uint32_t max_sessions;
	uint32_t max_sessions_per_uid;
	uint64_t max_mapped_bytes_per_uid; /* host engine memory; 0: half the RAM */
	uint32_t max_handshakes;
	uint32_t max_handshakes_per_uid;
	uint32_t max_admin_sessions;
	uint32_t max_admin_sessions_per_uid;
	uint32_t admin_idle_timeout_ms;
	uint32_t max_fds_per_uid; /* 0: half of RLIMIT_NOFILE */

	/* [session] */
	uint32_t sq_entries;
	uint32_t sq_entries_max;
	uint64_t arg_bytes;
	uint64_t arg_bytes_max;
	uint32_t max_keys;
	uint32_t max_inflight;
	uint32_t max_layers;
	uint32_t max_namespaces;
	uint64_t max_mapped_bytes; /* host engine memory per session; 0: a quarter of the RAM */

	/* [pool] */
	uint64_t pool_size;
	bool hugepages;
	char *numa;		/* "auto", "off", or a node list "0,1" */
	uint32_t prefault_threads;
	uint64_t extent_size;	/* 0: automatic */
	uint32_t partial_timeout_ms;
	uint32_t unsealed_share; /* percent of the pool, per instance */

	/* [lease] */
	uint32_t lease_ttl_ms;
	uint32_t max_leases;	/* per instance */
	uint64_t lease_memory_per_instance;
	uint64_t lease_memory_per_uid;
	uint64_t lease_memory; /* all leases together */

	/* [worker] */
	uint32_t spin_us;
	uint32_t doze_us;
	uint32_t doze_ms;
	uint32_t query_threads;
	uint32_t save_wait_ms; /* a SAVE AFTER's fence value comes within this, or -ETIMEDOUT */
	uint32_t copy_threads;
	uint64_t inline_copy_bytes;

	/* [cuda] */
	enum cuda_enable cuda_enable;
	enum cuda_mover cuda_mover;
	enum cuda_frag_loads cuda_frag_loads;
	uint64_t cuda_kernel_below;
	uint32_t cuda_kernel_ctas;
	uint32_t cuda_batch_streams;

	/* [cluster] (sidecar/cluster/registry.h) */
	char *cluster_redis; /* empty: no cluster (unless sentinels) */
	char *cluster_sentinels; /* or the sentinels that name the master */
	char *cluster_master_name;
	char *cluster_sentinel_user;
	char *cluster_sentinel_password_file;
	uint32_t cluster_sentinel_check_ms;
	char *cluster_user;
	char *cluster_password_file;
	char *cluster_name;
	char *cluster_node; /* empty: the host name */
	char *cluster_peer_address;
	uint32_t cluster_lease_ttl_ms;
	uint32_t cluster_connect_timeout_ms;
	uint32_t cluster_command_timeout_ms;
	uint32_t cluster_flush_timeout_ms;
	uint32_t cluster_query_timeout_ms;
	uint32_t cluster_queue_entries;
	uint32_t cluster_entry_ttl_ms;
	/* [cluster] peer transfer (control/peer-host.c, libkvspeer) */
	char *peer_listen; /* empty: no peer service */
	char *peer_allow;
	char *peer_secret_file;
	enum peer_transport peer_transport;
	char *peer_ucx_devices;
	bool peer_ucx_allow_tcp;
	uint32_t peer_lock_ttl_ms;
	uint32_t peer_io_timeout_ms;
	uint32_t peer_max_conns;
	uint32_t peer_max_conns_per_peer;
	uint32_t peer_max_locks_per_peer;
	uint32_t peer_max_unauth; /* 0: libkvspeer's default */
	uint32_t peer_max_unauth_per_peer;
	uint32_t peer_handshake_timeout_ms;
	uint32_t peer_fetch_timeout_ms;
	uint32_t peer_fetch_max_keys;
	/* [ssd] (sidecar/ssd/ssd.h): no path, no SSD tier */
	char *ssd_path;		/* comma-separated files or block devices */
	uint64_t ssd_size;	/* bytes per file */
	uint64_t ssd_region_size;
	uint32_t ssd_queue_depth;
	uint32_t ssd_write_queue;
	enum ssd_write_policy ssd_write_policy;
	uint64_t ssd_write_rate; /* bytes per second per drive; 0: no cap */
	bool ssd_write_ahead;	 /* write cold resident blocks while the drives are idle */

	/* [metrics] */
	char *metrics_listen; /* HOST:PORT, empty: off */

	/* [log] */
	int log_level;
	char *log_target;	/* stderr, syslog, file */
	char *log_file;
	uint32_t log_ratelimit_interval_ms;
	uint32_t log_ratelimit_burst; /* 0: no limit */
};

/* Defaults into @cfg (strings allocated).  */
int config_init(struct kvs_config *cfg);
void config_free(struct kvs_config *cfg);

/*
 * Parse @path into @cfg.  Missing file: -ENOENT unless !@must_exist.
 * Errors (unknown section or key, bad value) are written into @err as
 * "FILE:LINE: [section] key: reason" and return -EINVAL.
 */
int config_load(struct kvs_config *cfg, const char *path, bool must_exist, char *err,
		size_t errlen);

/* "section.key=value" or section, key, value: one override. */
int config_set(struct kvs_config *cfg, const char *section, const char *key, const char *value,
	       char *err, size_t errlen);
int config_set_assignment(struct kvs_config *cfg, const char *assign, char *err, size_t errlen);

/* Cross-key checks after everything is set (e.g. sq_entries <= max). */
int config_validate(const struct kvs_config *cfg, char *err, size_t errlen);

/* Print the effective configuration as a loadable INI file. */
void config_print(const struct kvs_config *cfg, FILE *f);

/* Iterate keys for option generation: returns NULL past the end. */
struct config_key_info {
	const char *section;
	const char *key;
	const char *help;
};
const struct config_key_info *config_key_at(unsigned i);

/* Parsers shared with the CLI (sizes "4G", durations "600s"). */
int parse_size(const char *s, uint64_t *ret);
int parse_duration_ms(const char *s, uint32_t *ret);

#endif /* KVS_CONFIG_H */
