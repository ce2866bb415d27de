/* SPDX-License-Identifier: MIT */
/*
 * The cluster secret and the challenge-response built on it.
 *
 * Both sides prove that they hold the secret without sending it: each
 * picks a fresh 32-byte nonce, and each proof is an HMAC-SHA256 (nettle,
 * the library the registry's digests use too) over a label naming the side and the handshake's bytes, which
 * carry both nonces and both names (pwire.h).  A proof is compared in
 * constant time.
 */
#ifndef KVS_PEER_AUTH_H
#define KVS_PEER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peer/pwire.h"

#define PEER_SECRET_MIN 32u
#define PEER_SECRET_MAX 4096u

struct peer_secret {
	size_t len;
	uint8_t key[PEER_SECRET_MAX];
};

enum peer_side { PEER_SIDE_SERVER, PEER_SIDE_CLIENT };

/*
 * Read the secret from @path: a regular file (no symlink) owned by the
 * effective uid, no group or other permission bits, PEER_SECRET_MIN ..
 * PEER_SECRET_MAX bytes once trailing whitespace is dropped.  0, -EPERM
 * (ownership or mode), -EINVAL (size, not a regular file) or the open's
 * -errno; @why says which.
 */
int peer_secret_load(const char *path, struct peer_secret *ret, char *why, size_t wl);

/* Overwrite the key (explicit_bzero: not optimised away). */
void peer_secret_wipe(struct peer_secret *s);

/*
 * The proof of @side over the client's HELLO payload (@hello, @hlen) and
 * the server's HELLO_REPLY payload (@reply, @rlen).  For the server's
 * proof the caller zeroes the reply's proof field first.  0, or -EINVAL
 * (a payload longer than PW_HELLO_MAX, no secret).
 */
int peer_proof(const struct peer_secret *s, enum peer_side side, const void *hello, size_t hlen,
	       const void *reply, size_t rlen, uint8_t ret_mac[PW_MAC_SIZE]);

/* Constant-time comparison of two proofs. */
bool peer_proof_equal(const uint8_t a[PW_MAC_SIZE], const uint8_t b[PW_MAC_SIZE]);

/* A fresh nonce (getrandom).  0 or -errno. */
int peer_nonce(uint8_t ret[PW_NONCE_SIZE]);

#endif /* KVS_PEER_AUTH_H */
