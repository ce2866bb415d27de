/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <kvstash/abi.h>

#include "common/mem.h"
#include "base/conf.h"
#include "base/level.h"
#include "common/bits.h"

enum key_type {
	T_STR,
	T_U32,
	T_SIZE,
	T_BOOL,
	T_MS,
	T_MODE,
	T_UIDS,
	T_GIDS,
	T_LEVEL,
	T_TARGET,
	T_NUMA,
	T_ENUM, /* one of names[], stored as its index (an int) */
};

struct key {
	struct config_key_info info;
	enum key_type type;
	size_t off;
	const char *def;
	uint64_t min, max; /* numeric bounds, inclusive; 0/0: none */
	const char *const *names; /* T_ENUM: the values by number, NULL-terminated */
};

/* Parsed here once, so the daemon compares numbers, never strings, where it acts on them. */
static const char *const cuda_enable_names[] = {
	[CUDA_ENABLE_AUTO] = "auto", [CUDA_ENABLE_YES] = "yes", [CUDA_ENABLE_NO] = "no", NULL
};
static const char *const cuda_mover_names[] = {
	[CUDA_MOVER_AUTO] = "auto",	[CUDA_MOVER_DMA] = "dma", [CUDA_MOVER_KERNEL] = "kernel",
	[CUDA_MOVER_BATCH] = "batch", NULL
};
static const char *const cuda_frag_loads_names[] = {
	[CUDA_FRAG_KERNEL] = "kernel", [CUDA_FRAG_BATCH] = "batch", NULL
};
static const char *const peer_transport_names[] = {
	[PEER_TRANSPORT_TCP] = "tcp", [PEER_TRANSPORT_UCX] = "ucx", NULL
};
static const char *const ssd_write_policy_names[] = {
	[SSD_WRITE_SPILL] = "spill", [SSD_WRITE_FILTER] = "filter", NULL
};
_Static_assert(sizeof(enum cuda_enable) == sizeof(int) && sizeof(enum cuda_mover) == sizeof(int) &&
		       sizeof(enum cuda_frag_loads) == sizeof(int) &&
		       sizeof(enum ssd_write_policy) == sizeof(int) &&
		       sizeof(enum peer_transport) == sizeof(int),
	       "T_ENUM fields are stored as int");

#define O(f) offsetof(struct kvs_config, f)
#define KEY(s, k, t, f, d, lo, hi, h) { { s, k, h }, t, O(f), d, lo, hi, NULL }
#define KEY_ENUM(s, k, f, d, names, h) { { s, k, h }, T_ENUM, O(f), d, 0, 0, names }

