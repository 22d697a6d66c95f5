/*
 * What several modules' unit tests share: a fresh directory under /tmp
 * for the files a test writes. Linked through test_dir_dep.
 */
#ifndef KN_BASE_TESTS_TESTDIR_H
#define KN_BASE_TESTS_TESTDIR_H

/* A new empty directory /tmp/kn-NAME-XXXXXX; the caller removes it
 * (kn_rm_rf) and frees the name. Fails the running test if none. */
char *kn_test_dir(const char *name);

#endif
