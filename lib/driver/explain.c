#include "explain.h"
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *cs_call_name(cs_call c)
{
	static const char *const names[] = {
		"get-state", "get-restore-tid", "lock", "checkpoint", "restore", "unlock", "cuInit",
	};
	return (size_t)c < CS_ARRAY_SIZE(names) ? names[c] : "call";
}

#define HINT_HOST_PID \
	"This PID does not exist in this PID namespace. nvidia-smi and NVML report host " \
	"PIDs, which mean nothing inside a container or sandbox: run 'cudasnap ps' here to see the PIDs " \
	"the driver accepts, or call cudasnap without --pid to act on every CUDA process."
#define HINT_PTRACE \
	"The driver refuses targets the caller may not trace. Run cudasnap as root or " \
	"with CAP_SYS_PTRACE (same user is not enough when ptrace is restricted)."
#define HINT_GVISOR \
	"Under gVisor the driver needs system calls that old runsc releases lack. " \
	"Use a runsc release from 2025 or later with nvproxy, or run cudasnap from the save/restore hook."
#define HINT_FORKED \
	"This process was forked from a CUDA process without exec (the PyTorch " \
	"DataLoader shape): it holds the parent's device files but the driver cannot checkpoint it. " \
	"Workers made with multiprocessing_context=\"spawn\" or \"forkserver\", or started before CUDA " \
	"is initialized, can be checkpointed: pass DataLoader(..., multiprocessing_context=\"spawn\"), " \
	"or stop such workers before checkpointing (persistent_workers=False, or num_workers=0)."
#define HINT_NOT_CUDA \
	"The driver does not know this process: it never initialized CUDA, or not yet. " \
	"Only processes listed as 'cuda' by 'cudasnap ps' can be checkpointed."
#define HINT_DEVICE_HOLDER \
	"This process opened GPU device files itself without the CUDA driver's " \
	"checkpoint support (or was forked after CUDA init); the driver cannot checkpoint it. Stop it " \
	"before the snapshot, or have it close its /dev/nvidia* files."
#define HINT_SUPPORT \
	"The driver cannot checkpoint processes that use UVM managed memory, MIG, MPS, " \
	"or CUDA IPC / NCCL / P2P between processes. Run 'cudasnap doctor' to see which applies."
#define HINT_PERSIST \
	"Restore needs persistence mode on the GPUs (nvidia-smi -pm 1, or " \
	"nvidia-persistenced) or a cuInit in the caller; cudasnap calls cuInit itself unless " \
	"--no-init is given. Check 'cudasnap doctor'."
#define HINT_OOM \
	"The GPU has not enough free memory for this process's checkpointed data. " \
	"Free GPU memory (stop other processes) or restore onto another GPU with --device-map. A restore " \
	"that fails for lack of memory can leave the process unrestorable."

#define HINT_UNRESTORABLE \
	"The driver refuses to restore this process, and does so at every try: it imported device memory " \
	"from another process (CUDA IPC: cudaIpcOpenMemHandle, as torch.multiprocessing shares CUDA tensors, " \
	"or a shared VMM handle), which the driver checkpoints but cannot restore. Its GPU state is lost: " \
	"restart the process. Where /proc shows the import (the torch.multiprocessing shape), cudasnap " \
	"refuses the checkpoint unless told otherwise (--allow-unrestorable)."

/* The state each call needs the process in. */
static int needed_state(cs_call call)
{
	switch (call) {
	case CS_CALL_LOCK: return CS_STATE_RUNNING;
	case CS_CALL_RESTORE: return CS_STATE_CHECKPOINTED;
	default: return CS_STATE_LOCKED; /* checkpoint, unlock */
	}
}

