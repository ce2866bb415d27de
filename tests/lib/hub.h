/* SPDX-License-Identifier: MIT */
/*
 * Hosts of a test's own, in network namespaces joined by a bridge: the
 * test process moves into a new namespace of its own, the hub, with a
 * bridge at 10.214.0.254/24; each host is a namespace held by a keeper
 * process, joined to the bridge by a veth pair, at 10.214.0.N.  Every
 * namespace is anonymous: it goes when its last process does (a keeper
 * dies with the test, PR_SET_PDEATHSIG), so a test killed by its watchdog
 * leaves nothing behind, and tests running at once never meet.  Unix
 * sockets are files, so the test still reaches a kvstashd in any host.
 *
 * Partitions are nftables rules in a host's namespace (hub_cut()), in
 * both directions or one.  Needs root, ip(8), nsenter(1) and nft(8):
 * hub_init() exits 77 without them.
 */
#ifndef KVS_TEST_HUB_H
#define KVS_TEST_HUB_H

#include <stdbool.h>
#include <sys/types.h>

#define HUB_NET	 "10.214.0."
#define HUB_ADDR HUB_NET "254" /* the test process's own address */

struct hub_host {
	char name[32];
	char addr[32]; /* HUB_NET "N" */
	pid_t keeper;  /* holds the namespace: /proc/<keeper>/ns/net */
};

/* Move into the hub (skip, 77, when namespaces cannot be made here). */
void hub_init(void);
/* A host at HUB_NET @octet (1..253); exits 1 on failure. */
void hub_host(struct hub_host *h, const char *name, unsigned octet);
/* More addresses of @h on its link (dialling from several hosts). */
void hub_host_addr(const struct hub_host *h, const char *addr);
/* In a child before exec: enter @h's namespace (NULL: stay in the hub).  0 or -errno. */
int hub_enter(const struct hub_host *h);
/*
 * Drop traffic between @h and address @peer (both ways, or only what @h
 * receives from @peer with @inbound_only), in @h's namespace; hub_heal()
 * lifts every rule of @h.
 */
void hub_cut(const struct hub_host *h, const char *peer, bool inbound_only);
void hub_heal(const struct hub_host *h);
/* Run a shell command in @h's namespace (NULL: the hub); its exit status. */
int hub_sh(const struct hub_host *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KVS_TEST_HUB_H */
