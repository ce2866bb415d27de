/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control/daemon.h"
#include "obs/log.h"
#include "control/server.h"
#include "control/protocol.h"
#include "control/session.h"
#include "base/util.h"

static int resolve_group(const char *name, gid_t *ret)
{
	struct group *g;
	char *end;
	unsigned long v;

	if (!name[0]) {
		*ret = (gid_t)-1;
		return 0;
	}
	v = strtoul(name, &end, 10);
	if (*end == '\0') {
		*ret = (gid_t)v;
		return 0;
	}
	g = getgrnam(name);
	if (!g)
		return -ENOENT;
	*ret = g->gr_gid;
	return 0;
}

/* mkdir -p for the socket's directory; only directories we create get dir_mode. */
static int make_dir(const char *dir, mode_t mode, gid_t gid)
{
	char path[PATH_MAX];
	size_t len = strlen(dir);

	if (len >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, len + 1);
	for (char *p = path + 1;; p++) {
		char c = *p;

		if (c != '/' && c != '\0')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) == 0) {
			if (c == '\0') {
				/* mkdir's mode is masked by umask: set it exactly. */
				if (chmod(path, mode) < 0 ||
				    (gid != (gid_t)-1 && chown(path, (uid_t)-1, gid) < 0))
					return -errno;
			}
		} else if (errno != EEXIST) {
			return -errno;
		}
		if (c == '\0')
			break;
		*p = c;
	}
	return 0;
}

static int lock_socket(struct daemon *d, const char *path)
{
	char lock[PATH_MAX];
	int fd;

	if (snprintf(lock, sizeof(lock), "%s.lock", path) >= (int)sizeof(lock))
		return -ENAMETOOLONG;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return log_error_errno(errno, "cannot open %s", lock);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int err = errno;

		close(fd);
		if (err == EWOULDBLOCK)
			return log_error_errno(EADDRINUSE,
					       "another kvstashd is serving %s (it holds %s)", path,
					       lock);
		return log_error_errno(err, "cannot lock %s", lock);
	}
	d->lock_fd = fd;
	return 0;
}

/* The listening socket is readable (control loop). */
static void on_listen(struct ev_source *src, uint32_t events)
{
	server_accept(container_of(src, struct daemon, listen));
}

int server_listen(struct daemon *d)
{
	const struct kvs_config *cfg = d->cfg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dirbuf[PATH_MAX];
	gid_t gid;
	int fd, r;

	r = resolve_group(cfg->socket_group, &gid);
	if (r < 0)
		return log_error_errno(r, "[server] socket_group %s", cfg->socket_group);
	snprintf(dirbuf, sizeof(dirbuf), "%s", cfg->socket_path);
	r = make_dir(dirname(dirbuf), cfg->dir_mode, gid);
	if (r < 0)
		return log_error_errno(r, "cannot create the directory of %s", cfg->socket_path);
	r = lock_socket(d, cfg->socket_path);
	if (r < 0)
		return r;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_error_errno(errno, "socket");
	strscpy_trunc(sa.sun_path, cfg->socket_path, sizeof(sa.sun_path));
	/*
	 * We hold the lock, so a socket file still there is a stale one left
	 * by a daemon that died: check nobody answers, then remove it.
	 */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(fd);
		return log_error_errno(EADDRINUSE, "a live daemon answers on %s", cfg->socket_path);
	}
	close(fd);
	if (unlink(cfg->socket_path) == 0)
		log_info("removed stale socket %s", cfg->socket_path);

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_error_errno(errno, "socket");
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = log_error_errno(errno, "cannot bind %s", cfg->socket_path);
		close(fd);
		return r;
	}
	if (chmod(cfg->socket_path, cfg->socket_mode) < 0 ||
	    (gid != (gid_t)-1 && chown(cfg->socket_path, (uid_t)-1, gid) < 0)) {
		r = log_error_errno(errno, "cannot set the mode or group of %s", cfg->socket_path);
		close(fd);
		unlink(cfg->socket_path);
		return r;
	}
	if (listen(fd, 256) < 0) {
		r = log_error_errno(errno, "listen");
		close(fd);
		unlink(cfg->socket_path);
		return r;
	}
	d->listen.fd = fd;
	d->listen.fn = on_listen;
	r = ev_add(&d->loop, &d->listen, EPOLLIN);
	if (r < 0) {
		d->listen.fd = -1;
		log_error_errno(r, "epoll_ctl");
		close(fd);
		unlink(cfg->socket_path);
		return r;
	}
	log_info("listening on %s (mode %04o%s%s)", cfg->socket_path, cfg->socket_mode,
		 cfg->socket_group[0] ? ", group " : "", cfg->socket_group);
	return 0;
}

void server_unlisten(struct daemon *d)
{
	if (d->listen.fd >= 0) {
		ev_del(&d->loop, &d->listen);
		close(d->listen.fd);
		unlink(d->cfg->socket_path);
		d->listen.fd = -1;
	}
	if (d->lock_fd >= 0) {
		close(d->lock_fd);
		d->lock_fd = -1;
	}
}

/*
 * The peer's supplementary groups as the kernel captured them at connect()
 * (SO_PEERGROUPS, like SO_PEERCRED's uid and gid), never read later from
 * /proc/PID: by then the pid may belong to another process.  The count,
 * or -errno.  *@ret_groups is malloc'd when the peer has groups.
 */
