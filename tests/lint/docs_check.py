"""What the README and the guides show can be run as shown:
- every `cudasnap COMMAND --option` in a shell block names a command and
  options that COMMAND's --help defines (cuda-checkpoint's for
  `cuda-checkpoint`);
- every YAML block parses, and each object in it is of a kind of the
  Kubernetes API these guides use, with the fields of that kind's schema
  (the fields of the API reference for Pod, Container, Volume, RuntimeClass
  and the rest of what the guides write: a misspelt or misplaced field is
  an error the API server would answer the user with);
- every TOML block parses.

Usage: docs_check.py SOURCE_ROOT CUDASNAP"""
import glob
import os
import re
import shlex
import subprocess
import sys

import yaml

try:
    import tomllib  # Python 3.11
except ImportError:
    tomllib = None

from lintutil import report

# The fields of the Kubernetes API objects (core/v1, node.k8s.io/v1,
# apps/v1) that a manifest may set, per type: the API reference's.
OBJECT_META = {"name", "namespace", "labels", "annotations", "generateName", "ownerReferences", "finalizers"}
CONTAINER = {"name", "image", "command", "args", "workingDir", "ports", "env", "envFrom", "resources",
             "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
             "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin",
             "stdinOnce", "tty", "restartPolicy", "resizePolicy"}
POD_SPEC = {"containers", "initContainers", "ephemeralContainers", "volumes", "restartPolicy",
            "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
            "serviceAccountName", "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC",
            "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname", "subdomain", "affinity",
            "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority", "dnsConfig",
            "readinessGates", "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead",
            "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates",
            "resourceClaims", "resources"}
VOLUME_SOURCES = {"hostPath", "emptyDir", "configMap", "secret", "persistentVolumeClaim", "projected",
                  "downwardAPI", "csi", "ephemeral", "image"}
SCHEMAS = {
    "Container": CONTAINER,
    "PodSpec": POD_SPEC,
    "Volume": {"name"} | VOLUME_SOURCES,
    "VolumeMount": {"name", "mountPath", "readOnly", "subPath", "subPathExpr", "mountPropagation",
                    "recursiveReadOnly"},
    "HostPath": {"path", "type"},
    "EnvVar": {"name", "value", "valueFrom"},
    "Resources": {"limits", "requests", "claims"},
    "SecurityContext": {"privileged", "capabilities", "runAsUser", "runAsGroup", "runAsNonRoot",
                        "readOnlyRootFilesystem", "allowPrivilegeEscalation", "procMount", "seccompProfile",
                        "seLinuxOptions", "appArmorProfile", "windowsOptions"},
}
KINDS = {
    ("v1", "Pod"): {"apiVersion", "kind", "metadata", "spec"},
    ("node.k8s.io/v1", "RuntimeClass"): {"apiVersion", "kind", "metadata", "handler", "overhead", "scheduling"},
    ("apps/v1", "DaemonSet"): {"apiVersion", "kind", "metadata", "spec"},
    ("apps/v1", "Deployment"): {"apiVersion", "kind", "metadata", "spec"},
    ("v1", "Namespace"): {"apiVersion", "kind", "metadata", "spec"},
    ("v1", "ConfigMap"): {"apiVersion", "kind", "metadata", "data", "binaryData", "immutable"},
}
WORKLOAD_SPEC = {"selector", "template", "updateStrategy", "minReadySeconds", "revisionHistoryLimit", "replicas",
                 "strategy", "progressDeadlineSeconds", "paused"}


def fields(where, obj, schema, bad):
    if not isinstance(obj, dict):
        bad.append(f"{where}: not a mapping")
        return
    for k in sorted(set(obj) - SCHEMAS.get(schema, set()) if schema in SCHEMAS else set()):
        bad.append(f"{where}: field {k!r} is not one of {schema}")