static void hint_for(const cs_explain_ctx *c, int res, char *hint, size_t n)
{
	const char *h = "";
	switch (res) {
	case CS_CU_OPERATING_SYSTEM:
		if (!c->pid_visible)
			h = HINT_HOST_PID;
		else if (c->gvisor)
			h = HINT_GVISOR;
		else if (geteuid() != 0)
			h = HINT_PTRACE;
		else
			h = "The process may have exited during the call, or the driver could not reach it.";
		break;
	case CS_CU_NOT_INITIALIZED:
		h = c->forked_child                      ? HINT_FORKED :
			c->cls == CS_CLASS_DEVICE_HOLDER ? HINT_DEVICE_HOLDER :
							   HINT_NOT_CUDA;
		break;
	case CS_CU_NOT_READY:
		snprintf(hint, n,
			 "The lock waited %u ms for running GPU work (a long kernel) to finish. "
			 "Raise --timeout (milliseconds; 0 waits forever) or checkpoint between kernels.",
			 c->timeout_ms);
		return;
	case CS_CU_ILLEGAL_STATE:
		if (!cs_state_name(c->state)) {
			h = "The process is not in the state this step needs. Run 'cudasnap ps' to see its state.";
			break;
		}
		snprintf(hint, n,
			 "The process is %s, and %s needs it %s. Run 'cudasnap ps' and use the command "
			 "that matches its state.",
			 cs_state_name(c->state), cs_call_name(c->call), cs_state_name(needed_state(c->call)));
		return;
	case CS_CU_NOT_SUPPORTED:
		h = c->call == CS_CALL_RESTORE && !c->mapped ? HINT_UNRESTORABLE : HINT_SUPPORT;
		break;
	case CS_CU_NOT_PERMITTED: h = c->call == CS_CALL_RESTORE ? HINT_PERSIST : HINT_PTRACE; break;
	case CS_CU_OUT_OF_MEMORY:
		h = c->call == CS_CALL_RESTORE ?
			HINT_OOM :
			"The host has not enough memory for this process's GPU memory; free host memory.";
		break;
	case CS_CU_INVALID_VALUE:
		if (c->call != CS_CALL_RESTORE)
			h = "The driver rejected the call's arguments.";
		else if (c->mapped)
			h = "The device map names a GPU the driver does not know, or does not cover every GPU the "
			    "process can see. Run 'cudasnap doctor' for the GPU list; a restore without the map "
			    "still brings it back onto its own GPUs.";
		else
			h = HINT_UNRESTORABLE;
		break;
	case CS_CU_TIMED_OUT:
	case CS_CU_INTERRUPTED:
		snprintf(hint, n,
			 "%s; the call may still complete inside the process. Once it runs again, "
			 "'cudasnap ps' shows its state: 'cudasnap restore --pid %d' returns a checkpointed process, "
			 "'cudasnap unlock --pid %d' a locked one.%s",
			 res == CS_CU_TIMED_OUT ?
				 "The driver did not answer in time: the process may be stopped, frozen, or moving much "
				 "memory" :
				 "A signal ended the command while the driver worked on this process",
			 (int)c->pid, (int)c->pid,
			 res == CS_CU_TIMED_OUT && (c->call == CS_CALL_CHECKPOINT || c->call == CS_CALL_RESTORE) ?
				 " Raise --step-timeout for very large processes." :
				 "");
		return;
	default: h = "Run 'cudasnap doctor' and check the kernel log (dmesg) for NVIDIA driver messages.";
	}
	snprintf(hint, n, "%s", h);
}

int cs_explain(const cs_driver *d, const cs_explain_ctx *c, int res, cs_error *err)
{
	if (!err)
		return -CS_EDRIVER;
	err->status = CS_EDRIVER;
	err->cu = res;
	err->sys = 0;
	char who[128];
	snprintf(who, sizeof(who), "process %d%s%s%s", (int)c->pid, c->comm ? " (" : "", c->comm ? c->comm : "",
		 c->comm ? ")" : "");
	const char *what = "";
	if (res == CS_CU_OPERATING_SYSTEM && !c->pid_visible)
		what = ": no such process in this PID namespace";
	else if (res == CS_CU_NOT_INITIALIZED)
		what = c->forked_child ? ": it was forked from a CUDA process without exec" :
					 ": the driver does not know it as a CUDA process";
	else if (res == CS_CU_NOT_READY && c->call == CS_CALL_LOCK)
		what = ": timed out behind running GPU work";
	else if (res == CS_CU_TIMED_OUT)
		what = ": no answer, cudasnap stopped waiting";
	else if (res == CS_CU_INTERRUPTED)
		what = ": interrupted";
	snprintf(err->message, sizeof(err->message), "%s of %s failed: %s (%s, %d)%s", cs_call_name(c->call), who,
		 cs_cu_string(d, res), cs_cu_name(d, res), res, what);
	hint_for(c, res, err->hint, sizeof(err->hint));
	return -CS_EDRIVER;
}
