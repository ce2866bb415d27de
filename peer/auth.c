/* SPDX-License-Identifier: MIT */
/* The cluster secret and the HMAC proofs (auth.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nettle/hmac.h>
#include <nettle/memops.h>

#include "common/why.h"
#include "peer/auth.h"


static const char label_server[] = "kvspeer-1 server";
static const char label_client[] = "kvspeer-1 client";

int peer_secret_load(const char *path, struct peer_secret *ret, char *why, size_t wl)
{
	uint8_t buf[PEER_SECRET_MAX + 1];
	struct stat st;
	size_t len = 0;
	int fd, r = 0;

	/* O_NOFOLLOW: the checks below must be about the file we read. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0) {
		r = -errno;
		WHY("cannot open the secret file %s: %s", path, strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		WHY("cannot stat %s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		WHY("the secret file %s is not a regular file", path);
		r = -EINVAL;
		goto out;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 077)) {
		WHY("the secret file %s must belong to uid %u with mode 0600 or 0400 (it is uid %u, "
		    "mode %04o)",
		    path, (unsigned)geteuid(), (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		r = -EPERM;
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			WHY("cannot read %s: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == sizeof(buf))
			break;
	}
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' ||
		       buf[len - 1] == '\t'))
		len--;
	if (len < PEER_SECRET_MIN || len > PEER_SECRET_MAX) {
		WHY("the secret in %s must be %u to %u bytes (it has %zu)", path, PEER_SECRET_MIN,
		    PEER_SECRET_MAX, len);
		r = -EINVAL;
		goto out;
	}
	memcpy(ret->key, buf, len);
	ret->len = len;
out:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return r;
}

void peer_secret_wipe(struct peer_secret *s)
{
	if (!s)
		return;
	explicit_bzero(s->key, sizeof(s->key));
	s->len = 0;
}

int peer_proof(const struct peer_secret *s, enum peer_side side, const void *hello, size_t hlen,
	       const void *reply, size_t rlen, uint8_t ret_mac[PW_MAC_SIZE])
{
	const char *label = side == PEER_SIDE_SERVER ? label_server : label_client;
	/* Label (NUL included, so no label is a prefix of a transcript), then both payloads. */
	uint8_t msg[sizeof(label_server) + 2 * PW_HELLO_MAX];
	struct hmac_sha256_ctx ctx;
	size_t n = 0;

	_Static_assert(sizeof(label_server) == sizeof(label_client), "labels");
	_Static_assert(PW_MAC_SIZE == SHA256_DIGEST_SIZE, "the proof is one HMAC-SHA256");
	if (hlen > PW_HELLO_MAX || rlen > PW_HELLO_MAX || !s->len)
		return -EINVAL;
	memcpy(msg, label, sizeof(label_server));
	n += sizeof(label_server);
	memcpy(msg + n, hello, hlen);
	n += hlen;
	memcpy(msg + n, reply, rlen);
	n += rlen;
	hmac_sha256_set_key(&ctx, s->len, s->key);
	hmac_sha256_update(&ctx, n, msg);
	hmac_sha256_digest(&ctx, PW_MAC_SIZE, ret_mac);
	/* The context holds the key's inner and outer pads. */
	explicit_bzero(&ctx, sizeof(ctx));
	return 0;
}

bool peer_proof_equal(const uint8_t a[PW_MAC_SIZE], const uint8_t b[PW_MAC_SIZE])
{
	return memeql_sec(a, b, PW_MAC_SIZE) != 0; /* constant time */
}

int peer_nonce(uint8_t ret[PW_NONCE_SIZE])
{
	size_t got = 0;

	while (got < PW_NONCE_SIZE) {
		ssize_t n = getrandom(ret + got, PW_NONCE_SIZE - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		got += (size_t)n;
	}
	return 0;
}