def check_pod_spec(where, spec, bad, part=False):
    """part: a part of a pod's spec, whose containers are named, not
    whole."""
    fields(where, spec, "PodSpec", bad)
    if not isinstance(spec, dict):
        return
    if not spec.get("containers") and not part:
        bad.append(f"{where}: a pod without containers")
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(kind) or []):
            w = f"{where}.{kind}[{i}]"
            fields(w, c, "Container", bad)
            if isinstance(c, dict):
                for need in ("name",) if part else ("name", "image"):
                    if need not in c:
                        bad.append(f"{w}: no {need}")
                for j, m in enumerate(c.get("volumeMounts") or []):
                    fields(f"{w}.volumeMounts[{j}]", m, "VolumeMount", bad)
                for j, e in enumerate(c.get("env") or []):
                    fields(f"{w}.env[{j}]", e, "EnvVar", bad)
                if "resources" in c:
                    fields(f"{w}.resources", c["resources"], "Resources", bad)
                if "securityContext" in c:
                    fields(f"{w}.securityContext", c["securityContext"], "SecurityContext", bad)
    for i, v in enumerate(spec.get("volumes") or []):
        fields(f"{where}.volumes[{i}]", v, "Volume", bad)
        if isinstance(v, dict) and "hostPath" in v:
            fields(f"{where}.volumes[{i}].hostPath", v["hostPath"], "HostPath", bad)


def check_object(where, obj, bad):
    if obj is None:
        return
    if not isinstance(obj, dict) or "apiVersion" not in obj or "kind" not in obj:
        bad.append(f"{where}: not a Kubernetes object (apiVersion and kind)")
        return
    key = (obj["apiVersion"], obj["kind"])
    if key not in KINDS:
        bad.append(f"{where}: {key} is not a kind this check knows: add its schema")
        return
    for k in sorted(set(obj) - KINDS[key]):
        bad.append(f"{where}: {obj['kind']} has no field {k!r}")
    meta = obj.get("metadata") or {}
    for k in sorted(set(meta) - OBJECT_META):
        bad.append(f"{where}: metadata has no field {k!r}")
    for k, v in (meta.get("annotations") or {}).items():
        if not isinstance(v, str):
            bad.append(f"{where}: annotation {k} is not a string ({v!r})")
    spec = obj.get("spec")
    if obj["kind"] == "Pod":
        check_pod_spec(f"{where}.spec", spec, bad)
    elif obj["kind"] in ("DaemonSet", "Deployment"):
        for k in sorted(set(spec or {}) - WORKLOAD_SPEC):
            bad.append(f"{where}: {obj['kind']} spec has no field {k!r}")
        template = (spec or {}).get("template") or {}
        check_pod_spec(f"{where}.spec.template.spec", template.get("spec"), bad)


def blocks(path):
    """(language, first line number, text) of each fenced block."""
    out, lang, start, buf, indent = [], None, 0, [], 0
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"^(\s*)(?:```|~~~)(\w*)\s*$", line)
        if m and lang is None:
            lang, start, buf, indent = m.group(2) or "text", n + 1, [], len(m.group(1))
            lang = {"yml": "yaml", "shell": "sh", "console": "sh", "bash": "sh"}.get(lang, lang)
        elif m:
            out.append((lang, start, "".join(buf)))
            lang = None
        elif lang is not None:
            # a block inside a list item is indented as its fence is
            buf.append(line[indent:] if line[:indent].isspace() else line)
    return out


def help_options(exe, cmd, cache):
    """Whether cmd is a command ("" the program itself), and the long and
    short options its --help defines."""
    if cmd not in cache:
        argv = [exe, cmd, "--help"] if cmd else [exe, "--help"]
        p = subprocess.run(argv, capture_output=True, text=True)
        text = p.stdout + p.stderr
        opts = set(re.findall(r"(?m)^\s*(?:-\w, )?(--[a-z][a-z-]*)", text))
        opts |= set(re.findall(r"(?m)^(--[a-z][a-z-]*)", text))
        opts |= set(re.findall(r"(?m)^\s*(-\w)[, ]", text)) | set(re.findall(r"\|(-\w)\b", text))
        cache[cmd] = (p.returncode == 0, opts)
    return cache[cmd]


