/* SPDX-License-Identifier: MIT */
/*
 * The fetching side's peers (struct peer_ent, kp->peers): one per peer
 * address, bounded in number, each with its pool of idle connections, its
 * count of handshakes in flight and the fetches waiting for a connection.
 * Service thread only.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer/conn.h"
#include "peer/fetch-pool.h"
#include "peer/kp.h"

struct peer_ent *pool_peer(struct kvspeer *kp, const char *addr)
{
	struct cds_list_head *pos, *tmp;
	struct peer_ent *pe, *lru = NULL;

	cds_list_for_each_safe(pos, tmp, &kp->peers)
	{
		pe = cds_list_entry(pos, struct peer_ent, link);
		if (!strcmp(pe->addr, addr))
			return pe;
		if (!pe->conns && cds_list_empty(&pe->waiting) &&
		    (!lru || pe->last_ns < lru->last_ns))
			lru = pe;
	}
	if (kp->nr_peers >= PEER_MAX_PEERS) {
		/* Bounded: the least recently used entry without a connection goes. */
		if (!lru)
			return NULL;
		cds_list_del_init(&lru->link);
		kp->nr_peers--;
		free(lru);
	}
	pe = calloc(1, sizeof(*pe));
	if (!pe)
		return NULL;
	snprintf(pe->addr, sizeof(pe->addr), "%s", addr);
	if (peer_addr_parse(addr, &pe->sa, &pe->salen) < 0) {
		free(pe);
		return NULL;
	}
	CDS_INIT_LIST_HEAD(&pe->idle);
	CDS_INIT_LIST_HEAD(&pe->waiting);
	CDS_INIT_LIST_HEAD(&pe->kick_link);
	pe->last_ns = peer_now_ns();
	cds_list_add_tail(&pe->link, &kp->peers);
	kp->nr_peers++;
	return pe;
}

void pool_free(struct kvspeer *kp)
{
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &kp->peers)
	{
		struct peer_ent *pe = cds_list_entry(pos, struct peer_ent, link);

		cds_list_del_init(pos);
		cds_list_del_init(&pe->kick_link);
		free(pe);
	}
	kp->nr_peers = 0;
}

/*
 * Handshakes we have open to one peer at a time: half of the limit we
 * ourselves set on unauthenticated connections from one host
 * (max_unauth_per_peer), so that a cluster configured alike never meets
 * its peers' limit, and a node that is busy fetching never holds the most
 * of a peer's unauthenticated budget (whose oldest conn goes first when an
 * attack fills it).  Further fetches wait in pe->waiting for a conn.
 */
uint32_t pool_connecting_max(const struct kvspeer *kp)
{
	return (kp->p.max_unauth_per_peer + 1) / 2;
}

/* A conn of @pe is free, or one more may be opened: its waiting fetches go next turn. */
void pool_kick(struct kvspeer *kp, struct peer_ent *pe)
{
	if (!cds_list_empty(&pe->waiting) && cds_list_empty(&pe->kick_link))
		cds_list_add_tail(&pe->kick_link, &kp->kick);
}

void pool_conn_gone(struct conn *c, enum conn_state was)
{
	struct peer_ent *pe = c->pe;

	pe->conns--;
	if (was < CS_READY)
		pe->connecting--;
	pool_kick(c->kp, pe);
}

void pool_idle(struct conn *c)
{
	struct peer_ent *pe = c->pe;

	c->f = NULL;
	c->drain_seq = 0;
	if (c->state != CS_READY || pe->nr_idle >= c->kp->p.pool_idle) {
		conn_close(c, 0);
		return;
	}
	c->idle_since_ns = peer_now_ns();
	cds_list_add_tail(&c->idle_link, &pe->idle);
	pe->nr_idle++;
	pool_kick(c->kp, pe);
}

int pool_open(struct kvspeer *kp, struct peer_ent *pe, const struct conn_ops *ops,
	      struct conn **ret)
{
	struct conn *c;
	int fd, r;

	fd = socket(pe->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Leave from the cluster interface when we have one (kvspeer_params.listen). */
	if (kp->serving && kp->listen_sa.ss_family == pe->sa.ss_family) {
		struct sockaddr_storage src = kp->listen_sa;

		if (src.ss_family == AF_INET)
			((struct sockaddr_in *)&src)->sin_port = 0;
		else
			((struct sockaddr_in6 *)&src)->sin6_port = 0;
		if (bind(fd, (struct sockaddr *)&src, kp->listen_salen) < 0) {
			r = -errno;
			close(fd);
			return r;
		}
	}
	conn_set_sockopts(kp, fd);
	if (connect(fd, (struct sockaddr *)&pe->sa, pe->salen) < 0 && errno != EINPROGRESS) {
		r = -errno;
		close(fd);
		return r;
	}
	c = conn_new(kp, fd, SIDE_FETCH, ops, NULL, (struct sockaddr *)&pe->sa, pe->salen);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->pe = pe;
	pe->conns++;
	pe->connecting++; /* until CS_READY, or pool_conn_gone() */
	*ret = c;
	return 0;
}
