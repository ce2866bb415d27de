/* SPDX-License-Identifier: MIT */
/*
 * libkvspeer's cluster secret, proofs and addresses (peer/auth.c,
 * peer/addr.c): a secret file anyone else can read or that is not ours is
 * refused, proofs bind both sides' bytes and keys and tell the two sides
 * apart, and the allow-list matches exactly its networks.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peer/addr.h"
#include "peer/auth.h"
#include "unit.h"

#define DIR_TEMPLATE "/tmp/kvspeer-auth.XXXXXX"
static char dir[sizeof(DIR_TEMPLATE)];

static const char *file(const char *name, const char *content, mode_t mode)
{
	static char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	close(fd);
	ck_assert_int_eq(chmod(path, mode), 0);
	return path;
}

static const char key32[] = "0123456789abcdef0123456789abcdef";

START_TEST(test_secret_file)
{
	struct peer_secret s = { 0 };
	char why[256], path[300];

	ck_assert_int_eq(peer_secret_load(file("ok", "0123456789abcdef0123456789abcdef\n", 0600),
					  &s, why, sizeof(why)),
			 0);
	/* Trailing whitespace is no part of the secret. */
	ck_assert_uint_eq(s.len, 32);
	ck_assert_int_eq(memcmp(s.key, key32, 32), 0);
	ck_assert_int_eq(peer_secret_load(file("ro", key32, 0400), &s, why, sizeof(why)), 0);
	/* Readable by the group or others: refused, and said so. */
	ck_assert_int_eq(peer_secret_load(file("g", key32, 0640), &s, why, sizeof(why)), -EPERM);
	ck_assert_ptr_nonnull(strstr(why, "0600"));
	ck_assert_int_eq(peer_secret_load(file("o", key32, 0604), &s, why, sizeof(why)), -EPERM);
	/* Too short (31 bytes), too long, missing, a directory, a symlink. */
	ck_assert_int_eq(peer_secret_load(file("short", key32 + 1, 0600), &s, why, sizeof(why)),
			 -EINVAL);
	{
		char *big = malloc(5000);

		memset(big, 'k', 4999);
		big[4999] = '\0';
		ck_assert_int_eq(peer_secret_load(file("long", big, 0600), &s, why, sizeof(why)),
				 -EINVAL);
		free(big);
	}
	snprintf(path, sizeof(path), "%s/none", dir);
	ck_assert_int_eq(peer_secret_load(path, &s, why, sizeof(why)), -ENOENT);
	ck_assert_int_eq(peer_secret_load(dir, &s, why, sizeof(why)), -EINVAL);
	snprintf(path, sizeof(path), "%s/link", dir);
	unlink(path);
	ck_assert_int_eq(symlink(file("target", key32, 0600), path), 0);
	snprintf(path, sizeof(path), "%s/link", dir);
	ck_assert_int_eq(peer_secret_load(path, &s, why, sizeof(why)), -ELOOP);
	/* Another user's file (as root we can make one). */
	if (geteuid() == 0) {
		const char *p = file("theirs", key32, 0600);

		ck_assert_int_eq(chown(p, 65534, 65534), 0);
		ck_assert_int_eq(peer_secret_load(p, &s, why, sizeof(why)), -EPERM);
	}
	peer_secret_wipe(&s);
	ck_assert_uint_eq(s.len, 0);
}
END_TEST

