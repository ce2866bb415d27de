/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the control-plane integration tests (handshake,
 * registration, malformed input, death): a raw SOCK_SEQPACKET speaker of
 * wire.h for input libkvstash would never send, and STATUS lookups.
 */
#ifndef KVS_TEST_CTLTEST_H
#define KVS_TEST_CTLTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

/* Connect a raw socket to @sock; the fd or -errno. */
int raw_connect(const char *sock);

/* Send one packet with @nfds fds (SCM_RIGHTS); 0 or -errno. */
int raw_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds);

/*
 * Receive one packet within @timeout_ms: its length, 0 at EOF, -ETIMEDOUT,
 * or -errno.  Fds that arrive go to @fds (up to @max, the rest closed) and
 * their number to *@ret_nfds; @fds may be NULL to close them all.
 */
ssize_t raw_recv(int fd, void *buf, size_t cap, int *fds, unsigned max, unsigned *ret_nfds,
		 int timeout_ms);

/* Does the peer close the socket within @timeout_ms (packets before EOF are skipped)? */
bool raw_eof(int fd, int timeout_ms);

/* A HELLO as libkvstash would send it (host device). */
void raw_hello_init(struct kvs_msg_hello *h, uint32_t role, const char *instance, const char *ns,
		    uint32_t rank, uint32_t tp);

/*
 * Say @h and read the reply into @rep (zeroed first); the region fd, if
 * one came, to *@ret_fd (else -1).  Returns the reply's status, or -errno
 * when no reply came.
 */
int raw_hello(int fd, const struct kvs_msg_hello *h, struct kvs_msg_hello_reply *rep,
	      int *ret_fd);

/* STATUS entry of session @id; 0, -ENOENT, or -errno. */
int status_session(struct kvs_client *admin, uint64_t id, struct kvs_msg_status_session *ret);

/*
 * Poll proc_fd_count(), proc_memfd_count() or proc_map_count() until it
 * equals @want or @timeout_ms passes; the last count.  kvstashd may close
 * an fd just after it has replied, so a count is only final once it stops
 * changing towards the expected value.
 */
int wait_fd_count(pid_t pid, int want, int timeout_ms);
int wait_memfd_count(pid_t pid, const char *name, int want, int timeout_ms);
int wait_map_count(pid_t pid, const char *needle, int want, int timeout_ms);
/* The same for kvsd_log_count(). */
int wait_log_count(const struct kvsd *d, const char *needle, int want, int timeout_ms);

/*
 * Wait until every thread of @pid is stopped (after SIGSTOP, which kill()
 * only queues: a thread running on another CPU stops a little later).
 * 0, or -ETIMEDOUT.
 */
int wait_stopped(pid_t pid, int timeout_ms);

/* Is @pid still running (and not a zombie)? */
bool pid_alive(pid_t pid);

/* Path of the kvstashd binary in the build tree. */
const char *kvstashd_bin(void);

#endif /* KVS_TEST_CTLTEST_H */
