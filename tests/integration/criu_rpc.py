"""A minimal client of CRIU's RPC, as container engines use it: runc (under
containerd, CRI-O and Podman) starts `criu swrk 3` on one end of a
SOCK_SEQPACKET socket pair and sends one criu_req; crun does the same
through libcriu. The CRIU process then has `criu swrk <fd>` for its command
line and none of the request's options, which is what a plugin that looks at
/proc/self/cmdline sees under an engine.

The messages are protobuf (images/rpc.proto of CRIU v4.2), encoded and
decoded here by hand: varints and length-delimited fields are all a request
needs, and the tests then depend on no protobuf library.

    dump(criu, pid, images_dir, leave_running=True) -> RpcResult
    restore(criu, images_dir) -> RpcResult
    request(criu, "VERSION") -> RpcResult (the decoded criu_resp in .fields)
"""
import os
import socket
import subprocess
import tempfile
import time

# criu_req_type
REQ_TYPES = {"EMPTY": 0, "DUMP": 1, "RESTORE": 2, "CHECK": 3, "PRE_DUMP": 4, "PAGE_SERVER": 5,
             "NOTIFY": 6, "CPUINFO_DUMP": 7, "CPUINFO_CHECK": 8, "FEATURE_CHECK": 9, "VERSION": 10}

# criu_opts fields: name -> (number, kind); kind "int" and "bool" are varints
# (a negative int32 takes ten bytes), "str" is length-delimited.
OPTS = {
    "images_dir_fd": (1, "int"), "pid": (2, "int"), "leave_running": (3, "bool"),
    "ext_unix_sk": (4, "bool"), "tcp_established": (5, "bool"), "evasive_devices": (6, "bool"),
    "shell_job": (7, "bool"), "file_locks": (8, "bool"), "log_level": (9, "int"), "log_file": (10, "str"),
    "notify_scripts": (12, "bool"), "root": (13, "str"), "parent_img": (14, "str"),
    "work_dir_fd": (17, "int"), "link_remap": (18, "bool"), "manage_cgroups": (24, "bool"),
    "rst_sibling": (26, "bool"), "auto_ext_mnt": (28, "bool"), "ext_sharing": (29, "bool"),
    "ext_masters": (30, "bool"), "skip_mnt": (31, "str"), "enable_fs": (32, "str"),
    "manage_cgroups_mode": (34, "int"), "external": (37, "str"), "empty_ns": (38, "int"),
    "freeze_cgroup": (44, "str"), "timeout": (45, "int"), "tcp_skip_in_flight": (46, "bool"),
    "orphan_pts_master": (50, "bool"), "config_file": (51, "str"), "tcp_close": (52, "bool"),
    "lsm_profile": (53, "str"), "network_lock": (64, "int"), "leave_stopped": (69, "bool"),
    "display_stats": (70, "bool"), "log_to_stderr": (71, "bool"),
}
# criu_req: type 1, opts 2, notify_success 3, keep_open 4
# criu_resp: type 1, success 2, cr_errno 7, cr_errmsg 9, version 10
VARINT, LENGTH = 0, 2


def varint(n):
    n &= (1 << 64) - 1  # two's complement, as protobuf writes a negative int32
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, kind, value):
    if kind in ("int", "bool"):
        return varint(number << 3 | VARINT) + varint(int(value))
    data = value.encode() if isinstance(value, str) else bytes(value)
    return varint(number << 3 | LENGTH) + varint(len(data)) + data


def encode_opts(opts):
    """criu_opts from {name: value}; a list value is a repeated field."""
    out = b""
    for name, value in opts.items():
        number, kind = OPTS[name]
        for v in value if isinstance(value, (list, tuple)) else [value]:
            out += field(number, kind, v)
    return out


def encode_req(req_type, opts=None):
    out = field(1, "int", REQ_TYPES[req_type])
    if opts is not None:
        out += field(2, "msg", encode_opts(opts))
    return out


def read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def decode(buf):
    """{field number: [values]}: varints as ints, length-delimited as bytes."""
    out, i = {}, 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, i = read_varint(buf, i)
        elif wire == LENGTH:
            n, i = read_varint(buf, i)
            value, i = bytes(buf[i:i + n]), i + n
        elif wire == 1:
            value, i = bytes(buf[i:i + 8]), i + 8
        elif wire == 5:
            value, i = bytes(buf[i:i + 4]), i + 4
        else:
            raise ValueError(f"wire type {wire} of field {number} at byte {i}")
        out.setdefault(number, []).append(value)
    return out


def int32(n):
    return n - (1 << 64) if n >= 1 << 63 else n


