/* Reaching an interposer's control socket (lib/proc/park_find.c), as every
 * client of it does (the command line, the CRIU plugin, the hook, an
 * importer's interposer): the path the process names is followed inside
 * its root without links, and only the process itself may answer there.
 * Real processes listen on real sockets here: a target, a victim (another
 * process), and a target that changed its uid after it began to listen. */
#include "park_find.h"
#include "proc.h"
#include "testutil.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[64];
/* the listeners started, killed at teardown whatever happened */
static pid_t started[8];
static size_t nstarted;

/* A child that listens on dir/name (as uid, after it listens, when uid >=
 * 0) until it is killed. */
static pid_t listener(const char *name, int uid)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", dir, name);
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 8) != 0 ||
		    (uid >= 0 && setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0))
			_exit(1);
		if (write(p[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	char c;
	close(p[1]);
	started[nstarted++] = pid;
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void stop(pid_t pid)
{
	if (kill(pid, SIGKILL) == 0)
		waitpid(pid, NULL, 0);
}

/* dir/name, in one of a few buffers (two paths are used at once) */
static char *in_dir(const char *name)
{
	static char paths[4][128];
	static unsigned next;
	char *path = paths[next++ % 4];
	snprintf(path, 128, "%s/%s", dir, name);
	return path;
}

/* Connected: fd >= 0, closed here. */
static bool reaches(pid_t pid, const char *name)
{
	int fd = park_find_connect_path(pid, "/proc", in_dir(name), 2000);
	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

static void test_its_own_socket_is_reached(void **state)
{
	(void)state;
	pid_t t = listener("target.sock", -1);
	assert_true(reaches(t, "target.sock"));
	stop(t);
}

static void test_a_link_to_another_process_socket_is_not_followed(void **state)
{
	(void)state;
	pid_t t = listener("target.sock", -1), v = listener("victim.sock", -1);
	assert_int_equal(symlink(in_dir("victim.sock"), in_dir("link.sock")), 0);
	assert_int_equal(mkdir(in_dir("sub"), 0700), 0);
	assert_int_equal(symlink(dir, in_dir("dirlink")), 0);
	/* a symbolic link, at the end or on the way, or a way up */
	assert_false(reaches(t, "link.sock"));
	assert_false(reaches(t, "dirlink/victim.sock"));
	assert_false(reaches(t, "sub/../victim.sock"));
	/* a hard link is the victim's socket itself: its listener is not the target */
	assert_int_equal(link(in_dir("victim.sock"), in_dir("hard.sock")), 0);
	assert_false(reaches(t, "hard.sock"));
	/* nor is the target's socket another process's */
	assert_false(reaches(v, "target.sock"));
	assert_true(reaches(v, "victim.sock"));
	stop(t);
	stop(v);
}

static void test_a_listener_under_another_uid_is_not_the_process(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	/* it listened as root, and runs as nobody now: the socket's answers
	 * would come with root's credentials */
	pid_t t = listener("changed.sock", 65534);
	assert_false(reaches(t, "changed.sock"));
	stop(t);
}

/* Every file of a park is exactly its part: pieces dealt to files in turn,
 * the last piece shorter; the sizes add up to the bytes, and a byte more or
 * less in any file does not fit. */
static void test_the_files_of_a_park_are_exactly_their_parts(void **state)
{
	(void)state;
	const unsigned long long totals[] = {
		1, 4095, PARK_PIECE, PARK_PIECE + 1, 3 * PARK_PIECE - 512, 20 * PARK_PIECE + 12345
	};
	for (size_t k = 0; k < sizeof(totals) / sizeof(totals[0]); k++) {
		unsigned long long total = totals[k], sum = 0;
		unsigned n = (unsigned)(park_pieces(total) < PARK_FILES_MAX ? park_pieces(total) : PARK_FILES_MAX);
		for (unsigned f = 0; f < n; f++) {
			unsigned long long size = park_file_size(total, n, f);
			sum += size;
			assert_true(park_file_fits(size, total, n, f));
			assert_false(park_file_fits(size + 1, total, n, f));
			assert_false(park_file_fits(size - 1, total, n, f));
		}
		assert_int_equal(sum, total);
		assert_false(park_file_fits(0, total, n, n)); /* no file beyond the n */
	}
	/* 3 pieces of 32 MiB in 3 files, the last 512 bytes short */
	assert_int_equal(park_file_size(3 * PARK_PIECE - 512, 3, 2), PARK_PIECE - 512);
}

/* A thread's start time from its stat line, whatever its name holds; a
 * line cut inside the field, or too short, says none. */
static void test_a_start_time_is_read_past_any_name(void **state)
{
	(void)state;
	char self[512];
	FILE *f = fopen("/proc/self/stat", "r");
	assert_non_null(f);
	size_t n = fread(self, 1, sizeof(self), f);
	fclose(f);
	unsigned long long mine = 0;
	assert_int_equal(cs_proc_start_time("/proc", getpid(), &mine), 0);
	assert_int_equal(park_stat_start(self, n), mine);
	const char odd[] = "7 (a) b ) 1 2 3 4) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 1 2\n";
	assert_int_equal(park_stat_start(odd, strlen(odd)), 98765);
	const char *cut = strstr(odd, "98765");
	assert_int_equal(park_stat_start(odd, (size_t)(cut - odd) + 3), 0);
	assert_int_equal(park_stat_start(odd, (size_t)(cut - odd)), 0);
	assert_int_equal(park_stat_start("7 (x) S 1", 9), 0);
	assert_int_equal(park_stat_start("no name", 7), 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/cs-park-find-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	for (size_t i = 0; i < nstarted; i++)
		stop(started[i]);
	nstarted = 0;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_its_own_socket_is_reached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_link_to_another_process_socket_is_not_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_listener_under_another_uid_is_not_the_process, setup, teardown),
		cmocka_unit_test(test_the_files_of_a_park_are_exactly_their_parts),
		cmocka_unit_test(test_a_start_time_is_read_past_any_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
