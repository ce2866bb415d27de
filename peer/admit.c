/* SPDX-License-Identifier: MIT */
/*
 * Admission on the serving side: who may hold a connection, and how many
 * of them may still be unauthenticated.  Owned by the service thread
 * (every function here runs on it, from serve.c); nothing is shared.
 *
 * A peer is a host: its address without the port (an IPv4-mapped IPv6
 * address is the IPv4 host), so that opening more connections, from
 * other ports, buys nothing.  Per host it counts open connections
 * (max_conns_per_peer), those not authenticated yet (max_unauth_per_peer)
 * and locks (max_locks_per_peer).  Over every host, the connections not
 * authenticated yet share one budget (max_unauth), well below max_conns,
 * so that hosts without the secret, however many, never hold the slots
 * authenticated peers need.  A new connection that finds the budget (or
 * max_conns) used up takes the place of the oldest unauthenticated
 * connection of the host holding the most of them, provided that host
 * holds more than the newcomer's: each host keeps a fair share of the
 * budget, and a legitimate node whose handshake takes a round trip gets
 * in even while others fill the budget as fast as they can.  Every
 * unauthenticated connection also ends at the handshake deadline
 * (hello_timeout_ms, serve_tick()).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "peer/admit.h"
#include "peer/conn.h"
#include "peer/kp.h"

/* The host of @sa: family and address, no port, v4-mapped IPv6 as IPv4. */
static void host_of(const struct sockaddr_storage *sa, struct peer_host *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (sa->ss_family == AF_INET) {
		ret->family = AF_INET;
		memcpy(ret->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			ret->family = AF_INET;
			memcpy(ret->addr, a->s6_addr + 12, 4);
		} else {
			ret->family = AF_INET6;
			memcpy(ret->addr, a->s6_addr, 16);
			if (IN6_IS_ADDR_LINKLOCAL(a))
				ret->scope = ((const struct sockaddr_in6 *)sa)->sin6_scope_id;
		}
	}
}

static uint32_t host_hash(const struct kvspeer *kp, const struct peer_host *h)
{
	uint64_t a, b;

	memcpy(&a, h->addr, 8);
	memcpy(&b, h->addr + 8, 8);
	a ^= kp->acct_seed;
	a = (a ^ ((b + (kp->acct_seed >> 17)) * 0x9e3779b97f4a7c15ull) ^ (uint64_t)h->family ^
	     ((uint64_t)h->scope << 32)) *
	    0xff51afd7ed558ccdull;
	a ^= a >> 29;
	a *= 0xc4ceb9fe1a85ec53ull;
	return (uint32_t)(a ^ (a >> 32));
}

int admit_init(struct kvspeer *kp)
{
	uint32_t buckets = 1;

	while (buckets < kp->p.max_conns * 2)
		buckets <<= 1;
	kp->accts = calloc(kp->p.max_conns, sizeof(*kp->accts));
	kp->acct_hash = calloc(buckets, sizeof(*kp->acct_hash));
	kp->unauth_hist = calloc(kp->p.max_unauth_per_peer + 1, sizeof(*kp->unauth_hist));
	if (!kp->accts || !kp->acct_hash || !kp->unauth_hist)
		return -ENOMEM;
	if (getrandom(&kp->acct_seed, sizeof(kp->acct_seed), 0) != sizeof(kp->acct_seed))
		kp->acct_seed = peer_now_ns() * 0x9e3779b97f4a7c15ull;
	kp->acct_mask = buckets - 1;
	/* Every account on the free list: one per connection that may be open. */
	for (uint32_t i = 0; i < kp->p.max_conns; i++) {
		kp->accts[i].hnext = kp->acct_free;
		kp->acct_free = &kp->accts[i];
	}
	CDS_INIT_LIST_HEAD(&kp->unauth);
	return 0;
}

void admit_fini(struct kvspeer *kp)
{
	free(kp->accts);
	free(kp->acct_hash);
	free(kp->unauth_hist);
}

static struct peer_acct *acct_find(struct kvspeer *kp, const struct peer_host *h)
{
	for (struct peer_acct *a = kp->acct_hash[host_hash(kp, h) & kp->acct_mask]; a; a = a->hnext)
		if (!memcmp(&a->host, h, sizeof(*h)))
			return a;
	return NULL;
}

/* A host's account, made on its first connection; NULL when every account is in use. */
static struct peer_acct *acct_get(struct kvspeer *kp, const struct peer_host *h)
{
	struct peer_acct *a = acct_find(kp, h), **b;

	if (a || !kp->acct_free)
		return a;
	a = kp->acct_free;
	kp->acct_free = a->hnext;
	memset(a, 0, sizeof(*a));
	a->host = *h;
	b = &kp->acct_hash[host_hash(kp, h) & kp->acct_mask];
	a->hnext = *b;
	*b = a;
	return a;
}

/* Its last connection went (and with it its locks): back on the free list. */
static void acct_drop_if_unused(struct kvspeer *kp, struct peer_acct *a)
{
	struct peer_acct **pp = &kp->acct_hash[host_hash(kp, &a->host) & kp->acct_mask];

	if (a->conns)
		return;
	while (*pp != a)
		pp = &(*pp)->hnext;
	*pp = a->hnext;
	a->hnext = kp->acct_free;
	kp->acct_free = a;
}