START_TEST(test_proofs)
{
	struct peer_secret k = { .len = 32 }, k2;
	uint8_t hello[192], reply[256], a[PW_MAC_SIZE], b[PW_MAC_SIZE];

	memcpy(k.key, key32, 32);
	k2 = k;
	k2.key[31] ^= 1;
	memset(hello, 1, sizeof(hello));
	memset(reply, 2, sizeof(reply));
	ck_assert_int_eq(
		peer_proof(&k, PEER_SIDE_SERVER, hello, sizeof(hello), reply, sizeof(reply), a), 0);
	ck_assert_int_eq(
		peer_proof(&k, PEER_SIDE_SERVER, hello, sizeof(hello), reply, sizeof(reply), b), 0);
	ck_assert(peer_proof_equal(a, b));
	/* The other side's proof of the same bytes differs: no reflection. */
	peer_proof(&k, PEER_SIDE_CLIENT, hello, sizeof(hello), reply, sizeof(reply), b);
	ck_assert(!peer_proof_equal(a, b));
	/* Any byte of either message, or of the key, changes it. */
	hello[100] ^= 1;
	peer_proof(&k, PEER_SIDE_SERVER, hello, sizeof(hello), reply, sizeof(reply), b);
	ck_assert(!peer_proof_equal(a, b));
	hello[100] ^= 1;
	reply[255] ^= 1;
	peer_proof(&k, PEER_SIDE_SERVER, hello, sizeof(hello), reply, sizeof(reply), b);
	ck_assert(!peer_proof_equal(a, b));
	reply[255] ^= 1;
	peer_proof(&k2, PEER_SIDE_SERVER, hello, sizeof(hello), reply, sizeof(reply), b);
	ck_assert(!peer_proof_equal(a, b));
	/* Moving a byte from one message to the other changes it too. */
	peer_proof(&k, PEER_SIDE_SERVER, hello, sizeof(hello) - 1, reply, sizeof(reply), a);
	peer_proof(&k, PEER_SIDE_SERVER, hello, sizeof(hello), reply, sizeof(reply) - 1, b);
	ck_assert(!peer_proof_equal(a, b));
	ck_assert_int_eq(peer_proof(&k, PEER_SIDE_SERVER, hello, PW_HELLO_MAX + 1, reply, 1, a),
			 -EINVAL);
	ck_assert_int_eq(peer_nonce(a), 0);
	ck_assert_int_eq(peer_nonce(b), 0);
	ck_assert(!peer_proof_equal(a, b));
}
END_TEST

/*
 * The proof is the protocol: HMAC-SHA256(secret, label NUL || hello ||
 * reply), the same bytes whichever library computes it (these were
 * computed with Python's hmac module), so peers built against another
 * crypto library still talk.
 */
START_TEST(test_proof_known_answer)
{
	static const uint8_t server[PW_MAC_SIZE] = {
		0xa2, 0x0b, 0x08, 0x8b, 0x8a, 0xd0, 0xb9, 0xc1, 0xb8, 0x91, 0x6b,
		0x38, 0x35, 0x74, 0xcd, 0xc0, 0xba, 0x4a, 0x07, 0xcf, 0xc1, 0xce,
		0x7c, 0x09, 0x7c, 0xb9, 0x90, 0xf7, 0x01, 0x75, 0x71, 0xcb,
	};
	static const uint8_t client[PW_MAC_SIZE] = {
		0x03, 0x1f, 0x74, 0x17, 0xfb, 0x8a, 0x21, 0x4a, 0x59, 0x7d, 0x14,
		0xa8, 0xc0, 0x86, 0xe5, 0xc2, 0x86, 0x62, 0x14, 0xb8, 0x68, 0x37,
		0xb8, 0xa2, 0xeb, 0xd4, 0x78, 0xda, 0x10, 0x0c, 0x3d, 0xee,
	};
	struct peer_secret k = { .len = 32 };
	uint8_t mac[PW_MAC_SIZE];

	for (unsigned i = 0; i < 32; i++)
		k.key[i] = (uint8_t)(i + 1);
	ck_assert_int_eq(peer_proof(&k, PEER_SIDE_SERVER, "hello", 5, "reply", 5, mac), 0);
	ck_assert_mem_eq(mac, server, PW_MAC_SIZE);
	ck_assert_int_eq(peer_proof(&k, PEER_SIDE_CLIENT, "hello", 5, "reply", 5, mac), 0);
	ck_assert_mem_eq(mac, client, PW_MAC_SIZE);
}
END_TEST

