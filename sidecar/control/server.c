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
#include "control/session.h"
#include "base/util.h"

#define HANDSHAKE_SLACK 64u /* connections beyond max_sessions still told why */

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

int server_listen(struct daemon *d)
{
	const struct kvs_config *cfg = d->cfg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct epoll_event ev = { .events = EPOLLIN };
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
	ev.data.ptr = &d->listen_fd;
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		r = log_error_errno(errno, "epoll_ctl");
		close(fd);
		unlink(cfg->socket_path);
		return r;
	}
	d->listen_fd = fd;
	log_info("listening on %s (mode %04o%s%s)", cfg->socket_path, cfg->socket_mode,
		 cfg->socket_group[0] ? ", group " : "", cfg->socket_group);
	return 0;
}

void server_unlisten(struct daemon *d)
{
	if (d->listen_fd >= 0) {
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, d->listen_fd, NULL);
		close(d->listen_fd);
		unlink(d->cfg->socket_path);
		d->listen_fd = -1;
	}
	if (d->lock_fd >= 0) {
		close(d->lock_fd);
		d->lock_fd = -1;
	}
}

unsigned server_active_sessions(struct daemon *d)
{
	struct session *s;
	unsigned n = 0;

	cds_list_for_each_entry(s, &d->sessions, node)
		n += s->state == S_ACTIVE && s->hello.role != KVS_ROLE_ADMIN;
	return n;
}

/* Supplementary groups of the peer, from /proc (the peer cannot forge them). */
static bool in_groups(pid_t pid, const struct id_list *gids)
{
	char path[64], line[4096];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *p, *end;

		if (strncmp(line, "Groups:", 7))
			continue;
		for (p = line + 7;; p = end) {
			unsigned long g = strtoul(p, &end, 10);

			if (end == p)
				break;
			for (unsigned i = 0; i < gids->n; i++)
				found |= gids->ids[i] == g;
		}
	}
	fclose(f);
	return found;
}

bool server_peer_allowed(struct daemon *d, pid_t pid, uid_t uid, gid_t gid)
{
	const struct kvs_config *cfg = d->cfg;

	if (cfg->allow_uids.n == 0 && cfg->allow_gids.n == 0)
		return true; /* no list: the socket's file mode decides */
	if (uid == 0 || uid == geteuid())
		return true;
	for (unsigned i = 0; i < cfg->allow_uids.n; i++)
		if (cfg->allow_uids.ids[i] == uid)
			return true;
	for (unsigned i = 0; i < cfg->allow_gids.n; i++)
		if (cfg->allow_gids.ids[i] == gid)
			return true;
	return cfg->allow_gids.n && in_groups(pid, &cfg->allow_gids);
}

void server_accept(struct daemon *d)
{
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
		struct session *s;
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_warning_errno(errno, "accept");
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;
		}
		if (d->nr_sessions >= d->cfg->max_sessions + HANDSHAKE_SLACK) {
			/* Not even room to say why: the client sees EOF at HELLO. */
			STAT_ADD(d, sessions_refused, 1);
			close(fd);
			continue;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
			log_warning_errno(errno, "SO_PEERCRED");
			close(fd);
			continue;
		}
		s = session_new(d, fd, cred.pid, cred.uid, cred.gid);
		if (!s) {
			log_error_errno(ENOMEM, "cannot accept a session");
			close(fd);
			continue;
		}
		ev.data.ptr = s;
		if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			log_error_errno(errno, "epoll_ctl");
			session_close(s, -errno);
		}
	}
}