def invocations(words):
    """The argument lists of cudasnap and cuda-checkpoint among words,
    wherever they stand (after sudo, env, exec, kubectl exec --, a prompt)
    and inside a quoted argument that runs one."""
    for i, w in enumerate(words):
        # the program by name or a path to it (bin/, sbin/, src/, ./), not
        # a directory such as /etc/cudasnap
        m = re.fullmatch(r"(?:.*(?:^|/)(?:s?bin|src|\.)/)?(cudasnap|cuda-checkpoint)", w)
        if m:
            yield m.group(1), words[i + 1:]
            return
        if " " in w and re.search(r"(^|[/ =\"'])(cudasnap|cuda-checkpoint)( |$)", w):
            try:
                yield from invocations(shlex.split(w.split("=", 1)[1] if re.match(r"^--?[\w-]+=", w) else w))
            except ValueError:
                pass


def check_one(where, prog, args, exe, cache, bad):
    if prog == "cuda-checkpoint":
        cmd, rest = "cuda-checkpoint", args
    else:
        i = 0
        while i < len(args) and args[i].startswith("-"):
            i += 1
        glob_ok, glob_opts = help_options(exe, "", cache)
        for o in args[:i]:
            if o.split("=")[0] not in glob_opts:
                bad.append(f"{where}: {o} is not an option of cudasnap ({' '.join(args)})")
        if i >= len(args) or args[i] in ("-h", "--help", "-V", "--version"):
            return
        cmd, rest = args[i], args[i + 1:]
    ok, opts = help_options(exe, cmd, cache)
    if not ok:
        bad.append(f"{where}: 'cudasnap {cmd}' is not a command ({' '.join(args)})")
        return
    if cmd == "run":
        return  # what follows is the program's
    for w in rest:
        o = w.split("=")[0]
        if w == "--":
            break
        if (o.startswith("--") or re.fullmatch(r"-[A-Za-z]", o)) and o not in opts:
            bad.append(f"{where}: {o} is not an option of 'cudasnap {cmd}' ({' '.join(args)})")


def check_commands(where, text, exe, cache, bad):
    text = re.sub(r"\\\n", " ", text)
    for line in text.splitlines():
        if re.match(r"^\s*#", line):
            continue  # a comment
        line = re.sub(r"^\s*\$ ", "", line)  # a prompt
        line = re.split(r"\s#\s", line)[0].strip()
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            for prog, args in invocations(words):
                check_one(where, prog, args, exe, cache, bad)


def main():
    root, exe = sys.argv[1], sys.argv[2]
    bad, cache, counts = [], {}, {"yaml": 0, "toml": 0, "sh": 0}
    for path in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        rel = os.path.relpath(path, root)
        for lang, line, text in blocks(path):
            where = f"{rel}:{line}"
            if lang == "yaml":
                counts["yaml"] += 1
                try:
                    docs = list(yaml.safe_load_all(text))
                except yaml.YAMLError as e:
                    bad.append(f"{where}: YAML does not parse: {e}")
                    continue
                if text.startswith("# in the pod's spec"):  # a part of a pod: its spec's fields
                    check_pod_spec(where, docs[0] if docs else None, bad, part=True)
                    continue
                for i, d in enumerate(docs):
                    check_object(f"{where} (object {i + 1})", d, bad)
            elif lang == "toml" and tomllib:
                counts["toml"] += 1
                try:
                    tomllib.loads(text)
                except tomllib.TOMLDecodeError as e:
                    bad.append(f"{where}: TOML does not parse: {e}")
            elif lang == "sh":
                counts["sh"] += 1
                check_commands(where, text, exe, cache, bad)
    print(f"{counts['yaml']} YAML, {counts['toml']} TOML and {counts['sh']} shell blocks")
    if not counts["yaml"] or not counts["sh"]:
        bad.append("no YAML or no shell block found: the extraction broke")
    return report(bad)


if __name__ == "__main__":
    sys.exit(main())