START_TEST(test_addresses)
{
	struct sockaddr_storage sa;
	socklen_t len;
	char s[64];

	ck_assert_int_eq(peer_addr_parse("10.1.2.3:7471", &sa, &len), 0);
	peer_addr_format((struct sockaddr *)&sa, s, sizeof(s));
	ck_assert_str_eq(s, "10.1.2.3:7471");
	ck_assert(!peer_addr_is_wildcard((struct sockaddr *)&sa));
	ck_assert_int_eq(peer_addr_parse("[fd00::5]:80", &sa, &len), 0);
	peer_addr_format((struct sockaddr *)&sa, s, sizeof(s));
	ck_assert_str_eq(s, "[fd00::5]:80");
	ck_assert_int_eq(peer_addr_parse("0.0.0.0:1", &sa, &len), 0);
	ck_assert(peer_addr_is_wildcard((struct sockaddr *)&sa));
	ck_assert_int_eq(peer_addr_parse("[::]:1", &sa, &len), 0);
	ck_assert(peer_addr_is_wildcard((struct sockaddr *)&sa));
	/* Numeric only, a port always, in range. */
	ck_assert_int_eq(peer_addr_parse("localhost:1", &sa, &len), -EINVAL);
	ck_assert_int_eq(peer_addr_parse("10.1.2.3", &sa, &len), -EINVAL);
	ck_assert_int_eq(peer_addr_parse("10.1.2.3:", &sa, &len), -EINVAL);
	ck_assert_int_eq(peer_addr_parse("10.1.2.3:65536", &sa, &len), -EINVAL);
	ck_assert_int_eq(peer_addr_parse("10.1.2.3:-1", &sa, &len), -EINVAL);
	ck_assert_int_eq(peer_addr_parse("fd00::5:80", &sa, &len), -EINVAL);
	ck_assert_int_eq(peer_addr_parse("[fd00::5]80", &sa, &len), -EINVAL);
}
END_TEST

static bool match(const struct peer_allow *a, const char *ip)
{
	struct sockaddr_storage sa = { 0 };

	if (strchr(ip, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;

		in6->sin6_family = AF_INET6;
		ck_assert_int_eq(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&sa;

		in->sin_family = AF_INET;
		ck_assert_int_eq(inet_pton(AF_INET, ip, &in->sin_addr), 1);
	}
	return peer_allow_match(a, (struct sockaddr *)&sa);
}

START_TEST(test_allow_list)
{
	struct peer_allow a;
	char why[128];

	ck_assert_int_eq(peer_allow_parse("10.1.0.0/24, 10.2.0.7 fd00::/64", &a, why, sizeof(why)),
			 0);
	ck_assert_uint_eq(a.n, 3);
	ck_assert(match(&a, "10.1.0.0"));
	ck_assert(match(&a, "10.1.0.255"));
	ck_assert(!match(&a, "10.1.1.0"));
	ck_assert(!match(&a, "10.0.255.255"));
	ck_assert(match(&a, "10.2.0.7"));
	ck_assert(!match(&a, "10.2.0.8"));
	ck_assert(match(&a, "fd00::1"));
	ck_assert(!match(&a, "fd00:0:0:1::1"));
	/* An IPv4 peer on a dual-stack socket: its mapped address matches the IPv4 network. */
	ck_assert(match(&a, "::ffff:10.1.0.9"));
	ck_assert(!match(&a, "::ffff:10.3.0.9"));
	ck_assert_int_eq(peer_allow_parse("10.1.0.0/21", &a, why, sizeof(why)), 0);
	ck_assert(match(&a, "10.1.7.255"));
	ck_assert(!match(&a, "10.1.8.0"));
	ck_assert_int_eq(peer_allow_parse("", &a, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(peer_allow_parse("10.1.0.0/33", &a, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(peer_allow_parse("10.1.0.0/", &a, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(peer_allow_parse("host.example", &a, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(peer_allow_parse("fd00::/129", &a, why, sizeof(why)), -EINVAL);
}
END_TEST

/* Each test gets a directory of its own, removed with what it holds. */
static void setup(void)
{
	strcpy(dir, DIR_TEMPLATE);
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void teardown(void)
{
	nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

UNIT_TESTS(test_secret_file, test_proofs, test_proof_known_answer, test_addresses, test_allow_list)

const struct unit_suite unit_suite = {
	.name = "peer-auth",
	.setup = setup,
	.teardown = teardown,
	.add_tests = add_tests,
};
