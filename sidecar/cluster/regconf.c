/* SPDX-License-Identifier: MIT */
/*
 * The registry's configuration checks and the AUTH secret file.  Built
 * with and without hiredis: --check-config says the same either way, and
 * without hiredis a configured cluster is refused with a clear reason.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/why.h"
#include "base/conf.h"
#include "cluster/regaddr.h"
#include "cluster/registry.h"
#include "cluster/sentinel.h"


int registry_read_secret(const char *path, char *buf, size_t len, char *why, size_t wl)
{
	struct stat st;
	ssize_t n;
	size_t got = 0;
	int fd, r = 0;

	if (!path || !buf || len < 2)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0) {
		r = -errno;
		WHY("%s: %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		WHY("%s: %s", path, strerror(-r));
	} else if (!S_ISREG(st.st_mode)) {
		WHY("%s: not a regular file", path);
		r = -EINVAL;
	} else if (st.st_uid != geteuid()) {
		WHY("%s: owned by uid %u, not by kvstashd's user (uid %u)", path,
		    (unsigned)st.st_uid, (unsigned)geteuid());
		r = -EPERM;
	} else if (st.st_mode & 077) {
		WHY("%s: mode %04o lets group or others read it (chmod 600)", path,
		    (unsigned)(st.st_mode & 07777));
		r = -EPERM;
	}
	while (!r && got < len) {
		n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			WHY("%s: %s", path, strerror(-r));
		} else if (n == 0) {
			break;
		} else {
			got += (size_t)n;
		}
	}
	close(fd);
	if (!r && got >= len) {
		WHY("%s: longer than %zu bytes", path, len - 1);
		r = -EINVAL;
	}
	if (!r) {
		if (got && buf[got - 1] == '\n')
			got--;
		if (!got) {
			WHY("%s: empty", path);
			r = -EINVAL;
		} else if (memchr(buf, '\0', got) || memchr(buf, '\n', got) ||
			   memchr(buf, '\r', got)) {
			WHY("%s: the secret holds a NUL, CR or newline", path);
			r = -EINVAL;
		}
	}
	if (r) {
		explicit_bzero(buf, len);
		return r;
	}
	buf[got] = '\0';
	explicit_bzero(buf + got + 1, len - got - 1);
	return 0;
}

static bool name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n >= REG_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

/* [cluster] sentinels, master_name and sentinel_user, instead of redis. */
static int check_sentinels(const struct registry_config *cfg, char *why, size_t wl)
{
	const char *p = cfg->sentinels;
	struct reg_addr a;
	char w[160];
	unsigned n = 0;

	if (cfg->redis && cfg->redis[0]) {
		WHY("[cluster] redis and sentinels: one or the other (the sentinels name the "
		    "master)");
		return -EINVAL;
	}
	if (!name_ok(cfg->master_name)) {
		WHY("[cluster] master_name: '%s' is not 1-%d characters of A-Z a-z 0-9 . _ - "
		    "(the name the sentinels monitor the master by)",
		    cfg->master_name ? cfg->master_name : "", REG_NAME_MAX - 1);
		return -EINVAL;
	}
	while (*p) {
		size_t l = strcspn(p, ", \t");
		char one[REG_ADDR_MAX];

		if (!l) {
			p++;
			continue;
		}
		if (l >= sizeof(one) || ++n > SENTINEL_MAX) {
			WHY("[cluster] sentinels: at most %u host:port, each below %zu bytes",
			    SENTINEL_MAX, sizeof(one));
			return -EINVAL;
		}
		memcpy(one, p, l);
		one[l] = '\0';
		a = (struct reg_addr){ 0 };
		if (reg_addr_parse(one, &a, w, sizeof(w)) < 0 || a.unix_path) {
			WHY("[cluster] sentinels: %s", a.unix_path ? "host:port, not a path" : w);
			return -EINVAL;
		}
		p += l;
	}
	if (!n) {
		WHY("[cluster] sentinels: none named (only separators)");
		return -EINVAL;
	}
	if (cfg->sentinel_user && (strlen(cfg->sentinel_user) >= REG_NAME_MAX ||
				   strpbrk(cfg->sentinel_user, " \t\r\n"))) {
		WHY("[cluster] sentinel_user: longer than %d bytes or holds blanks",
		    REG_NAME_MAX - 1);
		return -EINVAL;
	}
	return 0;
}

/* [cluster] name, node, peer_address, user: what goes into keys and commands. */
static int check_names(const struct registry_config *cfg, char *why, size_t wl)
{
	if (!name_ok(cfg->cluster)) {
		WHY("[cluster] name: '%s' is not 1-%d characters of A-Z a-z 0-9 . _ -",
		    cfg->cluster ? cfg->cluster : "", REG_NAME_MAX - 1);
		return -EINVAL;
	}
	if (!name_ok(cfg->node)) {
		WHY("[cluster] node: '%s' is not 1-%d characters of A-Z a-z 0-9 . _ -",
		    cfg->node ? cfg->node : "", REG_NAME_MAX - 1);
		return -EINVAL;
	}
	if (cfg->peer_addr &&
	    (strlen(cfg->peer_addr) >= REG_ADDR_MAX || strpbrk(cfg->peer_addr, " \t\r\n"))) {
		WHY("[cluster] peer_address: longer than %d bytes or holds blanks",
		    REG_ADDR_MAX - 1);
		return -EINVAL;
	}
	if (cfg->user && (strlen(cfg->user) >= REG_NAME_MAX || strpbrk(cfg->user, " \t\r\n"))) {
		WHY("[cluster] user: longer than %d bytes or holds blanks", REG_NAME_MAX - 1);
		return -EINVAL;
	}
	return 0;
}

