/* Prints "at_secure=N cap_sys_ptrace=N": getauxval(AT_SECURE) and whether
 * CAP_SYS_PTRACE is in the effective set. test_secure_env.py runs a
 * file-capability copy of it to learn whether such a program really runs
 * privileged here: no_new_privs, a nosuid mount, a user namespace or a
 * bounding set without the capability each keep it from taking effect, and
 * no_new_privs still leaves AT_SECURE set. */
#include <linux/capability.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

static int has_ptrace(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = { { 0 } };
	if (syscall(SYS_capget, &hdr, data) != 0)
		return -1;
	return (data[CAP_TO_INDEX(CAP_SYS_PTRACE)].effective & CAP_TO_MASK(CAP_SYS_PTRACE)) != 0;
}

int main(void)
{
	printf("at_secure=%lu cap_sys_ptrace=%d\n", getauxval(AT_SECURE), has_ptrace());
	return 0;
}
