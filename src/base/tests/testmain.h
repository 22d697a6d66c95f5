/*
 * The main() of a unit test program, the same in every module: it runs
 * the program's cases (cmocka_unit_test() and its kin) as one group, with
 * the group's set-up and tear-down (NULL for none), and exits with the
 * number of cases that failed. Include it after <cmocka.h>.
 *
 *	KN_TEST_MAIN(NULL, NULL,
 *		cmocka_unit_test(test_one),
 *		cmocka_unit_test(test_two))
 */
#ifndef KN_BASE_TESTS_TESTMAIN_H
#define KN_BASE_TESTS_TESTMAIN_H

#define KN_TEST_MAIN(group_setup, group_teardown, ...)                      \
	int main(void)                                                      \
	{                                                                   \
		const struct CMUnitTest tests[] = {__VA_ARGS__};            \
		return cmocka_run_group_tests(tests, group_setup,           \
					      group_teardown);              \
	}

#endif
