/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <kvstash/wire.h>

#include "common/wireio.h"

void wireio_close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

ssize_t wireio_recv(int fd, void *buf, size_t cap, int *fds, unsigned max_fds, unsigned *ret_nfds,
		    int flags)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVS_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl.buf,
		.msg_controllen = sizeof(ctl.buf),
	};
	unsigned nfds = 0;
	bool overflow = false;
	ssize_t n;

	if (max_fds > KVS_MAX_FDS)
		max_fds = KVS_MAX_FDS;
	do {
		n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | flags);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;

	/* Take every fd that arrived, so none leaks even on error. */
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		unsigned cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *p = (int *)CMSG_DATA(c);

		for (unsigned i = 0; i < cnt; i++) {
			int got;

			memcpy(&got, p + i, sizeof(int));
			if (nfds < max_fds)
				fds[nfds++] = got;
			else {
				close(got);
				overflow = true;
			}
		}
	}
	if (overflow || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		wireio_close_fds(fds, nfds);
		return -EMSGSIZE;
	}
	*ret_nfds = nfds;
	return n;
}

int wireio_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds, int flags)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVS_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds > KVS_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do {
		n = sendmsg(fd, &msg, MSG_NOSIGNAL | flags);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EMSGSIZE;
}
