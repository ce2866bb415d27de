/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hub.h"

static unsigned veths;

static void die(const char *what)
{
	fprintf(stderr, "hub: %s\n", what);
	exit(1);
}

static int vsh(const struct hub_host *h, const char *fmt, va_list ap)
{
	char cmd[1024], full[1200];
	int st;

	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	if (h)
		snprintf(full, sizeof(full), "nsenter -t %d -n sh -c '%s' >/dev/null 2>&1",
			 (int)h->keeper, cmd);
	else
		snprintf(full, sizeof(full), "sh -c '%s' >/dev/null 2>&1", cmd);
	st = system(full);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int hub_sh(const struct hub_host *h, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vsh(h, fmt, ap);
	va_end(ap);
	return r;
}

static void must(const struct hub_host *h, const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (hub_sh(h, "%s", cmd) != 0) {
		fprintf(stderr, "hub: in %s: %s: failed\n", h ? h->name : "the hub", cmd);
		exit(1);
	}
}

void hub_init(void)
{
	if (geteuid() != 0) {
		printf("not root: cannot make network namespaces: skipped\n");
		exit(77);
	}
	if (system("command -v ip >/dev/null && command -v nsenter >/dev/null && "
		   "command -v nft >/dev/null") != 0) {
		printf("ip, nsenter or nft not found (apt-get install iproute2 util-linux nftables): "
		       "skipped\n");
		exit(77);
	}
	if (unshare(CLONE_NEWNET) < 0) {
		printf("cannot make a network namespace (%s): skipped\n", strerror(errno));
		exit(77);
	}
	must(NULL, "ip link set lo up && ip link add br0 type bridge && ip link set br0 up && "
		   "ip addr add " HUB_ADDR "/24 dev br0");
}

void hub_host(struct hub_host *h, const char *name, unsigned octet)
{
	int p[2];
	char c;

	memset(h, 0, sizeof(*h));
	snprintf(h->name, sizeof(h->name), "%s", name);
	snprintf(h->addr, sizeof(h->addr), HUB_NET "%u", octet);
	if (pipe(p) < 0)
		die("pipe");
	h->keeper = fork();
	if (h->keeper < 0)
		die("fork");
	if (h->keeper == 0) {
		/* The namespace lives while this does, and this dies with the test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		c = unshare(CLONE_NEWNET) == 0 ? 'y' : 'n';
		if (write(p[1], &c, 1) != 1)
			_exit(1);
		close(p[1]);
		for (;;)
			pause();
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1 || c != 'y')
		die("unshare in the keeper");
	close(p[0]);
	veths++;
	must(NULL,
	     "ip link add hv%u type veth peer name eth0 netns %d && ip link set hv%u master br0 "
	     "&& ip link set hv%u up",
	     veths, (int)h->keeper, veths, veths);
	/* A bridge without STP forwards on a port as soon as it is up. */
	must(h, "ip link set lo up && ip addr add %s/24 dev eth0 && ip link set eth0 up", h->addr);
}

void hub_host_addr(const struct hub_host *h, const char *addr)
{
	must(h, "ip addr add %s/24 dev eth0", addr);
}

int hub_enter(const struct hub_host *h)
{
	char path[64];
	int fd, r;

	if (!h)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)h->keeper);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = setns(fd, CLONE_NEWNET) < 0 ? -errno : 0;
	close(fd);
	return r;
}

void hub_cut(const struct hub_host *h, const char *peer, bool inbound_only)
{
	must(h,
	     "nft add table inet hubcut && "
	     "nft add chain inet hubcut in { type filter hook input priority 0 \\; } && "
	     "nft add chain inet hubcut out { type filter hook output priority 0 \\; } && "
	     "nft add rule inet hubcut in ip saddr %s drop",
	     peer);
	if (!inbound_only)
		must(h, "nft add rule inet hubcut out ip daddr %s drop", peer);
}

void hub_heal(const struct hub_host *h)
{
	hub_sh(h, "nft delete table inet hubcut");
}
