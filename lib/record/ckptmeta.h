/* What a container engine writes beside CRIU's images in a checkpoint
 * archive, read for the container's name: config.dump (Podman's container
 * configuration; CRI-O's checkpoint metadata, read the same way by
 * checkpointctl) and spec.dump (the container's OCI runtime spec, whose
 * annotations name a Kubernetes pod). Untrusted input: anything that does
 * not parse, or holds more JSON than such a file has, is left out, never an
 * error. */
#ifndef CS_CKPTMETA_H
#define CS_CKPTMETA_H

#include <stdbool.h>
#include <stddef.h>

/* Either file is tens of KiB; a larger one is not a checkpoint's. */
#define CS_CKPTMETA_MAX (4u << 20)

typedef struct cs_ckpt_meta {
	char name[256]; /* config.dump "name": the container's (Podman, CRI-O) */
	char id[128]; /* config.dump "id" */
	char image[512]; /* config.dump "rootfsImageName" */
	char k8s_container[256]; /* spec.dump annotations: the Kubernetes container, pod and namespace */
	char pod[256];
	char pod_namespace[256];
} cs_ckpt_meta;

/* Fills what config.dump (buf, len bytes) gives; returns whether it is one
 * JSON object. Fields it lacks are left as they are. */
bool cs_ckpt_meta_config(const char *buf, size_t len, cs_ckpt_meta *m);
/* Fills what spec.dump's annotations give (CRI-O's io.kubernetes.* and
 * containerd's io.kubernetes.cri.*); returns whether it is one JSON object. */
bool cs_ckpt_meta_spec(const char *buf, size_t len, cs_ckpt_meta *m);
/* Whether m says anything. */
bool cs_ckpt_meta_any(const cs_ckpt_meta *m);

#endif
