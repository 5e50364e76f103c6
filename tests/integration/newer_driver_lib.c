/* A library built against a newer driver than the one installed: it calls a
 * driver function the test double lacks (cuArrayCreate_v2). Left undefined
 * here, as a library linked with -lcuda of another driver leaves it. */
typedef int CUresult;
CUresult cuArrayCreate_v2(void *array, const void *desc);
int newer_driver_call(void);
int newer_driver_call(void)
{
	return cuArrayCreate_v2(0, 0);
}
