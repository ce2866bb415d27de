/* SPDX-License-Identifier: MIT */
/*
 * Admin requests (status, stats): a request, then a train of replies ended
 * by END; and the descriptors of the stats messages, from the tables of
 * <kvstash/stats.h>.
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "common/wireio.h"

/* ---- the stats groups ------------------------------------------------- */

struct field_desc {
	const char *name;
	uint16_t off, size;
	uint8_t type, kind, unit;
};

/* SMSG: the message struct of the table expanded. */
#define FIELD_(shape, ...) FIELD_##shape(__VA_ARGS__)
#define FIELD_F(type, name, kind, src, unit, ...) \
	{ #name,                                  \
	  offsetof(SMSG, name),                   \
	  sizeof(((SMSG *)0)->name),              \
	  KVS_STATS_T_##type,                     \
	  KVS_STATS_K_##kind,                     \
	  KVS_STATS_U_##unit },
#define FIELD_D(...)
#define FIELD_S(...)
#define FIELD_I(...)

#define SMSG struct kvs_msg_stats_global
static const struct field_desc global_fields[] = { KVS_STATS_GLOBAL(FIELD_) };
#undef SMSG
#define SMSG struct kvs_msg_stats_node
static const struct field_desc node_fields[] = { KVS_STATS_NODE(FIELD_) };
#undef SMSG
#define SMSG struct kvs_msg_stats_session
static const struct field_desc session_fields[] = { KVS_STATS_SESSION(FIELD_) };
#undef SMSG
#define SMSG struct kvs_msg_stats_registry
static const struct field_desc registry_fields[] = { KVS_STATS_REGISTRY(FIELD_) };
#undef SMSG
#define SMSG struct kvs_msg_stats_ssd
static const struct field_desc ssd_fields[] = { KVS_STATS_SSD(FIELD_) };
#undef SMSG
#define SMSG struct kvs_msg_stats_ssd_drive
static const struct field_desc ssd_drive_fields[] = { KVS_STATS_SSD_DRIVE(FIELD_) };
#undef SMSG
#define SMSG struct kvs_msg_stats_peer
static const struct field_desc peer_fields[] = { KVS_STATS_PEER(FIELD_) };
#undef SMSG
#define SMSG struct kvs_msg_stats_peer_info
static const struct field_desc peer_info_fields[] = { KVS_STATS_PEER_INFO(FIELD_) };
#undef SMSG

static const struct group_desc {
	const char *name;
	uint32_t msg_type;
	uint32_t size;
	uint32_t flags;
	const struct field_desc *fields;
	uint32_t nr_fields;
} groups[] = {
	{ "global", KVS_MSG_STATS_GLOBAL, sizeof(struct kvs_msg_stats_global), 0, global_fields,
	  sizeof(global_fields) / sizeof(global_fields[0]) },
	{ "nodes", KVS_MSG_STATS_NODE, sizeof(struct kvs_msg_stats_node), KVS_STATS_GROUP_MANY,
	  node_fields, sizeof(node_fields) / sizeof(node_fields[0]) },
	{ "sessions", KVS_MSG_STATS_SESSION, sizeof(struct kvs_msg_stats_session),
	  KVS_STATS_GROUP_MANY, session_fields,
	  sizeof(session_fields) / sizeof(session_fields[0]) },
	/* Only from a kvstashd with [cluster], in STATS and STATUS replies (wire.h). */
	{ "registry", KVS_MSG_STATS_REGISTRY, sizeof(struct kvs_msg_stats_registry), 0,
	  registry_fields, sizeof(registry_fields) / sizeof(registry_fields[0]) },
	/* Only from a kvstashd with [ssd], in STATS replies: the tier, then its drives. */
	{ "ssd", KVS_MSG_STATS_SSD, sizeof(struct kvs_msg_stats_ssd), 0, ssd_fields,
	  sizeof(ssd_fields) / sizeof(ssd_fields[0]) },
	{ "ssd_drives", KVS_MSG_STATS_SSD_DRIVE, sizeof(struct kvs_msg_stats_ssd_drive),
	  KVS_STATS_GROUP_MANY, ssd_drive_fields,
	  sizeof(ssd_drive_fields) / sizeof(ssd_drive_fields[0]) },
	/*
	 * Only from a kvstashd with a peer service, in STATS and STATUS
	 * replies: the service, then its peers.
	 */
	{ "peer", KVS_MSG_STATS_PEER, sizeof(struct kvs_msg_stats_peer), 0, peer_fields,
	  sizeof(peer_fields) / sizeof(peer_fields[0]) },
	{ "peers", KVS_MSG_STATS_PEER_INFO, sizeof(struct kvs_msg_stats_peer_info),
	  KVS_STATS_GROUP_MANY, peer_info_fields,
	  sizeof(peer_info_fields) / sizeof(peer_info_fields[0]) },
};

#define NR_GROUPS (sizeof(groups) / sizeof(groups[0]))

/* Bindings mirror these (python/kvstash/admin.py): no padding anywhere. */
_Static_assert(sizeof(struct kvs_stats_group) == sizeof(void *) + 4 * 4 + 2 * 8, "kvs_stats_group");
_Static_assert(sizeof(struct kvs_stats_field) == sizeof(void *) + 6 * 4 + 2 * 8, "kvs_stats_field");

static const struct group_desc *group_of(uint32_t msg_type)
{
	for (unsigned i = 0; i < NR_GROUPS; i++)
		if (groups[i].msg_type == msg_type)
			return &groups[i];
	return NULL;
}

int kvs_stats_group(uint32_t index, struct kvs_stats_group *ret_group)
{
	const struct group_desc *g;

	if (index >= NR_GROUPS)
		return -ENOENT;
	g = &groups[index];
	*ret_group = (struct kvs_stats_group){
		.name = g->name,
		.msg_type = g->msg_type,
		.size = g->size,
		.nr_fields = g->nr_fields,
		.flags = g->flags,
	};
	return 0;
}

int kvs_stats_field(uint32_t msg_type, uint32_t index, struct kvs_stats_field *ret_field)
{
	const struct group_desc *g = group_of(msg_type);
	const struct field_desc *f;

	if (!g)
		return -EINVAL;
	if (index >= g->nr_fields)
		return -ENOENT;
	f = &g->fields[index];
	*ret_field = (struct kvs_stats_field){
		.name = f->name,
		.offset = f->off,
		.size = f->size,
		.type = f->type,
		.kind = f->kind,
		.unit = f->unit,
	};
	return 0;
}

/* ---- admin requests ----------------------------------------------------- */

static size_t expected_size(uint32_t type)
{
	const struct group_desc *g = group_of(type);

	if (g)
		return g->size;
	switch (type) {
	case KVS_MSG_STATUS_DAEMON:
		return sizeof(struct kvs_msg_status_daemon);
	case KVS_MSG_STATUS_SESSION:
		return sizeof(struct kvs_msg_status_session);
	case KVS_MSG_END:
		return sizeof(struct kvs_msg_hdr);
	case KVS_MSG_REPLY:
		return sizeof(struct kvs_msg_reply);
	default:
		return 0;
	}
}

/*
 * The size @type had at minor revision @minor, for a daemon older than
 * us: a group that grew sends its older size (wire.h, the minors).
 */
static size_t older_size(uint32_t type, uint32_t minor)
{
	if (type == KVS_MSG_STATS_REGISTRY && minor < 5)
		return 320;
	return expected_size(type);
}

/* Is the fixed string @s of @n bytes terminated, as wire.h requires? */
static bool terminated(const char *s, size_t n)
{
	return memchr(s, '\0', n) != NULL;
}

/*
 * The strings of a reply message, before the callback prints them: a
 * daemon that leaves one unterminated would make it read past the message.
 */
static bool strings_ok(const struct kvs_msg_hdr *h)
{
	const struct kvs_msg_status_session *ss = (const void *)h;
	const struct kvs_msg_status_daemon *sd = (const void *)h;
	const struct group_desc *g = group_of(h->type);

	/* The NAME fields of the stats tables. */
	for (uint32_t i = 0; g && i < g->nr_fields; i++)
		if (g->fields[i].type == KVS_STATS_T_NAME &&
		    !terminated((const char *)h + g->fields[i].off, g->fields[i].size))
			return false;
	switch (h->type) {
	case KVS_MSG_STATUS_DAEMON:
		return terminated(sd->version, sizeof(sd->version));
	case KVS_MSG_STATUS_SESSION:
		return terminated(ss->instance, sizeof(ss->instance)) &&
		       terminated(ss->ns, sizeof(ss->ns)) &&
		       terminated(ss->first_layer, sizeof(ss->first_layer)) &&
		       terminated(ss->last_layer, sizeof(ss->last_layer));
	default:
		return true;
	}
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int kvs_admin_request(struct kvs_client *c, uint32_t type, kvs_admin_fn cb, void *arg)
{
	struct kvs_msg_hdr req = { .type = type, .size = sizeof(req) };
	union {
		struct kvs_msg_hdr h;
		uint8_t b[1024];
	} buf;
	/* timeout_ms bounds the whole train: a daemon that never sends END cannot hold us. */
	uint64_t deadline = mono_ms() + (uint64_t)c->opts.timeout_ms;
	bool newer = c->info.daemon_rev_minor > KVS_WIRE_MINOR;
	bool older = c->info.daemon_rev_minor < KVS_WIRE_MINOR;
	int stop = 0, r;

	if (type != KVS_MSG_STATUS && type != KVS_MSG_STATS)
		return -EINVAL;
	if (c->dead)
		return -ECONNRESET;
	req.seq = ++c->seq;
	r = wireio_send(c->fd, &req, sizeof(req), NULL, 0, 0);
	if (r < 0)
		return r == -EPIPE ? -ECONNRESET : r;
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		uint64_t now = mono_ms();
		unsigned nfds = 0;
		int fds[1];
		ssize_t n;
		size_t want;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)(deadline - now));
		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		n = wireio_recv(c->fd, buf.b, sizeof(buf.b), fds, 1, &nfds, 0);
		if (n <= 0) {
			if (n == 0 || n == -ECONNRESET) {
				client_mark_dead(c);
				return -ECONNRESET;
			}
			return (int)n;
		}
		wireio_close_fds(fds, nfds);
		want = (size_t)n < sizeof(buf.h) ? 0 : expected_size(buf.h.type);
		/*
		 * A daemon of a newer minor revision may send message types we
		 * do not know (skipped) and longer messages of those we do (the
		 * fields we know come first): see <kvstash/stats.h>.
		 */
		if (newer && want == 0 && (size_t)n >= sizeof(buf.h) && buf.h.size == (size_t)n &&
		    buf.h.seq == req.seq)
			continue;
		/*
		 * An older daemon sends a grown group at its older size: the
		 * fields it did not have read as zero, as reserved words do.
		 */
		if (older && want && (size_t)n < want && buf.h.size == (size_t)n &&
		    (size_t)n == older_size(buf.h.type, c->info.daemon_rev_minor)) {
			memset(buf.b + n, 0, want - (size_t)n);
			n = (ssize_t)want;
			buf.h.size = (uint32_t)want;
		}
		if ((size_t)n < sizeof(buf.h) || buf.h.size != (size_t)n || buf.h.seq != req.seq ||
		    want == 0 || (newer ? (size_t)n < want : (size_t)n != want) ||
		    !strings_ok(&buf.h)) {
			client_log(c, KVS_LOG_ERR,
				   "malformed admin reply from kvstashd (type %u, %zd bytes)",
				   buf.h.type, n);
			return -EBADMSG;
		}
		if (buf.h.type == KVS_MSG_REPLY) /* refused */
			return client_reply_status(c, (const struct kvs_msg_reply *)buf.b,
						   (size_t)n, "an admin request");
		if (buf.h.type == KVS_MSG_END)
			return stop;
		if (!stop)
			stop = cb(arg, &buf.h);
	}
}