/* The histogram of unauthenticated connections per host follows a->unauth. */
static void unauth_move(struct kvspeer *kp, struct peer_acct *a, uint32_t to)
{
	if (a->unauth)
		kp->unauth_hist[a->unauth]--;
	a->unauth = to;
	if (to)
		kp->unauth_hist[to]++;
}

static void unauth_add(struct kvspeer *kp, struct conn *c)
{
	unauth_move(kp, c->acct, c->acct->unauth + 1);
	cds_list_add_tail(&c->unauth_link, &kp->unauth);
	kp->nr_unauth++;
	STAT_ADD(kp, conns_unauth, 1);
}

static void unauth_del(struct kvspeer *kp, struct conn *c)
{
	if (cds_list_empty(&c->unauth_link))
		return;
	cds_list_del_init(&c->unauth_link);
	unauth_move(kp, c->acct, c->acct->unauth - 1);
	kp->nr_unauth--;
	STAT_SUB(kp, conns_unauth, 1);
}

/*
 * Room for a connection of @a: the oldest unauthenticated connection of
 * the host holding the most of them, if that is more than @a holds (the
 * newcomer's host would hold one more).  NULL: nobody to make room.
 */
static struct conn *victim(struct kvspeer *kp, const struct peer_acct *a)
{
	uint32_t most = kp->p.max_unauth_per_peer;
	struct cds_list_head *pos;

	while (most && !kp->unauth_hist[most])
		most--;
	if (most <= a->unauth)
		return NULL;
	/* Oldest first: the first of that host's in the list of every one, by age. */
	for (pos = kp->unauth.next; pos != &kp->unauth; pos = pos->next) {
		struct conn *c = cds_list_entry(pos, struct conn, unauth_link);

		if (c->acct->unauth == most)
			return c;
	}
	return NULL;
}

int admit_accept(struct kvspeer *kp, const struct sockaddr_storage *sa, struct peer_acct **ret)
{
	struct peer_host h;
	struct peer_acct *a;
	bool full;

	host_of(sa, &h);
	a = acct_find(kp, &h);
	if (a && a->conns >= kp->p.max_conns_per_peer) {
		STAT_ADD(kp, refused_host_conns, 1);
		return -EUSERS;
	}
	if (a && a->unauth >= kp->p.max_unauth_per_peer) {
		STAT_ADD(kp, refused_host_unauth, 1);
		return -EUSERS;
	}
	full = kp->nr_serve_conns >= kp->p.max_conns;
	if (full || kp->nr_unauth >= kp->p.max_unauth) {
		static const struct peer_acct none = { 0 };
		struct conn *v = victim(kp, a ? a : &none);

		if (!v) {
			/*
			 * Nobody's handshake to close for it: the budget is
			 * used up and the newcomer's host holds the most of
			 * it, or max_conns is reached below the budget.
			 */
			if (kp->nr_unauth >= kp->p.max_unauth)
				STAT_ADD(kp, refused_unauth_budget, 1);
			else
				STAT_ADD(kp, refused_total, 1);
			return -EUSERS;
		}
		/* The victim's end is a limit's too (serve_fail), besides why. */
		STAT_ADD(kp, evicted_unauth, 1);
		STAT_ADD(kp, serve_fail[KVSPEER_FAIL_LIMIT], 1);
		kp_log_peer(kp, KVSPEER_LOG_WARNING,
			    "peer %s: closed before its handshake ended, to make room (%u of %u "
			    "connections not authenticated)",
			    v->addr_str, kp->nr_unauth, kp->p.max_unauth);
		conn_close(v, -EUSERS);
	}
	if (!a)
		a = acct_get(kp, &h);
	if (!a) { /* cannot be: an account per connection that may be open */
		STAT_ADD(kp, refused_total, 1);
		return -EUSERS;
	}
	*ret = a;
	return 0;
}

void admit_cancel(struct kvspeer *kp, struct peer_acct *a)
{
	acct_drop_if_unused(kp, a);
}

void admit_attach(struct kvspeer *kp, struct conn *c, struct peer_acct *a)
{
	c->acct = a;
	a->conns++;
	kp->nr_serve_conns++;
	unauth_add(kp, c);
}

void admit_authenticated(struct kvspeer *kp, struct conn *c)
{
	unauth_del(kp, c);
}

void admit_release(struct kvspeer *kp, struct conn *c)
{
	struct peer_acct *a = c->acct;

	if (!a)
		return;
	unauth_del(kp, c);
	c->acct = NULL;
	a->conns--;
	kp->nr_serve_conns--;
	acct_drop_if_unused(kp, a);
}

bool admit_may_lock(struct kvspeer *kp, const struct conn *c)
{
	if (c->acct->locks < kp->p.max_locks_per_peer)
		return true;
	STAT_ADD(kp, locks_refused_host, 1);
	return false;
}

void admit_locked(struct conn *c)
{
	c->acct->locks++;
}

void admit_unlock(struct conn *c)
{
	c->acct->locks--;
}
