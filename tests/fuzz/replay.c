/* Runs a fuzz target's LLVMFuzzerTestOneInput over files and directories of
 * inputs, without libFuzzer, so that any compiler (and the sanitizer build)
 * replays the committed corpus. Fails when no input was found at all, so
 * that a moved corpus is not a silent pass. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int run_file(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	struct stat sb;
	if (fstat(fd, &sb) < 0 || sb.st_size < 0) {
		close(fd);
		return -1;
	}
	size_t size = (size_t)sb.st_size, len = 0;
	uint8_t *data = malloc(size ? size : 1);
	if (!data)
		abort();
	while (len < size) {
		ssize_t r = read(fd, data + len, size - len);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	/* Exactly the file's bytes, as libFuzzer would pass them. */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact)
		abort();
	memcpy(exact, data, len);
	free(data);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int skip_hidden(const struct dirent *de)
{
	return de->d_name[0] != '.';
}

int main(int argc, char **argv)
{
	size_t ran = 0;
	int bad = 0;
	for (int i = 1; i < argc; i++) {
		struct stat sb;
		if (stat(argv[i], &sb) < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			bad = 1;
			continue;
		}
		if (!S_ISDIR(sb.st_mode)) {
			bad |= run_file(argv[i]) < 0;
			ran++;
			continue;
		}
		struct dirent **names;
		int n = scandir(argv[i], &names, skip_hidden, alphasort);
		if (n < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			bad = 1;
			continue;
		}
		for (int k = 0; k < n; k++) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
			if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
				bad |= run_file(path) < 0;
				ran++;
			}
			free(names[k]);
		}
		free(names);
	}
	printf("replayed %zu inputs\n", ran);
	return bad || ran == 0 ? 1 : 0;
}
