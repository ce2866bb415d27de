/* SPDX-License-Identifier: MIT */
/*
 * Internal: one packet in, one packet out on a SOCK_SEQPACKET socket, with
 * file descriptors by SCM_RIGHTS.  Shared by libkvstash and kvstashd; not
 * exported from either.
 */
#ifndef KVS_WIREIO_H
#define KVS_WIREIO_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Receive one packet into @buf (capacity @cap) and up to @max_fds fds
 * (received close-on-exec).  Returns the packet length, 0 on EOF, or
 * -errno: -EMSGSIZE when the packet or its fds did not fit (every fd
 * that did arrive is closed), -EAGAIN with MSG_DONTWAIT and nothing
 * there.  *@ret_nfds is set on success.
 */
ssize_t wireio_recv(int fd, void *buf, size_t cap, int *fds, unsigned max_fds, unsigned *ret_nfds,
		    int flags);

/* Send one packet with @nfds fds; never raises SIGPIPE.  0 or -errno. */
int wireio_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds, int flags);

/* Close @n fds and set them to -1. */
void wireio_close_fds(int *fds, unsigned n);

#endif /* KVS_WIREIO_H */