static const struct key keys[] = {
	KEY("server", "socket", T_STR, socket_path, "/run/kvstash/kvstash.sock", 0, 0,
	    "path of the Unix socket engines connect to"),
	KEY("server", "socket_group", T_STR, socket_group, "", 0, 0,
	    "group owning the socket and its directory (empty: the daemon's group)"),
	KEY("server", "socket_mode", T_MODE, socket_mode, "0660", 0, 0777,
	    "file mode of the socket"),
	KEY("server", "dir_mode", T_MODE, dir_mode, "0750", 0, 07777,
	    "mode of the socket's directory when kvstashd creates it"),
	KEY("server", "allow_uids", T_UIDS, allow_uids, "", 0, 0,
	    "users (names or ids) allowed to connect; with allow_gids empty too: anyone who can open the socket"),
	KEY("server", "allow_gids", T_GIDS, allow_gids, "", 0, 0,
	    "groups (names or ids) whose members may connect"),
	KEY("server", "max_sessions", T_U32, max_sessions, "256", 1, 65536,
	    "sessions at once, all users together"),
	KEY("server", "max_sessions_per_uid", T_U32, max_sessions_per_uid, "128", 1, 65536,
	    "sessions at once of one user"),
	KEY("server", "max_mapped_bytes_per_uid", T_SIZE, max_mapped_bytes_per_uid, "0", 0,
	    1ull << 56,
	    "host engine memory mapped for one user's sessions together (0: half the host's RAM)"),
	KEY("server", "max_handshakes", T_U32, max_handshakes, "64", 1, 65536,
	    "connections at once that have not said HELLO; when full, a new one closes the oldest of the user holding most"),
	KEY("server", "max_handshakes_per_uid", T_U32, max_handshakes_per_uid, "16", 1, 65536,
	    "connections at once of one user that have not said HELLO; beyond it, its oldest is closed"),
	KEY("server", "max_admin_sessions", T_U32, max_admin_sessions, "32", 1, 65536,
	    "admin sessions (kvstash CLI) at once; when full, a new one closes the most idle of the user holding most"),
	KEY("server", "max_admin_sessions_per_uid", T_U32, max_admin_sessions_per_uid, "8", 1,
	    65536, "admin sessions at once of one user; beyond it, its most idle is closed"),
	KEY("server", "admin_idle_timeout", T_MS, admin_idle_timeout_ms, "60s", 100, 86400000,
	    "an admin session that neither asks nor reads for this long is closed"),
	KEY("server", "max_fds_per_uid", T_U32, max_fds_per_uid, "0", 0, 1u << 30,
	    "file descriptors the sessions of one user may make kvstashd hold (0: half of its RLIMIT_NOFILE)"),

	KEY("session", "sq_entries", T_U32, sq_entries, "256", 2, 1u << 16,
	    "default submission-queue entries (power of two; the CQ has twice as many)"),
	KEY("session", "sq_entries_max", T_U32, sq_entries_max, "4096", 2, 1u << 16,
	    "most SQ entries a client may ask for"),
	KEY("session", "arg_bytes", T_SIZE, arg_bytes, "4M", 4096, 1ull << 30,
	    "default argument-area size"),
	KEY("session", "arg_bytes_max", T_SIZE, arg_bytes_max, "64M", 4096, 1ull << 30,
	    "largest argument area a client may ask for"),
	KEY("session", "max_keys", T_U32, max_keys, "65536", 1, 1u << 20,
	    "keys or block ids in one operation"),
	KEY("session", "max_inflight", T_U32, max_inflight, "1024", 1, 1u << 17,
	    "operations taken from a session's SQ and not yet completed (capped by its CQ)"),
	KEY("session", "max_layers", T_U32, max_layers, "256", 1, 512,
	    "layers in one registration"),
	KEY("session", "max_namespaces", T_U32, max_namespaces, "1024", 1, 1u << 20,
	    "namespaces alive at once"),
	KEY("session", "max_mapped_bytes", T_SIZE, max_mapped_bytes, "0", 0, 1ull << 56,
	    "host engine memory one session may have mapped (0: a quarter of the host's RAM)"),

	KEY("pool", "size", T_SIZE, pool_size, "1G", 1ull << 20, 1ull << 50,
	    "host pool bytes, split over the NUMA nodes that serve devices"),
	KEY("pool", "hugepages", T_BOOL, hugepages, "no", 0, 0,
	    "back the pool with 2 MiB hugetlb pages (else transparent hugepages are advised)"),
	KEY("pool", "numa", T_NUMA, numa, "auto", 0, 0,
	    "auto, off, or a comma-separated list of nodes to place pool regions on"),
	KEY("pool", "prefault_threads", T_U32, prefault_threads, "0", 0, 1024,
	    "threads touching the pool at start-up per node (0: automatic)"),
	KEY("pool", "extent_size", T_SIZE, extent_size, "0", 0, 1ull << 34,
	    "allocation extent, the largest block a slot can hold (0: automatic)"),
	KEY("pool", "partial_timeout", T_MS, partial_timeout_ms, "60s", 10, 86400000,
	    "reclaim a block whose shards are not all saved after this long"),
	KEY("pool", "unsealed_share", T_U32, unsealed_share, "50", 1, 100,
	    "percent of a pool region (NUMA node) one instance may hold in blocks not yet sealed (copies in flight, shards waiting for other ranks); a SAVE past it stores what fits and completes with -EDQUOT; 100: no bound but the pool"),

	KEY("lease", "ttl", T_MS, lease_ttl_ms, "600s", 10, 86400000,
	    "a lease not consumed or released within this time expires"),
	KEY("lease", "max_leases", T_U32, max_leases, "4096", 1, 1u << 20,
	    "live leases per instance"),
	KEY("lease", "memory_per_instance", T_SIZE, lease_memory_per_instance, "64M", 4096,
	    1ull << 40,
	    "memory the live leases of one instance may take (about 8 bytes per leased block); a QUERY past it is -EDQUOT"),
	KEY("lease", "memory_per_uid", T_SIZE, lease_memory_per_uid, "256M", 4096, 1ull << 40,
	    "memory the live leases of one user's sessions may take, all its instances together"),
	KEY("lease", "memory", T_SIZE, lease_memory, "512M", 4096, 1ull << 40,
	    "memory all live leases together may take"),

	KEY("worker", "spin_us", T_U32, spin_us, "50", 0, 1000000,
	    "busy-poll this long after the last work before sleeping"),
	KEY("worker", "doze_us", T_U32, doze_us, "20", 0, 1000000,
	    "after the spin, sleep in naps this long (0: until woken)"),
	KEY("worker", "doze_ms", T_U32, doze_ms, "20", 1, 3600000,
	    "nap for this long after the last work, then sleep until woken"),
	KEY("worker", "save_wait_ms", T_U32, save_wait_ms, "10000", 1, 3600000,
	    "how long a SAVE AFTER waits for its fence value before it fails"),
	KEY("worker", "query_threads", T_U32, query_threads, "0", 0, 16,
	    "threads a QUERY of 4096 keys or more looks up with (0: automatic)"),
	KEY("worker", "copy_threads", T_U32, copy_threads, "0", 0, 256,
	    "host copy threads (0: automatic)"),
	KEY("worker", "inline_copy_bytes", T_SIZE, inline_copy_bytes, "256K", 0, 1ull << 30,
	    "batches up to this size are copied by the I/O worker itself"),

	KEY_ENUM("cuda", "enable", cuda_enable, "auto", cuda_enable_names,
		 "auto: use the GPUs found; yes: refuse to start without one; no: host backend only"),
	KEY_ENUM("cuda", "mover", cuda_mover, "auto", cuda_mover_names,
		 "auto: batched DMA, but fragmented loads as fragmented_loads says; or dma (one copy per piece), batch, kernel"),
	KEY("cuda", "kernel_below", T_SIZE, cuda_kernel_below, "256K", 0, 1ull << 30,
	    "with mover = auto, loads whose average piece is smaller are fragmented"),
	KEY_ENUM("cuda", "fragmented_loads", cuda_frag_loads, "kernel", cuda_frag_loads_names,
		 "with mover = auto, fragmented loads use the gather kernel (fastest; shares the GPU's SMs with the engine) or batch (copy engines only)"),
	KEY("cuda", "kernel_ctas", T_U32, cuda_kernel_ctas, "0", 0, 65535,
	    "thread blocks of the gather kernel (0: 4 per SM)"),
	KEY("cuda", "batch_streams", T_U32, cuda_batch_streams, "4", 1, 16,
	    "copy streams per direction that share a batched copy of small pieces"),

	KEY("cluster", "redis", T_STR, cluster_redis, "", 0, 0,
	    "Redis holding the cluster block registry: host:port, [v6]:port or unix:/path; empty: no cluster"),
	KEY("cluster", "sentinels", T_STR, cluster_sentinels, "", 0, 0,
	    "instead of redis: host:port,... of Redis Sentinels, which name the master (and follow its failovers)"),
	KEY("cluster", "master_name", T_STR, cluster_master_name, "", 0, 0,
	    "with sentinels: the name they monitor the master by"),
	KEY("cluster", "sentinel_user", T_STR, cluster_sentinel_user, "", 0, 0,
	    "with sentinels: the ACL user to AUTH to them as (empty: the default user)"),
	KEY("cluster", "sentinel_password_file", T_STR, cluster_sentinel_password_file, "", 0, 0,
	    "with sentinels: the file holding their AUTH password, as password_file (empty: no AUTH)"),
	KEY("cluster", "sentinel_check", T_MS, cluster_sentinel_check_ms, "1s", 100, 60000,
	    "with sentinels: ask every one of them for the master this often, besides following their announcements"),
	KEY("cluster", "user", T_STR, cluster_user, "", 0, 0,
	    "Redis ACL user to AUTH as (empty: the default user)"),
	KEY("cluster", "password_file", T_STR, cluster_password_file, "", 0, 0,
	    "file holding the Redis AUTH password, owned by kvstashd's user, mode 0600 or stricter (empty: no AUTH)"),
	KEY("cluster", "name", T_STR, cluster_name, "kvstash", 0, 0,
	    "cluster name: nodes of one name see each other's blocks"),
	KEY("cluster", "node", T_STR, cluster_node, "", 0, 0,
	    "this node's name, unique in the cluster (empty: the host name)"),
	KEY("cluster", "peer_address", T_STR, cluster_peer_address, "", 0, 0,
	    "HOST:PORT where peers reach this node for block transfers"),
	KEY("cluster", "lease_ttl", T_MS, cluster_lease_ttl_ms, "10s", 1000, 600000,
	    "node lease: renewed every third of it; a dead node's blocks stop being answered within it"),
	KEY("cluster", "connect_timeout", T_MS, cluster_connect_timeout_ms, "1s", 10, 200000,
	    "a connection to Redis not up within this is retried (at most a third of lease_ttl)"),
	KEY("cluster", "command_timeout", T_MS, cluster_command_timeout_ms, "2s", 10, 200000,
	    "no reply within this: the connection is dropped and made again (at most a third of lease_ttl)"),
	KEY("cluster", "flush_timeout", T_MS, cluster_flush_timeout_ms, "5s", 10, 600000,
	    "a cluster FLUSH completes by then, counting what was not delivered as dropped"),
	KEY("cluster", "query_timeout", T_MS, cluster_query_timeout_ms, "100ms", 1, 60000,
	    "a cluster QUERY answers by then with what the registry said so far"),
	KEY("cluster", "queue_entries", T_U32, cluster_queue_entries, "65536", 64, 1u << 24,
	    "registrations waiting for Redis (power of two); beyond, they are dropped and counted"),
	KEY("cluster", "entry_ttl", T_MS, cluster_entry_ttl_ms, "6h", 60000, 86400000,
	    "block entries expire unless refreshed (a live node refreshes its own every half of it)"),
	KEY("cluster", "peer_listen", T_STR, peer_listen, "", 0, 0,
	    "ADDR:PORT of the cluster interface where the peer service listens (empty: none; no wildcard)"),
	KEY("cluster", "peer_allow", T_STR, peer_allow, "", 0, 0,
	    "peers allowed to connect: CIDR[,CIDR...] (required with peer_listen)"),
	KEY("cluster", "secret_file", T_STR, peer_secret_file, "/etc/kvstash/cluster.key", 0, 0,
	    "the cluster secret peers prove to each other: 32-4096 bytes, kvstashd's user, mode 0600 or 0400"),
	KEY_ENUM("cluster", "peer_transport", peer_transport, "tcp", peer_transport_names,
		 "tcp: the serving node sends locked blocks itself; ucx: RDMA READ over verbs (a fabric of the cluster's own)"),
	KEY("cluster", "ucx_devices", T_STR, peer_ucx_devices, "", 0, 0,
	    "with peer_transport = ucx: UCX_NET_DEVICES (empty: UCX's choice)"),
	KEY("cluster", "ucx_allow_tcp", T_BOOL, peer_ucx_allow_tcp, "no", 0, 0,
	    "with peer_transport = ucx: let UCX run over TCP (tests only: UCX over TCP lets any host that reaches it read and write this process)"),
	KEY("cluster", "lock_ttl", T_MS, peer_lock_ttl_ms, "10s", 10, 600000,
	    "longest a peer's lock pins blocks here (ends sooner at its release or disconnect)"),
	KEY("cluster", "peer_io_timeout", T_MS, peer_io_timeout_ms, "5s", 10, 600000,
	    "a peer message or send stalled this long ends its connection"),
	KEY("cluster", "peer_max_conns", T_U32, peer_max_conns, "256", 1, 65536,
	    "peer connections served at once"),
	KEY("cluster", "peer_max_conns_per_peer", T_U32, peer_max_conns_per_peer, "16", 1, 65536,
	    "peer connections served per peer host (its address, whatever the port)"),
	KEY("cluster", "peer_max_locks_per_peer", T_U32, peer_max_locks_per_peer, "64", 1, 65536,
	    "locks held per peer host, over all its connections"),
	KEY("cluster", "peer_max_unauth", T_U32, peer_max_unauth, "0", 0, 65536,
	    "peer connections not authenticated yet, all hosts together (0: a quarter of peer_max_conns)"),
	KEY("cluster", "peer_max_unauth_per_peer", T_U32, peer_max_unauth_per_peer, "4", 1, 1024,
	    "peer connections not authenticated yet per peer host"),
	KEY("cluster", "peer_handshake_timeout", T_MS, peer_handshake_timeout_ms, "5s", 10, 600000,
	    "a peer connection not authenticated within this is closed"),
	KEY("cluster", "fetch_timeout", T_MS, peer_fetch_timeout_ms, "2s", 1, 600000,
	    "a QUERY with fetch answers by then with the blocks that came"),
	KEY("cluster", "fetch_max_keys", T_U32, peer_fetch_max_keys, "4096", 1, 4096,
	    "blocks one fetch asks a peer for at most"),
	KEY("ssd", "path", T_STR, ssd_path, "", 0, 0,
	    "files or block devices of the SSD tier, separated by commas (empty: no SSD tier)"),
	KEY("ssd", "size", T_SIZE, ssd_size, "0", 0, 1ull << 50,
	    "bytes of each file, preallocated at start-up (block devices: 0 = the whole device)"),
	KEY("ssd", "region_size", T_SIZE, ssd_region_size, "256M", 16384, 1ull << 40,
	    "log region, written and reused whole (a multiple of 4 KiB; a block must fit one)"),
	KEY("ssd", "queue_depth", T_U32, ssd_queue_depth, "32", 1, 4096,
	    "block reads and writes in flight per drive"),
	KEY("ssd", "write_queue", T_U32, ssd_write_queue, "0", 0, 65536,
	    "evicted blocks waiting per drive before the least used are not written (0: 4 x queue_depth)"),
	KEY_ENUM("ssd", "write_policy", ssd_write_policy, "spill", ssd_write_policy_names,
		 "spill: write every block evicted from DRAM; filter: only blocks used or evicted before"),
	KEY("ssd", "write_rate", T_SIZE, ssd_write_rate, "0", 0, 1ull << 40,
	    "most bytes per second written to each drive (0: no cap)"),
	KEY("ssd", "write_ahead", T_BOOL, ssd_write_ahead, "yes", 0, 0,
	    "while the drives are idle, write the coldest blocks still in DRAM, so evicting them costs no write"),

	KEY("metrics", "listen", T_STR, metrics_listen, "", 0, 0,
	    "HOST:PORT of the Prometheus endpoint (/metrics, /health); empty: off"),

	KEY("log", "level", T_LEVEL, log_level, "info", 0, 0,
	    "error, warning, notice, info or debug"),
	KEY("log", "target", T_TARGET, log_target, "stderr", 0, 0, "stderr, syslog or file"),
	KEY("log", "file", T_STR, log_file, "", 0, 0, "log file for target = file (reopened on SIGHUP)"),
	KEY("log", "ratelimit_interval", T_MS, log_ratelimit_interval_ms, "10s", 10, 86400000,
	    "window of the per-session and per-user log rate limit"),
	KEY("log", "ratelimit_burst", T_U32, log_ratelimit_burst, "10", 0, 1u << 20,
	    "lines one session (or one user's connections) may log per window; the rest are counted (0: no limit)"),
};

