/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctltest.h"

int raw_connect(const char *sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int raw_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds)
{
	char ctl[CMSG_SPACE(sizeof(int) * 256)] __attribute__((aligned(8)));
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds > 256)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;

		memset(ctl, 0, sizeof(ctl));
		msg.msg_control = ctl;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	n = sendmsg(fd, &msg, MSG_NOSIGNAL);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EMSGSIZE;
}

ssize_t raw_recv(int fd, void *buf, size_t cap, int *fds, unsigned max, unsigned *ret_nfds,
		 int timeout_ms)
{
	char ctl[CMSG_SPACE(sizeof(int) * 64)] __attribute__((aligned(8)));
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl,
		.msg_controllen = sizeof(ctl),
	};
	struct pollfd p = { .fd = fd, .events = POLLIN };
	unsigned nfds = 0;
	ssize_t n;
	int r;

	do {
		r = poll(&p, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		unsigned cnt;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		cnt = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (unsigned i = 0; i < cnt; i++) {
			int got;

			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds && nfds < max)
				fds[nfds++] = got;
			else
				close(got);
		}
	}
	if (ret_nfds)
		*ret_nfds = nfds;
	return n;
}

bool raw_eof(int fd, int timeout_ms)
{
	uint64_t deadline = test_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	static uint8_t buf[KVS_MSG_MAX];

	for (;;) {
		uint64_t now = test_now_ns();
		ssize_t n;

		if (now >= deadline)
			return false;
		n = raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL,
			     (int)((deadline - now) / 1000000 + 1));
		if (n == 0)
			return true;
		if (n < 0 && n != -EAGAIN)
			return n != -ETIMEDOUT;
	}
}

void raw_hello_init(struct kvs_msg_hello *h, uint32_t role, const char *instance, const char *ns,
		    uint32_t rank, uint32_t tp)
{
	memset(h, 0, sizeof(*h));
	h->hdr.type = KVS_MSG_HELLO;
	h->hdr.size = sizeof(*h);
	h->hdr.seq = 1;
	h->rev_major = KVS_WIRE_MAJOR;
	h->rev_minor = KVS_WIRE_MINOR;
	h->role = role;
	h->tp_rank = rank;
	h->tp_size = tp;
	h->world_size = tp;
	h->device_kind = KVS_DEVICE_HOST;
	if (instance)
		snprintf(h->instance, sizeof(h->instance), "%s", instance);
	if (ns)
		snprintf(h->ns, sizeof(h->ns), "%s", ns);
}

int raw_hello(int fd, const struct kvs_msg_hello *h, struct kvs_msg_hello_reply *rep,
	      int *ret_fd)
{
	int fds[4];
	unsigned nfds = 0;
	ssize_t n;
	int r;

	memset(rep, 0, sizeof(*rep));
	*ret_fd = -1;
	r = raw_send(fd, h, sizeof(*h), NULL, 0);
	if (r < 0)
		return r;
	n = raw_recv(fd, rep, sizeof(*rep), fds, 4, &nfds, 5000);
	if (n < 0)
		return (int)n;
	if (n < (ssize_t)sizeof(struct kvs_msg_reply))
		return -EBADMSG;
	if (nfds)
		*ret_fd = fds[0];
	for (unsigned i = 1; i < nfds; i++)
		close(fds[i]);
	return rep->r.status;
}

struct find {
	uint64_t id;
	struct kvs_msg_status_session *out;
	bool found;
};

static int find_cb(void *arg, const struct kvs_msg_hdr *m)
{
	struct find *f = arg;
	const struct kvs_msg_status_session *s = (const void *)m;

	if (m->type == KVS_MSG_STATUS_SESSION && s->session_id == f->id) {
		memcpy(f->out, s, sizeof(*s));
		f->found = true;
	}
	return 0;
}

int status_session(struct kvs_client *admin, uint64_t id, struct kvs_msg_status_session *ret)
{
	struct find f = { .id = id, .out = ret };
	int r = kvs_admin_request(admin, KVS_MSG_STATUS, find_cb, &f);

	if (r < 0)
		return r;
	return f.found ? 0 : -ENOENT;
}

#define WAIT_COUNT(expr)                                                         \
	do {                                                                     \
		uint64_t deadline = test_now_ns() + (uint64_t)timeout_ms * 1000000ull; \
		int n;                                                           \
		while ((n = (expr)) != want && test_now_ns() < deadline)         \
			usleep(5000);                                            \
		return n;                                                        \
	} while (0)

int wait_fd_count(pid_t pid, int want, int timeout_ms)
{
	WAIT_COUNT(proc_fd_count(pid));
}

int wait_memfd_count(pid_t pid, const char *name, int want, int timeout_ms)
{
	WAIT_COUNT(proc_memfd_count(pid, name));
}

int wait_map_count(pid_t pid, const char *needle, int want, int timeout_ms)
{
	WAIT_COUNT(proc_map_count(pid, needle));
}

int wait_log_count(const struct kvsd *d, const char *needle, int want, int timeout_ms)
{
	WAIT_COUNT((int)kvsd_log_count(d, needle));
}

/* State letter of /proc/@pid/task/@tid/stat; '?' when unreadable. */
static char task_state(pid_t pid, const char *tid)
{
	char path[300], line[512]; /* tid: a d_name, up to 255 bytes as far as gcc knows */
	char *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, tid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	p = fgets(line, sizeof(line), f);
	fclose(f);
	/* "tid (comm) S ...": the state follows the last ')'. */
	if (!p || !(p = strrchr(line, ')')) || p[1] != ' ')
		return '?';
	return p[2];
}

static bool all_stopped(pid_t pid)
{
	char path[64];
	struct dirent *e;
	bool stopped = true;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return false;
	while (stopped && (e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		stopped = task_state(pid, e->d_name) == 'T';
	}
	closedir(dir);
	return stopped;
}

int wait_stopped(pid_t pid, int timeout_ms)
{
	uint64_t deadline = test_now_ns() + (uint64_t)timeout_ms * 1000000ull;

	while (!all_stopped(pid)) {
		if (test_now_ns() >= deadline)
			return -ETIMEDOUT;
		usleep(1000);
	}
	return 0;
}

bool pid_alive(pid_t pid)
{
	char path[64], line[512];
	char *p;
	FILE *f;

	if (pid <= 0 || kill(pid, 0) < 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	p = fgets(line, sizeof(line), f);
	fclose(f);
	/* "pid (comm) S ...": the state follows the last ')'. */
	if (!p || !(p = strrchr(line, ')')))
		return false;
	return p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

const char *kvstashd_bin(void)
{
	static char bin[512];
	const char *b = getenv("top_builddir");

	snprintf(bin, sizeof(bin), "%s/sidecar/kvstashd", b ? b : ".");
	return bin;
}