class RpcResult:
    """A criu_resp: success, cr_errno (errno), cr_errmsg (errmsg), the wall
    time of the whole exchange, and every decoded field."""

    def __init__(self, fields, wall, exit_status=None):
        self.fields = fields
        self.success = bool(fields.get(2, [0])[0])
        self.errno = int32(fields[7][0]) if 7 in fields else 0
        self.errmsg = fields[9][0].decode(errors="replace") if 9 in fields else ""
        self.wall = wall
        self.exit_status = exit_status

    @property
    def restored_pid(self):
        """The root pid of a restore (criu_restore_resp.pid), or None."""
        sub = decode(self.fields[4][0]) if 4 in self.fields else {}
        return int32(sub[1][0]) if 1 in sub else None

    @property
    def version(self):
        """(major, minor) of a VERSION answer, or None."""
        sub = decode(self.fields[10][0]) if 10 in self.fields else {}
        return (sub[1][0], sub[2][0]) if 1 in sub and 2 in sub else None

    def __repr__(self):
        return (f"RpcResult(success={self.success}, errno={self.errno}, errmsg={self.errmsg!r}, "
                f"wall={self.wall:.2f}, exit={self.exit_status})")


def request(criu, req_type, opts=None, *, env=None, timeout=None, pass_fds=()):
    """Starts `criu swrk <fd>`, sends one request, reads one response."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    t0 = time.monotonic()
    with ours:
        with theirs:
            p = subprocess.Popen([criu, "swrk", str(theirs.fileno())], pass_fds=(theirs.fileno(), *pass_fds),
                                 env=env, stdin=subprocess.DEVNULL)
        try:
            ours.settimeout(timeout)
            ours.send(encode_req(req_type, opts))
            data = ours.recv(1 << 20)
        except (OSError, socket.timeout):
            p.kill()
            p.wait()
            raise
    status = p.wait(timeout=timeout)
    if not data:
        return RpcResult({}, time.monotonic() - t0, status)
    return RpcResult(decode(data), time.monotonic() - t0, status)


def dump(criu, pid, images_dir, *, leave_running=False, leave_stopped=False, timeout=None, log_file="dump.log",
         log_level=4, shell_job=False, env=None, extra_opts=None):
    """A DUMP request for the tree of pid into images_dir, which is passed
    as images_dir_fd (CRIU opens it through /proc/<this pid>/fd). timeout is
    CRIU's own (opts.timeout, seconds); the client waits for the answer as
    long as it takes."""
    fd = os.open(images_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        opts = {"images_dir_fd": fd, "pid": pid, "log_file": log_file, "log_level": log_level}
        if leave_running:
            opts["leave_running"] = True
        if leave_stopped:
            opts["leave_stopped"] = True
        if shell_job:
            opts["shell_job"] = True
        if timeout is not None:
            opts["timeout"] = timeout
        opts.update(extra_opts or {})
        return request(criu, "DUMP", opts, env=env)
    finally:
        os.close(fd)


def restore(criu, images_dir, *, log_file="restore.log", log_level=4, detach=True, env=None, extra_opts=None):
    """A RESTORE request from images_dir. CRIU always restores detached under
    RPC (cr-service.c sets restore_detach); detach=False asks for rst_sibling
    instead, which makes the restored root a child of this process rather
    than of the short-lived `criu swrk` (then reparented to a subreaper)."""
    fd = os.open(images_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        opts = {"images_dir_fd": fd, "log_file": log_file, "log_level": log_level}
        if not detach:
            opts["rst_sibling"] = True
        opts.update(extra_opts or {})
        return request(criu, "RESTORE", opts, env=env)
    finally:
        os.close(fd)


def self_check(criu):
    """The encoder against itself and against a real CRIU (not a meson test):
        python3 tests/integration/criu_rpc.py /path/to/criu"""
    opts = {"images_dir_fd": -1, "pid": 300, "log_file": "dump.log", "leave_running": True, "external": ["a", "b"]}
    fields = decode(decode(encode_req("DUMP", opts))[2][0])
    assert int32(fields[1][0]) == -1 and fields[2] == [300] and fields[10] == [b"dump.log"], fields
    assert fields[3] == [1] and fields[37] == [b"a", b"b"], fields
    v = request(criu, "VERSION", timeout=30)
    assert v.success and v.version, v
    with tempfile.TemporaryDirectory() as d:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            c = request(criu, "CHECK", {"images_dir_fd": fd, "log_file": "check.log", "log_level": 4}, timeout=60)
        finally:
            os.close(fd)
        if not c.success:
            with open(os.path.join(d, "check.log"), errors="replace") as f:
                print(f.read()[-2000:])
    print(f"criu {criu}: VERSION -> {v.version[0]}.{v.version[1]}, CHECK -> {c}")
    return 0 if c.success else 1


if __name__ == "__main__":
    import sys
    sys.exit(self_check(sys.argv[1] if len(sys.argv) > 1 else "criu"))
