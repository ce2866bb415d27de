/* SPDX-License-Identifier: MIT */
#include <stdlib.h>

#include "unit.h"

int main(void)
{
	const struct unit_suite *u = &unit_suite;
	Suite *s = suite_create(u->name);
	TCase *tc = tcase_create(u->name);
	SRunner *sr;
	int failed;

	if (u->setup || u->teardown)
		tcase_add_checked_fixture(tc, u->setup, u->teardown);
	if (u->timeout_s)
		tcase_set_timeout(tc, u->timeout_s);
	u->add_tests(tc);
	suite_add_tcase(s, tc);

	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
