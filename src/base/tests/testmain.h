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

/*
 * The same for a program given one path on its command line (a fixtures
 * directory or a data file, which meson passes): it is put in path before
 * any case runs; without it the program prints its usage and exits 2.
 * Include <stdio.h> too.
 */
#define KN_TEST_MAIN_WITH_PATH(path, what, group_setup, group_teardown, ...) \
	int main(int argc, char **argv)                                      \
	{                                                                    \
		const struct CMUnitTest tests[] = {__VA_ARGS__};             \
									     \
		if (argc < 2) {                                              \
			fprintf(stderr, "usage: %s %s\n", argv[0], what);    \
			return 2;                                            \
		}                                                            \
		path = argv[1];                                              \
		return cmocka_run_group_tests(tests, group_setup,            \
					      group_teardown);               \
	}

#endif