/* The lease's TTL, the timeouts within it, the queue's size. */
static int check_limits(const struct registry_config *cfg, char *why, size_t wl)
{
	uint32_t third;

	if (cfg->lease_ttl_ms < 1000) {
		WHY("[cluster] lease_ttl: at least 1s");
		return -EINVAL;
	}
	third = cfg->lease_ttl_ms / 3;
	if (!cfg->command_timeout_ms || cfg->command_timeout_ms > third ||
	    !cfg->connect_timeout_ms || cfg->connect_timeout_ms > third) {
		WHY("[cluster] connect_timeout and command_timeout: non-zero and at most a third "
		    "of lease_ttl (%ums), so a renewal can fail and be retried before the lease expires",
		    third);
		return -EINVAL;
	}
	if (!cfg->flush_timeout_ms || !cfg->query_timeout_ms) {
		WHY("[cluster] flush_timeout and query_timeout must be non-zero");
		return -EINVAL;
	}
	if (cfg->queue_entries < 64 || (cfg->queue_entries & (cfg->queue_entries - 1))) {
		WHY("[cluster] queue_entries: a power of two, at least 64");
		return -EINVAL;
	}
	return 0;
}

int registry_config_check(const struct registry_config *cfg, char *why, size_t wl)
{
	bool sentinels = cfg && cfg->sentinels && cfg->sentinels[0];
	struct reg_addr a = { 0 };
	char w[160];
	int rc;

	if (!cfg || ((!cfg->redis || !cfg->redis[0]) && !sentinels)) {
		WHY("[cluster] redis: no address (nor sentinels)");
		return -EINVAL;
	}
#if !HAVE_HIREDIS
	WHY("[cluster] %s is set, but cluster support is not compiled in "
	    "(kvstashd was built without hiredis: apt-get install libhiredis-dev nettle-dev, "
	    "configure --with-hiredis)",
	    sentinels ? "sentinels" : "redis");
	return -EOPNOTSUPP;
#endif
	if (sentinels) {
		rc = check_sentinels(cfg, why, wl);
		if (rc < 0)
			return rc;
	} else if (reg_addr_parse(cfg->redis, &a, w, sizeof(w)) < 0) {
		WHY("[cluster] redis: %s", w);
		return -EINVAL;
	}
	rc = check_names(cfg, why, wl);
	if (rc < 0)
		return rc;
	return check_limits(cfg, why, wl);
}

int cluster_node_name(const struct kvs_config *c, char *host, size_t hostlen, const char **ret_name,
		      char *why, size_t wl)
{
	if (c->cluster_node && c->cluster_node[0]) {
		*ret_name = c->cluster_node;
		return 0;
	}
	if (gethostname(host, hostlen) < 0 || !host[0]) {
		WHY("[cluster] node: empty, and the host name is unknown");
		return -EINVAL;
	}
	host[hostlen - 1] = '\0';
	/* The short name: the first label of an FQDN. */
	host[strcspn(host, ".")] = '\0';
	*ret_name = host;
	return 0;
}

/* A password file's secret into @buf, the error naming @key. */
static int read_password(const char *key, const char *path, char *buf, size_t len, char *why,
			 size_t wl)
{
	char w[256];
	int rc = registry_read_secret(path, buf, len, w, sizeof(w));

	if (rc < 0)
		WHY("[cluster] %s: %s", key, w);
	return rc;
}

int registry_config_from(const struct kvs_config *c, struct registry_config *ret, char *host,
			 size_t hostlen, struct registry_secrets *secrets, char *why, size_t wl)
{
	struct registry_config r = { 0 };
	int rc;

	if ((!c->cluster_redis || !c->cluster_redis[0]) &&
	    (!c->cluster_sentinels || !c->cluster_sentinels[0]))
		return 0;
	r.redis = c->cluster_redis;
	r.sentinels = c->cluster_sentinels;
	r.master_name = c->cluster_master_name;
	r.sentinel_user = c->cluster_sentinel_user;
	r.sentinel_check_ms = c->cluster_sentinel_check_ms;
	r.user = c->cluster_user;
	r.cluster = c->cluster_name;
	rc = cluster_node_name(c, host, hostlen, &r.node, why, wl);
	if (rc < 0)
		return rc;
	/* Where peers fetch from: said outright, else where the peer service listens. */
	r.peer_addr = c->cluster_peer_address && c->cluster_peer_address[0]
			      ? c->cluster_peer_address
			      : c->peer_listen;
	r.lease_ttl_ms = c->cluster_lease_ttl_ms;
	r.connect_timeout_ms = c->cluster_connect_timeout_ms;
	r.command_timeout_ms = c->cluster_command_timeout_ms;
	r.flush_timeout_ms = c->cluster_flush_timeout_ms;
	r.query_timeout_ms = c->cluster_query_timeout_ms;
	r.queue_entries = c->cluster_queue_entries;
	r.entry_ttl_ms = c->cluster_entry_ttl_ms;
	rc = registry_config_check(&r, why, wl);
	if (rc < 0)
		return rc;
	if (c->cluster_password_file && c->cluster_password_file[0]) {
		rc = read_password("password_file", c->cluster_password_file, secrets->redis,
				   sizeof(secrets->redis), why, wl);
		if (rc < 0)
			return rc;
		r.password = secrets->redis;
	}
	if (c->cluster_sentinel_password_file && c->cluster_sentinel_password_file[0]) {
		rc = read_password("sentinel_password_file", c->cluster_sentinel_password_file,
				   secrets->sentinel, sizeof(secrets->sentinel), why, wl);
		if (rc < 0)
			return rc;
		r.sentinel_password = secrets->sentinel;
	}
	*ret = r;
	return 1;
}
