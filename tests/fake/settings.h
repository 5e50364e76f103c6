/* The double's settings: FAKECUDA_* and CUDASNAP_DEV_DIR. */
#ifndef FAKECUDA_SETTINGS_H
#define FAKECUDA_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

/* Read when a setting is not in the environment. */
#define FC_SETTINGS_FILE "/etc/fakecuda.conf"

/* The value of name: the environment's, else the one of FC_SETTINGS_FILE
 * (copied into buf, cut to len - 1 bytes); NULL when neither sets it. The
 * file is read again at every call, as tests rewrite it between a dump and
 * a restore. */
const char *fc_setting(const char *name, char *buf, size_t len);

/* FAKECUDA_MIG: every GPU is in MIG mode (NVML says so; a device is an
 * instance, with a UUID and a name of its own). */
bool fc_mig_mode(void);

#endif
