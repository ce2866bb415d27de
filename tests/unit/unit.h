/* SPDX-License-Identifier: MIT */
/*
 * The Check unit tests share one main() (tests/unit/unit-main.c, linked
 * from libunit.la): a test program defines its START_TEST functions, lists
 * them with UNIT_TESTS() and defines one `unit_suite`, and the main runs
 * them as one test
 * case, each test in a child process of its own (unless CK_FORK=no), with
 * the output Check's CK_VERBOSITY asks for.  The exit status is that of
 * an automake test: 0 when every test passed, 1 otherwise.
 */
#ifndef KVS_TEST_UNIT_H
#define KVS_TEST_UNIT_H

#include <check.h>
#include <stddef.h>

struct unit_suite {
	const char *name;	      /* of the suite and of its test case */
	void (*setup)(void);	      /* a checked fixture around each test; may be NULL */
	void (*teardown)(void);	      /* may be NULL */
	unsigned timeout_s;	      /* per test; 0: Check's default (CK_DEFAULT_TIMEOUT) */
	void (*add_tests)(TCase *tc); /* tcase_add_test() (or _loop_test()) each test, in order */
};

/* Defined once by every unit test program. */
extern const struct unit_suite unit_suite;

/*
 * Defines add_tests() for a unit_suite: tcase_add_test() for each test
 * named, in order, e.g. UNIT_TESTS(test_a, test_b).
 */
#define UNIT_TESTS(...)                                                            \
	static void add_tests(TCase *tc)                                           \
	{                                                                          \
		const TTest *const tests_[] = { __VA_ARGS__ };                     \
		for (size_t i_ = 0; i_ < sizeof(tests_) / sizeof(tests_[0]); i_++) \
			tcase_add_test(tc, tests_[i_]);                            \
	}

#endif /* KVS_TEST_UNIT_H */