static int peer_groups(int fd, gid_t **ret_groups)
{
	socklen_t len = 64 * sizeof(gid_t);
	gid_t *g = NULL;

	for (;;) {
		gid_t *n = realloc(g, len ? len : sizeof(gid_t));

		if (!n) {
			free(g);
			return -ENOMEM;
		}
		g = n;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) == 0)
			break;
		if (errno != ERANGE) {
			int err = errno;

			free(g);
			return -err;
		}
		/* len now says how much the groups need. */
	}
	*ret_groups = g;
	return (int)(len / sizeof(gid_t));
}

static bool listed(const struct id_list *l, uint32_t id)
{
	for (unsigned i = 0; i < l->n; i++)
		if (l->ids[i] == id)
			return true;
	return false;
}

bool server_peer_allowed(struct daemon *d, uid_t uid, gid_t gid, const gid_t *groups,
			 unsigned ngroups)
{
	const struct kvs_config *cfg = d->cfg;

	if (cfg->allow_uids.n == 0 && cfg->allow_gids.n == 0)
		return true; /* no list: the socket's file mode decides */
	if (uid == 0 || uid == geteuid())
		return true;
	if (listed(&cfg->allow_uids, uid) || listed(&cfg->allow_gids, gid))
		return true;
	for (unsigned i = 0; i < ngroups; i++)
		if (listed(&cfg->allow_gids, groups[i]))
			return true;
	return false;
}

/* Credentials and the allow-list verdict, as the kernel captured them at connect(). */
static int peer_check(struct daemon *d, int fd, struct ucred *ret_cred, bool *ret_allowed)
{
	socklen_t len = sizeof(*ret_cred);
	gid_t *groups = NULL;
	int n = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, ret_cred, &len) < 0)
		return -errno;
	if (d->cfg->allow_gids.n) {
		n = peer_groups(fd, &groups);
		if (n < 0) {
			/* Fail closed: only the primary group counts. */
			log_at_rl(&d->accept_rl, "accept", LOG_WARNING, n, NULL,
				  "SO_PEERGROUPS: the peer's supplementary groups are ignored");
			n = 0;
		}
	}
	*ret_allowed = server_peer_allowed(d, ret_cred->uid, ret_cred->gid, groups, (unsigned)n);
	free(groups);
	return 0;
}

void server_resume(struct daemon *d)
{
	if (!d->accept_paused || d->listen.fd < 0)
		return;
	if (ev_mod(&d->loop, &d->listen, EPOLLIN) == 0)
		d->accept_paused = false;
}

/*
 * Out of fds (or kernel memory): the pending connection stays in the
 * backlog and the listening socket stays readable, so trying again at
 * once would spin.  Rest it until the next tick (100 ms): the connection
 * waits in the backlog, nothing is lost, and the loop keeps serving.
 */
static void pause_accept(struct daemon *d, int err)
{
	log_at_rl(&d->accept_rl, "accept", LOG_WARNING, err, NULL,
		  "cannot accept connections (%u sessions); retrying at the next tick",
		  d->nr_sessions);
	if (ev_mod(&d->loop, &d->listen, 0) == 0)
		d->accept_paused = true;
}

#define ACCEPT_BATCH 64 /* then let the loop serve the sessions it has */

void server_accept(struct daemon *d)
{
	for (unsigned i = 0; i < ACCEPT_BATCH && d->listen.fd >= 0; i++) {
		struct ucred cred;
		struct session *s;
		bool allowed = false;
		int fd = accept4(d->listen.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), r;

		if (fd < 0) {
			int err = errno;

			if (err == EINTR || err == ECONNABORTED)
				continue;
			if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
				pause_accept(d, err);
			else if (err != EAGAIN)
				log_at_rl(&d->accept_rl, "accept", LOG_WARNING, err, NULL,
					  "accept");
			return;
		}
		r = peer_check(d, fd, &cred, &allowed);
		if (r < 0) {
			log_at_rl(&d->accept_rl, "accept", LOG_WARNING, r, NULL, "SO_PEERCRED");
			close(fd);
			continue;
		}
		s = session_new(d, fd, cred.pid, cred.uid, cred.gid);
		if (!s) {
			log_at_rl(&d->accept_rl, "accept", LOG_ERR, ENOMEM, NULL,
				  "cannot accept a session");
			close(fd);
			continue;
		}
		s->peer_allowed = allowed;
		r = slots_accept(&d->slots, &s->sl, s->uid, s->prefix, s->created_ns);
		if (r < 0) {
			session_close(s, r);
			continue;
		}
		r = ev_add(&d->loop, &s->ev, EPOLLIN | EPOLLRDHUP);
		if (r < 0) {
			clog_warning_errno(&s->sl, r, "epoll_ctl");
			session_close(s, r);
			continue;
		}
		/*
		 * libkvstash sends its HELLO right after connect(), so it is
		 * usually here already: handle it now, before more connections
		 * are accepted, so that a flood of others cannot push this one
		 * out of the handshake pool first.
		 */
		r = session_handle_input(s);
		if (r < 0)
			session_close(s, r);
	}
}
