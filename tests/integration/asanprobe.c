#include <stdio.h>
#include <stdlib.h>

/* A program built with AddressSanitizer, which refuses to start when a
 * preloaded library comes before its runtime unless told otherwise: prints
 * 'asan ok' once it runs. */
int main(void)
{
	char *p = malloc(16);
	if (p == NULL)
		return 1;
	p[0] = 0;
	free(p);
	puts("asan ok");
	return 0;
}