const struct config_key_info *config_key_at(unsigned i)
{
	return i < sizeof(keys) / sizeof(keys[0]) ? &keys[i].info : NULL;
}

/*
 * The number at the start of @s: decimal, or hex after "0x".  Not
 * strtoull()'s base 0, which reads a leading zero as octal: "010G" would
 * be 8 GiB and "08G" garbage.  -ERANGE past 64 bits, with *@end set so
 * that the caller can still refuse garbage after the digits first.
 */
static int parse_number(const char *s, unsigned long long *ret, char **end)
{
	if (!s || !*s || *s == '-' || isspace((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	*ret = strtoull(s, end, s[0] == '0' && (s[1] == 'x' || s[1] == 'X') ? 16 : 10);
	if (*end == s)
		return -EINVAL;
	if (errno)
		return errno == ERANGE ? -ERANGE : -EINVAL;
	return 0;
}

int parse_size(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;
	int r;

	r = parse_number(s, &v, &end);
	if (r == -EINVAL)
		return r;
	switch (toupper((unsigned char)*end)) {
	case '\0':
		break;
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (*end) {
		end++;
		if (*end == 'i')
			end++;
		if (toupper((unsigned char)*end) == 'B')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (r < 0)
		return r;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*ret = (uint64_t)v << shift;
	return 0;
}

int parse_duration_ms(const char *s, uint32_t *ret)
{
	char *end;
	unsigned long long v, mul = 1000; /* a bare number means seconds */
	bool range;

	if (!s || !*s || *s == '-' || isspace((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || (errno && errno != ERANGE))
		return -EINVAL;
	range = errno == ERANGE;
	if (strcmp(end, "ms") == 0)
		mul = 1;
	else if (strcmp(end, "s") == 0 || *end == '\0')
		mul = 1000;
	else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
		mul = 60000;
	else if (strcmp(end, "h") == 0)
		mul = 3600000;
	else
		return -EINVAL;
	if (range || v > UINT32_MAX / mul)
		return -ERANGE;
	*ret = (uint32_t)(v * mul);
	return 0;
}

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;
	int r = parse_number(s, &v, &end);

	if (r == -EINVAL || *end)
		return -EINVAL;
	if (r < 0)
		return r;
	*ret = v;
	return 0;
}

static int parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };

	for (unsigned i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*ret = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int lookup_id(const char *name, bool group, uint32_t *ret)
{
	uint64_t v;

	if (parse_u64(name, &v) == 0) {
		if (v >= UINT32_MAX)
			return -ERANGE;
		*ret = (uint32_t)v;
		return 0;
	}
	if (group) {
		struct group *g = getgrnam(name);

		if (!g)
			return -ENOENT;
		*ret = g->gr_gid;
	} else {
		struct passwd *p = getpwnam(name);

		if (!p)
			return -ENOENT;
		*ret = p->pw_uid;
	}
	return 0;
}

static int parse_ids(const char *s, bool group, struct id_list *ret, char *why, size_t wl)
{
	struct id_list l = { 0 };
	char *dup = strdup(s), *save = NULL, *tok;
	int r = 0;

	if (!dup)
		return -ENOMEM;
	for (tok = strtok_r(dup, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		if (l.n == CONFIG_MAX_IDS) {
			snprintf(why, wl, "more than %u entries", CONFIG_MAX_IDS);
			r = -E2BIG;
			break;
		}
		r = lookup_id(tok, group, &l.ids[l.n]);
		if (r < 0) {
			snprintf(why, wl, "unknown %s '%s'", group ? "group" : "user", tok);
			break;
		}
		l.n++;
	}
	free(dup);
	if (r == 0)
		*ret = l;
	return r;
}

static int check_numa(const char *s)
{
	bool digits = false;

	if (strcmp(s, "auto") == 0 || strcmp(s, "off") == 0)
		return 0;
	/*
	 * Numbers separated by single commas: the daemon's node parser stops
	 * at an empty element ("0,,1" would silently be node 0 alone).
	 */
	for (const char *p = s; *p; p++) {
		if (isdigit((unsigned char)*p))
			digits = true;
		else if (*p == ',' && digits)
			digits = false;
		else
			return -EINVAL;
	}
	return digits ? 0 : -EINVAL;
}

static const struct key *find_key(const char *section, const char *key)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strcmp(keys[i].info.section, section) == 0 &&
		    strcmp(keys[i].info.key, key) == 0)
			return &keys[i];
	return NULL;
}

static bool known_section(const char *section)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strcmp(keys[i].info.section, section) == 0)
			return true;
	return false;
}

static int set_string(char **field, const char *value)
{
	char *d = strdup(value);

	if (!d)
		return -ENOMEM;
	free(*field);
	*field = d;
	return 0;
}

/* A T_U32 or T_SIZE value into @f, within the key's [min, max] when it has one. */
static int apply_number(const struct key *k, const char *value, void *f, char *why, size_t wl)
{
	uint64_t v = 0;
	int r = k->type == T_U32 ? parse_u64(value, &v) : parse_size(value, &v);

	if (r == -ERANGE) {
		snprintf(why, wl, "%s is too large", value);
		return -ERANGE;
	}
	if (r < 0) {
		snprintf(why, wl, "'%s' is not a %s", value,
			 k->type == T_U32 ? "number" : "size (e.g. 512M, 4G)");
		return -EINVAL;
	}
	if ((k->min || k->max) && (v < k->min || v > k->max)) {
		snprintf(why, wl, "%s is outside [%" PRIu64 ", %" PRIu64 "]", value, k->min, k->max);
		return -ERANGE;
	}
	if (k->type == T_U32)
		*(uint32_t *)f = (uint32_t)v;
	else
		*(uint64_t *)f = v;
	return 0;
}

/* A T_MS duration into @f, in milliseconds within the key's [min, max]. */
static int apply_ms(const struct key *k, const char *value, void *f, char *why, size_t wl)
{
	uint32_t ms;

	if (parse_duration_ms(value, &ms) < 0) {
		snprintf(why, wl, "'%s' is not a duration (e.g. 600s, 250ms, 10m)", value);
		return -EINVAL;
	}
	if (ms < k->min || ms > k->max) {
		snprintf(why, wl, "%s is outside [%" PRIu64 "ms, %" PRIu64 "ms]", value, k->min,
			 k->max);
		return -ERANGE;
	}
	*(uint32_t *)f = ms;
	return 0;
}

/* A T_MODE octal file mode into @f, at most the key's max. */
static int apply_mode(const struct key *k, const char *value, void *f, char *why, size_t wl)
{
	char *end;
	unsigned long m;

	errno = 0;
	m = strtoul(value, &end, 8);
	if (errno || end == value || *end || m > k->max) {
		snprintf(why, wl, "'%s' is not an octal mode <= %04" PRIo64, value, k->max);
		return -EINVAL;
	}
	*(uint32_t *)f = (uint32_t)m;
	return 0;
}

/* A T_ENUM name into @f as its index in the key's names; else the names in @why. */
static int apply_enum(const struct key *k, const char *value, void *f, char *why, size_t wl)
{
	int len = snprintf(why, wl, "'%s' is not ", value);

	for (int i = 0; k->names[i]; i++) {
		if (strcmp(value, k->names[i]) == 0) {
			*(int *)f = i;
			return 0;
		}
	}
	/* "'x' is not auto, dma or kernel" */
	for (int i = 0; k->names[i] && len >= 0 && (size_t)len < wl; i++)
		len += snprintf(why + len, wl - (size_t)len, "%s%s",
				i == 0		  ? ""
				: k->names[i + 1] ? ", "
						  : " or ",
				k->names[i]);
	return -EINVAL;
}

/* Apply one value; on error a reason (without the key) goes into @why. */
static int apply(struct kvs_config *cfg, const struct key *k, const char *value, char *why,
		 size_t wl)
{
	void *f = (char *)cfg + k->off;
	bool b;
	int r;

	switch (k->type) {
	case T_STR:
		return set_string(f, value);
	case T_U32:
	case T_SIZE:
		return apply_number(k, value, f, why, wl);
	case T_BOOL:
		if (parse_bool(value, &b) < 0) {
			snprintf(why, wl, "'%s' is not yes or no", value);
			return -EINVAL;
		}
		*(bool *)f = b;
		return 0;
	case T_MS:
		return apply_ms(k, value, f, why, wl);
	case T_MODE:
		return apply_mode(k, value, f, why, wl);
	case T_UIDS:
	case T_GIDS:
		return parse_ids(value, k->type == T_GIDS, f, why, wl);
	case T_LEVEL:
		r = level_from_name(value);
		if (r < 0) {
			snprintf(why, wl, "'%s' is not error, warning, notice, info or debug", value);
			return -EINVAL;
		}
		*(int *)f = r;
		return 0;
	case T_TARGET:
		if (strcmp(value, "stderr") && strcmp(value, "syslog") && strcmp(value, "file")) {
			snprintf(why, wl, "'%s' is not stderr, syslog or file", value);
			return -EINVAL;
		}
		return set_string(f, value);
	case T_ENUM:
		return apply_enum(k, value, f, why, wl);
	case T_NUMA:
		if (check_numa(value) < 0) {
			snprintf(why, wl, "'%s' is not auto, off or a node list like 0,1", value);
			return -EINVAL;
		}
		return set_string(f, value);
	}
	return -EINVAL;
}

int config_set(struct kvs_config *cfg, const char *section, const char *key, const char *value,
	       char *err, size_t errlen)
{
	const struct key *k = find_key(section, key);
	char why[256] = "";
	int r;

	if (!k) {
		snprintf(err, errlen, "[%s] %s: unknown %s", section, key,
			 known_section(section) ? "key" : "section");
		return -EINVAL;
	}
	r = apply(cfg, k, value, why, sizeof(why));
	if (r < 0) {
		snprintf(err, errlen, "[%s] %s: %s", section, key, why[0] ? why : strerror(-r));
		return r == -ENOMEM ? r : -EINVAL;
	}
	return 0;
}

int config_set_assignment(struct kvs_config *cfg, const char *assign, char *err, size_t errlen)
{
	const char *dot = strchr(assign, '.'), *eq = strchr(assign, '=');
	char section[64], key[64];

	if (!dot || !eq || dot > eq || dot == assign || eq == dot + 1 ||
	    (size_t)(dot - assign) >= sizeof(section) || (size_t)(eq - dot - 1) >= sizeof(key)) {
		snprintf(err, errlen, "'%s': expected section.key=value", assign);
		return -EINVAL;
	}
	memcpy(section, assign, dot - assign);
	section[dot - assign] = '\0';
	memcpy(key, dot + 1, eq - dot - 1);
	key[eq - dot - 1] = '\0';
	return config_set(cfg, section, key, eq + 1, err, errlen);
}

int config_init(struct kvs_config *cfg)
{
	char err[256];

	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		int r = config_set(cfg, keys[i].info.section, keys[i].info.key, keys[i].def, err,
				   sizeof(err));
		if (r < 0) {
			config_free(cfg);
			return r;
		}
	}
	return 0;
}

void config_free(struct kvs_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		enum key_type t = keys[i].type;

		if (t == T_STR || t == T_TARGET || t == T_NUMA) {
			char **p = (char **)((char *)cfg + keys[i].off);

			*p = mfree(*p);
		}
	}
}

struct load_ctx {
	struct kvs_config *cfg;
	const char *path;
	char *err;
	size_t errlen;
	int failed;
	FILE *f;
	int line;     /* lines read so far, counted as inih counts them */
	int err_line; /* where our handler failed */
};

/*
 * inih's reader, counting lines: inih reports only the first error's
 * line, which may be a syntax error before the line our handler refused.
 */
static char *config_read_line(char *str, int num, void *stream)
{
	struct load_ctx *ctx = stream;
	char *s = fgets(str, num, ctx->f);

	if (s)
		ctx->line++;
	return s;
}

static int config_ini_handler(void *user, const char *section, const char *name, const char *value)
{
	struct load_ctx *ctx = user;
	char msg[384];

	if (ctx->failed)
		return 0;
	if (!name) {
		/* A section header seen on its own (INI_CALL_HANDLER_ON_NEW_SECTION). */
		if (known_section(section))
			return 1;
		ctx->failed = 1;
		ctx->err_line = ctx->line;
		snprintf(ctx->err, ctx->errlen, "[%s]: unknown section", section);
		return 0;
	}
	if (config_set(ctx->cfg, section, name, value, msg, sizeof(msg)) < 0) {
		ctx->failed = 1;
		ctx->err_line = ctx->line;
		snprintf(ctx->err, ctx->errlen, "%s", msg);
		return 0;
	}
	return 1;
}

int config_load(struct kvs_config *cfg, const char *path, bool must_exist, char *err,
		size_t errlen)
{
	struct load_ctx ctx = { .cfg = cfg, .path = path };
	char msg[384] = "";
	FILE *f;
	int r;

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		if (r == -ENOENT && !must_exist)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	ctx.err = msg;
	ctx.errlen = sizeof(msg);
	ctx.f = f;
	r = ini_parse_stream(config_read_line, &ctx, config_ini_handler, &ctx);
	fclose(f);
	if (r > 0) {
		/* inih returns the line of the first error: ours, or a syntax error before it. */
		snprintf(err, errlen, "%s:%d: %s", path, r,
			 ctx.failed && ctx.err_line == r ? msg : "syntax error");
		return -EINVAL;
	}
	if (r < 0) {
		snprintf(err, errlen, "%s: cannot parse (%d)", path, r);
		return -EINVAL;
	}
	return 0;
}

int config_validate(const struct kvs_config *cfg, char *err, size_t errlen)
{
	if (!is_pow2(cfg->sq_entries) || !is_pow2(cfg->sq_entries_max)) {
		snprintf(err, errlen, "[session] sq_entries and sq_entries_max must be powers of two");
		return -EINVAL;
	}
	if (cfg->sq_entries > cfg->sq_entries_max) {
		snprintf(err, errlen, "[session] sq_entries %u exceeds sq_entries_max %u",
			 cfg->sq_entries, cfg->sq_entries_max);
		return -EINVAL;
	}
	if (cfg->arg_bytes > cfg->arg_bytes_max) {
		snprintf(err, errlen, "[session] arg_bytes exceeds arg_bytes_max");
		return -EINVAL;
	}
	if ((uint64_t)cfg->max_keys * KVS_SAVE_ARG_SIZE > cfg->arg_bytes_max) {
		snprintf(err, errlen,
			 "[session] max_keys %u cannot fit in arg_bytes_max (%u bytes per saved key)",
			 cfg->max_keys, KVS_SAVE_ARG_SIZE);
		return -EINVAL;
	}
	if (strcmp(cfg->log_target, "file") == 0 && !cfg->log_file[0]) {
		snprintf(err, errlen, "[log] target = file needs [log] file");
		return -EINVAL;
	}
	if (cfg->ssd_region_size % 4096) {
		snprintf(err, errlen, "[ssd] region_size must be a multiple of 4 KiB");
		return -EINVAL;
	}
	if (cfg->socket_path[0] != '/') {
		snprintf(err, errlen, "[server] socket must be an absolute path");
		return -EINVAL;
	}
	if (strlen(cfg->socket_path) >= 108) {
		snprintf(err, errlen, "[server] socket path longer than 107 bytes");
		return -ENAMETOOLONG;
	}
	return 0;
}

static void print_ids(FILE *f, const struct id_list *l)
{
	for (unsigned i = 0; i < l->n; i++)
		fprintf(f, "%s%u", i ? "," : "", l->ids[i]);
}

void config_print(const struct kvs_config *cfg, FILE *f)
{
	const char *section = "";

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const struct key *k = &keys[i];
		const void *p = (const char *)cfg + k->off;

		if (strcmp(section, k->info.section)) {
			section = k->info.section;
			fprintf(f, "%s[%s]\n", i ? "\n" : "", section);
		}
		fprintf(f, "%s = ", k->info.key);
		switch (k->type) {
		case T_STR:
		case T_TARGET:
		case T_NUMA:
			fprintf(f, "%s", *(char *const *)p);
			break;
		case T_ENUM:
			fprintf(f, "%s", k->names[*(const int *)p]);
			break;
		case T_U32:
			fprintf(f, "%" PRIu32, *(const uint32_t *)p);
			break;
		case T_SIZE:
			fprintf(f, "%" PRIu64, *(const uint64_t *)p);
			break;
		case T_BOOL:
			fprintf(f, "%s", *(const bool *)p ? "yes" : "no");
			break;
		case T_MS:
			fprintf(f, "%" PRIu32 "ms", *(const uint32_t *)p);
			break;
		case T_MODE:
			fprintf(f, "%04" PRIo32, *(const uint32_t *)p);
			break;
		case T_UIDS:
		case T_GIDS:
			print_ids(f, p);
			break;
		case T_LEVEL:
			fprintf(f, "%s", level_name(*(const int *)p));
			break;
		}
		fprintf(f, "\n");
	}
}
