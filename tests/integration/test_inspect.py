"""cudasnap inspect PATH: what the GPU part of a checkpoint holds, and whether
it would restore on this node, against the driver double.

- Images: images directories made here (CRIU's inventory.img written as CRIU
  writes it, and the plugin's record), as directories and packed by tarfile
  in Podman's layout (checkpoint/ inside, config.dump and spec.dump beside
  it): the verdict for this node (GPUs present, remapped, too few; a driver
  too old to remap; no driver; a GPU without room, then with it), images
  without a GPU part, older records, and what is not a checkpoint (exit 2):
  garbage, a huge member, a link where a file belongs, no libarchive.
  These need no CRIU, so the sanitizer build runs them too.
- FromCriu: images that criu dump wrote through cudasnap_plugin.so (CriuCase),
  inspected as a directory, a tar and a tar.gz, whose verdict agrees with
  what criu restore then does.
"""
import ctypes
import gzip
import io
import json
import lzma
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import zlib

from criu_case import CRIU_CUDA_PLUGIN, RECORD, CriuCase, main
from harness import APP, BIN, GPU0, GPU1, Case

GPU2 = "GPU-22222222-2222-4222-8222-222222222222"


def have_libarchive():
    try:
        ctypes.CDLL("libarchive.so.13")
        return True
    except OSError:
        return False


NO_LIBARCHIVE = None if have_libarchive() else \
    "libarchive.so.13 is not installed here (tests/deps.sh installs libarchive13): archives cannot be read"
MIB = 1 << 20
VERSION = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.split()[-1] if BIN else ""


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_bytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def inventory(plugins=("cudasnap",), listed=True):
    """inventory.img as CRIU 4.x writes it: its magic, then one
    InventoryEntry (img_version 2, ns_per_id, and plugins_entry, field 12,
    whose field 12 lists the plugins) with its length."""
    msg = varint(1 << 3) + varint(2) + varint(4 << 3) + varint(1)
    if listed:
        msg += pb_bytes(12, b"".join(pb_bytes(12, p.encode()) for p in plugins))
    msg += pb_bytes(13, b"be4495fc-bcee-4cbb-a850-deb1b489c928")
    return struct.pack("<II", 0x58313116, len(msg)) + msg


def read_varint(data, at):
    n = shift = 0
    while True:
        b = data[at]
        at += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, at


def without_plugins(img):
    """inventory.img as a CRIU before 4.0 writes it: the same, without
    plugins_entry (field 12)."""
    magic, size = struct.unpack("<II", img[:8])
    msg, out, at = img[8:8 + size], b"", 0
    while at < len(msg):
        start = at
        key, at = read_varint(msg, at)
        wire = key & 7
        if wire == 0:
            _, at = read_varint(msg, at)
        elif wire == 2:
            n, at = read_varint(msg, at)
            at += n
        else:
            at += 8 if wire == 1 else 4
        if key >> 3 != 12:
            out += msg[start:at]
    return struct.pack("<II", magic, len(out)) + out


def entry(nspid, comm, gpus, mib, order=0, used=None):
    return {"pid": 4000 + nspid, "nspid": nspid, "start_time": 100 + nspid, "comm": comm, "order": order,
            "cuda_visible_devices": None, "gpus": gpus, "bytes": mib * MIB,
            "used_gpus": [{"uuid": g, "bytes": None} for g in (used if used is not None else gpus)],
            "seconds": {"checkpoint": 0.1}}


def record(entries, gpus=("H200",), old=False, driver=13000):
    """The plugin's record; gpus: the models of the GPUs the entries saw."""
    rec = {"version": 1, "created": "2026-12-03T10:00:00Z", "driver_version": driver, "wall_seconds": 0.5,
           "processes": [dict(e, order=i) for i, e in enumerate(entries)]}
    if not old:
        seen = []
        for e in entries:
            seen += [g for g in e["gpus"] if g not in seen]
        rec["cudasnap_version"] = "0.1.0"
        rec["gpus"] = [{"uuid": g, "name": "NVIDIA " + gpus[0], "memory_total": 1024 * MIB} for g in seen]
    return json.dumps(rec, indent=1).encode()


def bomb_header(size):
    """The header of a member of size bytes, as the start of a tar stream."""
    ti = tarfile.TarInfo("checkpoint/pages-9.img")
    ti.size = size
    return ti.tobuf(format=tarfile.GNU_FORMAT)


def concatenated(compress, gib):
    """A stream of frames of compress (one per 64 MiB) that decompresses into
    a tar of one member of 32 GiB, its first gib GiB of zeros: a few MiB."""
    chunk = 64 * MIB
    head = compress(bomb_header(32 << 30) + b"\0" * (chunk - 512))
    rest = compress(b"\0" * chunk)
    return head + rest * (gib * 16 - 1)


def zstd_compress(data):
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout


def xz_with_dictionary(data, props=None):
    """data compressed as xz with a small dictionary, then its block header
    patched to say another (LZMA2's property byte: 40 is 4 GiB), its CRC32
    mended: the decoder allocates what the header says."""
    xz = bytearray(lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32, preset=0))
    at = 12  # the stream header
    size = (xz[at] + 1) * 4
    flags = xz[at + 1]
    p = at + 2
    for present in (flags & 0x40, flags & 0x80):  # compressed and uncompressed sizes
        if present:
            _, p = read_varint(xz, p)
    assert xz[p] == 0x21 and xz[p + 1] == 1, "not one LZMA2 filter"
    if props is not None:
        xz[p + 2] = props
    xz[at + size - 4:at + size] = struct.pack("<I", zlib.crc32(bytes(xz[at:at + size - 4])))
    return bytes(xz)


MEASURE = """import resource, subprocess, sys, time
t0 = time.monotonic()
p = subprocess.run(sys.argv[1:], capture_output=True)
sys.stderr.buffer.write(p.stderr)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.monotonic() - t0)
sys.stdout.write(p.stdout.decode())
"""


class Images(Case):
    """Images made here: no CRIU needed."""

    def setUp(self):
        super().setUp()
        # CRIU's plugin directory, with the plugin in it (its presence is what counts)
        self.plugins = os.path.join(self.tmp, "criu-plugins")
        os.makedirs(self.plugins)
        open(os.path.join(self.plugins, "cudasnap_plugin.so"), "wb").close()
        self.env["CUDASNAP_CRIU_PLUGIN_DIR"] = self.plugins

    def images(self, files, name="images"):
        """A directory holding files ({name: bytes})."""
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        for n, data in files.items():
            with open(os.path.join(d, n), "wb") as f:
                f.write(data)
        return d

    def gpu_images(self, entries=None, **kw):
        entries = entries if entries is not None else [entry(1, "python3", [GPU0], 64), entry(7, "worker", [GPU0], 32)]
        return self.images({"inventory.img": inventory(), RECORD: record(entries, **kw),
                            "pages-1.img": b"\0" * 8192})

    def pack(self, d, mode="w", name="ckpt.tar", extra=None, read=True):
        """d packed as Podman's --export packs a checkpoint: CRIU's images
        under checkpoint/, the container's config.dump and spec.dump at the
        top; extra: more members ({name: bytes, or a TarInfo to add}). A
        test that reads it is skipped without libarchive."""
        if read and NO_LIBARCHIVE:
            self.skipTest(NO_LIBARCHIVE)
        path = os.path.join(self.tmp, name)
        with tarfile.open(path, mode) as t:
            t.add(d, arcname="checkpoint")
            meta = {"config.dump": {"id": "0123abcd", "name": "trainer", "rootfsImageName": "localhost/train:1"},
                    "spec.dump": {"ociVersion": "1.0.2", "annotations": {"io.kubernetes.pod.name": "train-0",
                                                                          "io.kubernetes.pod.namespace": "ml"}}}
            for n, obj in meta.items():
                self.add(t, n, json.dumps(obj).encode())
            for n, data in (extra or {}).items():
                if isinstance(data, tarfile.TarInfo):
                    t.addfile(data)
                else:
                    self.add(t, n, data)
        return path

    @staticmethod
    def add(t, name, data):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        ti.mode = 0o600
        t.addfile(ti, io.BytesIO(data))

    def inspect(self, path, *extra, env=None, rc=None):
        r = self.cs("inspect", path, "--json", *extra, env=env)
        if rc is not None:
            self.assertEqual(r.rc, rc, r)
        self.assertIsNotNone(r.obj, r)
        self.assertEqual(r.obj["exit_status"], r.rc, r)
        return r

    def codes(self, r, blocking=True):
        return sorted({x["code"] for x in r.obj["reasons"] if x["blocks"] == blocking})

    # --- what it holds, and a node where it fits ---

    def test_what_the_record_holds_and_a_node_where_it_restores(self):
        d = self.gpu_images()
        r = self.inspect(d, rc=0)
        o = r.obj
        self.assertEqual((o["source"], o["archive"], o["images"], o["gpu_part"], o["would_restore"]),
                         ("directory", None, "", True, True), r)
        rec = o["record"]
        self.assertEqual((rec["cudasnap_version"], rec["created"], rec["driver_version"]),
                         ("0.1.0", "2026-12-03T10:00:00Z", 13000))
        self.assertEqual(rec["gpus"], [{"uuid": GPU0, "name": "NVIDIA H200", "memory_total": 1024 * MIB}])
        self.assertEqual(rec["bytes"], 96 * MIB)
        self.assertEqual([(p["pid"], p["pid_at_checkpoint"], p["comm"], p["gpus_seen"], p["bytes"])
                          for p in rec["processes"]],
                         [(1, 4001, "python3", [GPU0], 64 * MIB), (7, 4007, "worker", [GPU0], 32 * MIB)])
        for p in rec["processes"]:
            g, = p["restore"]["gpus"]
            self.assertEqual((p["restore"]["verdict"], g["uuid"], g["index"]), ("fits", GPU0, 0))
            self.assertEqual(g["bytes_needed"], p["bytes"] + 144 * MIB)
        self.assertEqual(o["node"]["driver"]["version"], 13000)
        self.assertEqual([g["uuid"] for g in o["node"]["gpus"]], [GPU0])
        self.assertIsNone(o["node"]["device_map"])
        self.assertEqual(self.codes(r), [])
        h = self.cs("inspect", d)
        self.assertEqual(h.rc, 0, h)
        for text in ("by cudasnap 0.1.0, driver CUDA 13.0", f"GPUs:       {GPU0}  NVIDIA H200", "pid 1 (python3)",
                     "pid 7 (worker)", "processes:  2, 96.0 MiB of GPU memory moved", "WOULD RESTORE here"):
            self.assertIn(text, h.out)

    def test_a_record_of_unknown_size_and_no_gpu_used_does_not_fit_unknown(self):
        """"bytes": null and "used_gpus": []: where the memory was and how
        much is unknown; inspect says no, as the plugin's restore refuses."""
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        self.env["FAKECUDA_OTHER_USED_MIB"] = "900"
        e = entry(1, "python3", [GPU0], 800)
        e["bytes"], e["used_gpus"] = None, []
        r = self.inspect(self.gpu_images([e]))
        self.assertEqual(r.rc, 1, r)
        self.assertIn("gpu-memory-unknown", self.codes(r))

    def test_a_record_of_an_older_cudasnap(self):
        d = self.gpu_images(old=True)
        r = self.inspect(d, rc=0)
        self.assertIsNone(r.obj["record"]["cudasnap_version"])
        self.assertIsNone(r.obj["record"]["gpus"])
        h = self.cs("inspect", d)
        self.assertIn("GPUs:       not recorded", h.out)
        self.assertIn("version not recorded", h.out)

    # --- archives ---

    def test_archives_plain_and_compressed_in_podmans_layout(self):
        d = self.gpu_images()
        want = self.inspect(d, rc=0).obj["record"]
        for mode, ext, comp in (("w", "tar", None), ("w:gz", "tar.gz", "gzip"), ("w:xz", "tar.xz", "xz"),
                                ("w:bz2", "tar.bz2", "bzip2")):
            with self.subTest(ext=ext):
                r = self.inspect(self.pack(d, mode, "ckpt." + ext), rc=0)
                o = r.obj
                self.assertEqual((o["source"], o["images"], o["archive"]["compression"]),
                                 ("archive", "checkpoint/", comp), r)
                self.assertEqual(o["record"], want)
                self.assertEqual(o["container"], {"name": "trainer", "id": "0123abcd", "image": "localhost/train:1",
                                                  "kubernetes_container": None, "pod": "train-0", "namespace": "ml"})
        h = self.cs("inspect", os.path.join(self.tmp, "ckpt.tar.gz"))
        self.assertEqual(h.rc, 0, h)
        self.assertIn("(gzip tar archive, CRIU images under checkpoint/)", h.out)
        self.assertIn("container:  trainer (Kubernetes pod train-0 in namespace ml); image localhost/train:1", h.out)

    def parked_images(self):
        """Images whose first process parked 40 MiB into two files of them
        (32 MiB and 8 MiB, made sparse here)."""
        e = entry(1, "python3", [GPU0], 64)
        e["park_files"] = {"dir": None, "name": "cudasnap-gpumem.4001.101", "count": 2, "bytes": 40 * MIB}
        d = self.gpu_images([e, entry(7, "worker", [GPU0], 32)])
        for i, size in ((0, 32 * MIB), (1, 8 * MIB)):
            with open(os.path.join(d, f"cudasnap-gpumem.4001.101.{i}"), "wb") as f:
                f.truncate(size)
        return d

    def test_the_files_of_parks_into_the_images_are_counted_and_checked(self):
        d = self.parked_images()
        self.assertEqual(self.codes(self.inspect(d, rc=0)), [])
        self.assertEqual(self.codes(self.inspect(self.pack(d), rc=0)), [])
        second = os.path.join(d, "cudasnap-gpumem.4001.101.1")
        os.truncate(second, 4 * MIB)  # cut short
        r = self.inspect(d, rc=1)
        self.assertEqual(self.codes(r), ["park-files"])
        self.assertIn("cudasnap-gpumem.4001.101.1, which is of another size (4194304 bytes, 8388608 expected)",
                      r.obj["reasons"][0]["text"])
        r = self.inspect(self.pack(d, name="cut.tar"), rc=1)
        self.assertEqual(self.codes(r), ["park-files"])
        self.assertIn("checkpoint/cudasnap-gpumem.4001.101.1, which is of another size", r.obj["reasons"][0]["text"])
        os.unlink(second)
        r = self.inspect(d, rc=1)
        self.assertIn("cudasnap-gpumem.4001.101.1, which is not there", r.obj["reasons"][0]["text"])
        r = self.inspect(self.pack(d, name="gone.tar"), rc=1)
        self.assertEqual(self.codes(r), ["park-files"])
        # read from a pipe, an archive is read once: the files are not looked at, and it says so
        if not NO_LIBARCHIVE:
            with open(os.path.join(self.tmp, "gone.tar"), "rb") as f:
                p = subprocess.run([BIN, "inspect", "/dev/stdin", "--json"], input=f.read(), capture_output=True,
                                   env=self.env)
            o = json.loads(p.stdout)
            self.assertIn("park-files-unchecked", {x["code"] for x in o["reasons"] if not x["blocks"]}, p.stdout)

    def test_images_at_the_top_of_an_archive_and_leading_dot_slash(self):
        if NO_LIBARCHIVE:
            self.skipTest(NO_LIBARCHIVE)
        d = self.gpu_images()
        path = os.path.join(self.tmp, "top.tar.gz")
        with tarfile.open(path, "w:gz") as t:
            t.add(d, arcname=".")
        r = self.inspect(path, rc=0)
        self.assertEqual((r.obj["images"], len(r.obj["record"]["processes"])), ("", 2), r)

    def test_an_unpacked_archive_is_a_directory(self):
        d = self.gpu_images()
        top = os.path.join(self.tmp, "unpacked")
        with tarfile.open(self.pack(d)) as t:
            t.extractall(top)
        r = self.inspect(top, rc=0)
        self.assertEqual((r.obj["images"], r.obj["container"]["name"]), ("checkpoint/", "trainer"), r)

    def test_a_huge_member_is_skipped_unless_it_is_one_that_is_read(self):
        d = self.gpu_images()
        big = b"\0" * (40 * MIB)
        r = self.inspect(self.pack(d, "w:gz", "pages.tar.gz", {"checkpoint/pages-9.img": big}), rc=0)
        self.assertTrue(r.obj["would_restore"], r)
        os.unlink(os.path.join(d, RECORD))
        r = self.inspect(self.pack(d, "w:gz", "huge.tar.gz", {"checkpoint/" + RECORD: big}), rc=2)
        self.assertIn(f"checkpoint/{RECORD} has {40 * MIB} bytes, more than", r.obj["error"]["message"])
        self.assertIn("not a checkpoint", r.err)

    def test_an_archive_is_read_to_its_end(self):
        """tar, Podman and the kubelet extract every member, and a later copy
        of one over an earlier: an archive is read to its end, past the
        container's file system changes (rootfs-diff.tar) that Podman writes
        after the images and its two files, and one cut short there is
        refused, as its extraction fails."""
        if NO_LIBARCHIVE:
            self.skipTest(NO_LIBARCHIVE)
        d = self.gpu_images()
        path = self.pack(d, "w", "cut.tar", {"rootfs-diff.tar": b"\1" * (4 * MIB)})
        self.inspect(path, rc=0)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 3 * MIB)
        r = self.inspect(path, rc=2)
        self.assertIn("corrupt or truncated", r.obj["error"]["message"], r)

    def podman_with(self, members, mode="w:gz", name="crafted.tar.gz"):
        """An archive of the members ([(name, bytes or a TarInfo)]), in that order."""
        if NO_LIBARCHIVE:
            self.skipTest(NO_LIBARCHIVE)
        path = os.path.join(self.tmp, name)
        with tarfile.open(path, mode) as t:
            for n, data in members:
                if isinstance(data, tarfile.TarInfo):
                    t.addfile(data)
                else:
                    self.add(t, n, data)
        return path

    def test_a_second_copy_or_an_alias_of_a_member_is_refused(self):
        """The first copy says "no GPU part"; the copy an extractor leaves
        (the last, under a name that means the same file) needs 500 GiB of
        GPU memory: the archive is refused, whichever it is."""
        big = record([entry(1, "python3", [GPU0], 500 << 10)])
        meta = [("config.dump", b'{"name": "trainer"}'), ("spec.dump", b"{}")]
        first = [("checkpoint/inventory.img", inventory(("amdgpu",)))] + meta
        for alias in ("checkpoint/inventory.img", "checkpoint//inventory.img", "checkpoint/./inventory.img",
                      "./checkpoint/inventory.img", "/checkpoint/inventory.img", "checkpoint/inventory.img/"):
            with self.subTest(alias=alias):
                path = self.podman_with(first + [(alias, inventory()), ("checkpoint/" + RECORD, big)])
                r = self.inspect(path, rc=2)
                self.assertIn("is a second copy of checkpoint/inventory.img", r.obj["error"]["message"], r)
                self.assertIn("not a checkpoint cudasnap reads", r.obj["error"]["message"], r)
        for alias in ("checkpoint/" + RECORD, "checkpoint//" + RECORD, "checkpoint/./" + RECORD):
            with self.subTest(alias=alias):
                small = record([entry(1, "python3", [GPU0], 1)])
                path = self.podman_with([("checkpoint/inventory.img", inventory()), ("checkpoint/" + RECORD, small)] +
                                        meta + [(alias, big)])
                r = self.inspect(path, rc=2)
                self.assertIn(f"is a second copy of checkpoint/{RECORD}", r.obj["error"]["message"], r)
        # a name with "..", which extractors refuse or resolve elsewhere
        path = self.podman_with(first + [("checkpoint/x/../inventory.img", inventory()), ("checkpoint/" + RECORD, big)])
        r = self.inspect(path, rc=2)
        self.assertIn('checkpoint/x/../inventory.img has a ".." component', r.obj["error"]["message"], r)
        # one copy under an odd name is read as an extractor names it
        path = self.podman_with([("checkpoint//./inventory.img", inventory()), ("./checkpoint/" + RECORD, big)] + meta)
        r = self.inspect(path, rc=1)
        self.assertEqual(self.codes(r), ["gpu-memory"], r)

    def test_a_link_where_the_images_lie_is_refused_in_both_modes(self):
        d = self.gpu_images()
        elsewhere = self.images({"inventory.img": inventory(("amdgpu",))}, name="elsewhere")
        top = self.images({"config.dump": b"{}"}, name="linked")
        os.symlink(elsewhere, os.path.join(top, "checkpoint"))
        r = self.inspect(top, rc=2)
        self.assertIn("its checkpoint/ is a symbolic link", r.obj["error"]["message"], r)
        link = tarfile.TarInfo("checkpoint")
        link.type = tarfile.SYMTYPE
        link.linkname = elsewhere
        path = self.podman_with([("checkpoint", link), ("checkpoint/inventory.img", inventory(("amdgpu",)))])
        r = self.inspect(path, rc=2)
        self.assertIn("its member checkpoint is not a directory", r.obj["error"]["message"], r)
        # a hard link where the record belongs: refused in an archive, and in a directory
        os.link(os.path.join(d, RECORD), os.path.join(self.tmp, "another-name"))
        r = self.inspect(d, rc=2)
        self.assertIn(f"{RECORD} has 2 names (a hard link)", r.obj["error"]["message"], r)
        hard = tarfile.TarInfo("checkpoint/" + RECORD)
        hard.type = tarfile.LNKTYPE
        hard.linkname = "checkpoint/pages-1.img"
        path = self.podman_with([("checkpoint/inventory.img", inventory()), ("checkpoint/pages-1.img", b"{}"),
                                 ("checkpoint/" + RECORD, hard)])
        r = self.inspect(path, rc=2)
        self.assertIn(f"its member checkpoint/{RECORD} is not a regular file", r.obj["error"]["message"], r)

    def test_the_path_is_shown_safely(self):
        d = self.gpu_images()
        odd = os.path.join(self.tmp, "ck\x1b[2J\x07")
        os.rename(d, odd)
        odd = os.fsencode(odd) + b"\xff\xfe"
        os.rename(os.fsencode(self.tmp) + b"/ck\x1b[2J\x07", odd)
        for args in ((), ("--json",)):
            p = subprocess.run([BIN, "inspect", odd, *args], capture_output=True, env=self.env)
            self.assertEqual(p.returncode, 0, p)
            for stream in (p.stdout, p.stderr):
                self.assertNotIn(b"\x1b", stream)
                self.assertNotIn(b"\x07", stream)
                stream.decode("utf-8")  # valid UTF-8
            if args:
                self.assertTrue(json.loads(p.stdout)["path"].endswith("/ck?[2J???"), p.stdout)
        p = subprocess.run([BIN, "inspect", odd + b"-missing", "--json"], capture_output=True, env=self.env)
        self.assertEqual(p.returncode, 2, p)
        o = json.loads(p.stdout.decode("utf-8"))
        self.assertNotIn("\x1b", o["path"] + o["error"]["message"])
        self.assertNotIn(b"\x1b", p.stderr)

    # --- bounded work on hostile input ---

    def measured(self, path, *args, env=None):
        """inspect --json in a process of its own: (its result, the most
        memory it or its reader held in MiB, seconds)."""
        p = subprocess.run([sys.executable, "-c", MEASURE, BIN, "inspect", path, "--json", *args],
                           capture_output=True, text=True, env=dict(self.env, **(env or {})), timeout=120)
        head, out = p.stdout.split("\n", 1)
        rc, rss, wall = head.split()
        obj = json.loads(out)
        self.assertEqual(obj["exit_status"], int(rc), p)
        return obj, int(rss) >> 10, float(wall)

    def raw_archive(self, data, name):
        if NO_LIBARCHIVE:
            self.skipTest(NO_LIBARCHIVE)
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_a_huge_dictionary_is_refused_within_the_readers_memory(self):
        """An xz archive whose header asks for a 4 GiB dictionary: the
        reader may grow by 1 GiB, and the refusal names that bound."""
        d = self.gpu_images()
        with open(self.pack(d, "w", "plain.tar"), "rb") as f:
            plain = f.read()
        path = self.raw_archive(xz_with_dictionary(plain, 40), "dict.tar.xz")
        # under the sanitizers, malloc returns NULL past the limit, as glibc's does
        o, rss, wall = self.measured(path, env={"ASAN_OPTIONS": "allocator_may_return_null=1"})
        self.assertEqual((o["exit_status"], o["bound"]), (2, "memory"), o)
        self.assertIn("more than the 1024 MiB of memory inspect gives its reader (bound: memory, 1024 MiB",
                      o["error"]["message"])
        self.assertLess(rss, 1200, o)
        self.assertLess(wall, 20, o)
        # the same archive with the dictionary it was written with reads
        self.inspect(self.raw_archive(xz_with_dictionary(plain), "small.tar.xz"), rc=0)

    def test_a_decompression_bomb_is_refused_at_each_bound(self):
        bomb = self.raw_archive(concatenated(lambda b: gzip.compress(b, 9), 8), "bomb.tar.gz")
        self.assertLess(os.path.getsize(bomb), 12 * MIB)
        o, rss, wall = self.measured(bomb)
        self.assertEqual((o["exit_status"], o["bound"]), (2, "ratio"), o)
        self.assertRegex(o["error"]["message"], r"decompress into \d+, more than 1000 times as many \(bound: "
                         r"--max-ratio 1000\)")
        self.assertIn("--max-ratio", o["error"]["hint"])
        o, rss, wall = self.measured(bomb, "--max-ratio", "0", "--max-bytes", "512M")
        self.assertEqual((o["exit_status"], o["bound"]), (2, "bytes"), o)
        self.assertIn(f"more than the {512 * MIB} bytes inspect decompresses (bound: --max-bytes {512 * MIB})",
                      o["error"]["message"])
        o, rss, wall = self.measured(bomb, "--max-ratio", "0", "--max-bytes", "0", "--timeout", "1")
        self.assertEqual((o["exit_status"], o["bound"]), (2, "time"), o)
        self.assertIn("took longer than the 1 s inspect gives it (bound: --timeout 1)", o["error"]["message"])
        self.assertLess(wall, 5, o)
        for args in (("--timeout", "-1"), ("--max-bytes", "1X"), ("--max-bytes", "-5"), ("--max-ratio", "x")):
            with self.subTest(args=args):
                self.assertEqual(self.cs("inspect", bomb, *args).rc, 2)

    def test_a_zstd_bomb_is_refused_in_a_moment(self):
        """1 MiB of zstd that says 32 GiB."""
        if not shutil.which("zstd"):
            self.skipTest("no zstd here to make the archive")
        bomb = self.raw_archive(concatenated(zstd_compress, 32), "bomb.tar.zst")
        self.assertLess(os.path.getsize(bomb), 2 * MIB)
        o, rss, wall = self.measured(bomb)
        self.assertEqual((o["exit_status"], o["bound"]), (2, "ratio"), o)
        self.assertLess(wall, 10, o)

    def test_a_record_of_too_many_processes_is_refused_before_it_is_parsed(self):
        many = [{"pid": i + 1, "order": i, "start_time": 1, "comm": "a"} for i in range(150000)]
        rec = json.dumps({"version": 1, "processes": many}, separators=(",", ":")).encode()
        d = self.images({"inventory.img": inventory(), RECORD: rec}, name="many")
        o, rss, wall = self.measured(d)
        self.assertEqual(o["exit_status"], 2, o)
        self.assertIn("holds 150001 JSON objects", o["error"]["message"])
        self.assertIn("more than a record of 4096 processes has", o["error"]["message"])
        self.assertLess(rss, 300, o)
        # 4097 whole entries: within the shape, over the count
        d = self.images({"inventory.img": inventory(),
                         RECORD: record([entry(i + 1, "p", [GPU0], 1) for i in range(4097)])}, name="4097")
        o, rss, wall = self.measured(d)
        self.assertIn("lists 4097 processes, more than the 4096 a record holds", o["error"]["message"], o)
        d = self.images({"inventory.img": inventory(),
                         RECORD: record([entry(i + 1, "p", [GPU0], 1) for i in range(4096)])}, name="4096")
        o, rss, wall = self.measured(d)
        self.assertEqual(len(o["record"]["processes"]), 4096)

    def test_a_link_where_a_file_belongs_is_refused(self):
        d = self.gpu_images()
        os.unlink(os.path.join(d, RECORD))
        link = tarfile.TarInfo("checkpoint/" + RECORD)
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        r = self.inspect(self.pack(d, "w", "link.tar", {link.name: link}), rc=2)
        self.assertIn("is not a regular file", r.obj["error"]["message"], r)
        os.symlink("/etc/passwd", os.path.join(d, RECORD))
        r = self.inspect(d, rc=2)
        self.assertIn("symbolic link", r.obj["error"]["message"], r)

    def test_without_libarchive_an_archive_is_refused_and_a_directory_read(self):
        d = self.gpu_images()
        env = {"CUDASNAP_LIBARCHIVE": os.path.join(self.tmp, "no-libarchive.so")}
        r = self.inspect(self.pack(d, "w:gz", "c.tar.gz", read=False), env=env, rc=2)
        self.assertIn("needs libarchive, which cannot be loaded", r.obj["error"]["message"])
        self.assertIn("libarchive13", r.obj["error"]["hint"])
        self.assertIn("cudasnap inspect DIR", r.obj["error"]["hint"])
        self.inspect(d, env=env, rc=0)

    # --- the verdict: GPUs ---

    def test_a_gpu_that_is_not_here_is_remapped_onto_another(self):
        d = self.gpu_images([entry(1, "python3", [GPU1], 64)])
        r = self.inspect(d, rc=0)
        node = r.obj["node"]
        self.assertEqual((node["device_map"], node["device_map_from"]), (f"{GPU1}={GPU0}", "automatic"), r)
        self.assertEqual(node["stand_ins"], [{"absent": GPU1, "onto": GPU0, "index": 0}])
        g, = r.obj["record"]["processes"][0]["restore"]["gpus"]
        self.assertEqual((g["uuid"], g["index"]), (GPU0, 0))
        h = self.cs("inspect", d)
        self.assertIn(f"{GPU1} is not here: restored onto GPU 0 ({GPU0})", h.out)

    def test_too_few_gpus_here_to_stand_in(self):
        d = self.gpu_images([entry(1, "a", [GPU1], 8), entry(2, "b", [GPU2], 8)])
        r = self.inspect(d, rc=1)
        self.assertEqual(self.codes(r), ["gpu-absent"], r)
        self.assertIn(f"2 of the 2 GPUs the checkpoint's processes saw are not on this node ({GPU2} first)",
                      r.obj["reasons"][0]["text"])
        self.assertIn("CUDASNAP_DEVICE_MAP", r.obj["reasons"][0]["fix"])
        self.inspect(d, env={"FAKECUDA_GPUS": f"{GPU0},{GPU1},{GPU2}"}, rc=0)

    def test_a_driver_that_cannot_remap_or_is_older(self):
        d = self.gpu_images([entry(1, "python3", [GPU1], 64)])
        r = self.inspect(d, env={"FAKECUDA_DRIVER_VERSION": "12080"}, rc=1)
        self.assertEqual(self.codes(r), ["driver-remap", "driver-version"], r)
        h = self.cs("inspect", d, env={"FAKECUDA_DRIVER_VERSION": "12080"})
        self.assertEqual(h.rc, 1, h)
        self.assertIn("would NOT restore here (2 reasons)", h.out)
        self.assertIn("older than the one that checkpointed the processes (CUDA 13.0, 13000)", h.out)
        # on its own GPUs no remap is needed: only the version stands in the way
        r = self.inspect(d, env={"FAKECUDA_DRIVER_VERSION": "12080", "FAKECUDA_GPUS": GPU1}, rc=1)
        self.assertEqual(self.codes(r), ["driver-version"], r)
        self.inspect(d, env={"FAKECUDA_DRIVER_VERSION": "13010", "FAKECUDA_GPUS": GPU1}, rc=0)

    def test_no_driver_here(self):
        d = self.gpu_images()
        r = self.inspect(d, env={"CUDASNAP_LIBCUDA": os.path.join(self.tmp, "no-libcuda.so.1")}, rc=1)
        self.assertIn("driver", self.codes(r), r)
        self.assertFalse(r.obj["node"]["driver"]["loaded"])

    def test_a_device_map_of_the_settings_that_leaves_out_a_gpu(self):
        d = self.gpu_images([entry(1, "python3", [GPU1, GPU2], 64, used=[GPU1])])
        env = {"CUDASNAP_DEVICE_MAP": f"{GPU1}={GPU0}"}
        r = self.inspect(d, env=env, rc=1)
        self.assertEqual(self.codes(r), ["device-map"], r)
        self.assertEqual(r.obj["node"]["device_map_from"], "settings")
        self.assertIn(f"leaves out {GPU2}", r.obj["reasons"][0]["text"])
        self.assertEqual(r.obj["reasons"][0]["pid"], 1)
        env = {"CUDASNAP_DEVICE_MAP": f"{GPU1}={GPU0},{GPU2}={GPU0}"}
        self.inspect(d, env=env, rc=0)

    # --- the verdict: CRIU's plugin directory ---

    def test_the_plugin_must_be_in_crius_plugin_directory_and_alone(self):
        d = self.gpu_images()
        os.unlink(os.path.join(self.plugins, "cudasnap_plugin.so"))
        r = self.inspect(d, rc=1)
        self.assertEqual(self.codes(r), ["criu-plugin"], r)
        self.assertIn(f"not in CRIU's plugin directory {self.plugins}: CRIU refuses the restore (\"Missing required "
                      "plugin: cudasnap\")", r.obj["reasons"][0]["text"])
        self.assertIn("CUDASNAP_CRIU_PLUGIN_DIR", r.obj["reasons"][0]["fix"])
        self.assertEqual((r.obj["node"]["criu_plugin_dir"], r.obj["node"]["criu_plugin"]), (self.plugins, False))
        # images of a CRIU before 4.0 restore without it, and without their GPU state
        old = self.images({"inventory.img": inventory(listed=False), RECORD: record([entry(1, "p", [GPU0], 1)])},
                          name="criu-3")
        r = self.inspect(old, rc=1)
        self.assertIn("without their GPU state", r.obj["reasons"][0]["text"])
        # the default directory, where the setting is not given
        mine = self.env.pop("CUDASNAP_CRIU_PLUGIN_DIR")
        r = self.cs("inspect", d, "--json")
        self.env["CUDASNAP_CRIU_PLUGIN_DIR"] = mine
        self.assertEqual(r.obj["node"]["criu_plugin_dir"], "/usr/lib/criu", r)
        open(os.path.join(self.plugins, "cudasnap_plugin.so"), "wb").close()
        open(os.path.join(self.plugins, "cuda_plugin.so"), "wb").close()
        r = self.inspect(d, rc=1)
        self.assertEqual(self.codes(r), ["criu-plugin-conflict"], r)
        self.assertIn("two GPU plugins would act on the same processes", r.obj["reasons"][0]["text"])
        self.assertIn(f"Remove {self.plugins}/cuda_plugin.so", r.obj["reasons"][0]["fix"])
        h = self.cs("inspect", d)
        self.assertIn(f"CRIU plugins: {self.plugins}/cudasnap_plugin.so, and CRIU's own cuda_plugin.so beside it",
                      h.out)
        # images without a GPU part need neither
        self.inspect(self.images({"inventory.img": inventory(())}, name="plain"), rc=0)

    # --- the verdict: GPU memory ---

    def test_a_gpu_without_room_then_with_room(self):
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        d = self.gpu_images()
        filler, = self.start("--mem", "900")
        r = self.inspect(d, rc=1)
        self.assertEqual(self.codes(r), ["gpu-memory"], r)
        self.assertEqual(sorted(x["pid"] for x in r.obj["reasons"]), [1, 7], r)
        self.assertIn("its restore needs 0.20 GiB on GPU 0 (NVIDIA H200", r.obj["reasons"][0]["text"])
        self.assertIn("the GPU has 0.1", r.obj["reasons"][0]["text"])
        self.assertEqual([p["restore"]["verdict"] for p in r.obj["record"]["processes"]], ["short", "short"])
        h = self.cs("inspect", d)
        self.assertEqual(h.rc, 1, h)
        self.assertIn("onto GPU 0 needs 208.0 MiB: does NOT fit", h.out)
        self.assertIn("    fix: Free at least", h.out)
        # the plugin would not refuse it with the setting, and still fail
        r = self.inspect(d, env={"CUDASNAP_IGNORE_GPU_MEMORY": "1"}, rc=1)
        self.assertIn("CUDASNAP_IGNORE_GPU_MEMORY=1 is set", r.obj["reasons"][0]["text"])
        os.kill(filler, signal.SIGKILL)
        self.assertTrue(self.wait_gone(filler))
        self.inspect(d, rc=0)

    def wait_gone(self, pid):
        for p in self.apps:
            if p.pid == pid:
                p.wait()
        return not os.path.exists(f"/proc/{pid}")

    # --- no GPU part ---

    def test_images_without_a_gpu_part(self):
        for name, inv, files in (("other-plugin", inventory(("amdgpu",)), {}),
                                 ("no-plugin", inventory(()), {}),
                                 ("criu-3", inventory(listed=False), {}),
                                 ("not-listed-but-record-ignored", inventory(("amdgpu",)),
                                  {RECORD: record([entry(1, "p", [GPU0], 1)])})):
            with self.subTest(name=name):
                d = self.images(dict({"inventory.img": inv}, **files), name=name)
                r = self.inspect(d, rc=0)
                self.assertEqual((r.obj["gpu_part"], r.obj["record"], r.obj["node"], r.obj["would_restore"]),
                                 (False, None, None, True), r)
                h = self.cs("inspect", d)
                self.assertEqual(h.rc, 0, h)
                self.assertIn("no GPU part: CRIU restores it without cudasnap", h.out)
        # a CRIU before 4.0 lists no plugins: the record decides, as for the plugin
        d = self.images({"inventory.img": inventory(listed=False), RECORD: record([entry(1, "p", [GPU0], 1)])},
                        name="criu-3-gpu")
        self.assertTrue(self.inspect(d, rc=0).obj["gpu_part"])

    # --- not a checkpoint ---

    def test_what_is_not_a_checkpoint_is_exit_status_2(self):
        if NO_LIBARCHIVE:
            self.skipTest(NO_LIBARCHIVE)
        garbage = os.path.join(self.tmp, "garbage")
        with open(garbage, "wb") as f:
            f.write(os.urandom(100000))
        gz = os.path.join(self.tmp, "garbage.gz")
        with open(gz, "wb") as f:
            subprocess.run(["gzip", "-c", garbage], stdout=f, check=True)
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        cases = {
            "garbage": (garbage, "is not a tar archive"),
            "gzip of garbage": (gz, "is not a tar archive"),
            "empty file": (self.images({"e": b""}, "e") + "/e", "is not a tar archive"),
            "no such path": (os.path.join(self.tmp, "nothing"), "cannot open"),
            "empty directory": (empty, "holds no CRIU inventory.img"),
            "a tar without images": (self.pack(empty, "w:gz", "noimg.tar.gz"), "holds no CRIU inventory.img"),
            "bad inventory": (self.images({"inventory.img": b"\x16\x31\x31\x58\xff\xff\xff\xff"}, "badinv"),
                              "is not CRIU's inventory image"),
            "garbage inventory": (self.images({"inventory.img": os.urandom(300)}, "garbinv"),
                                  "is not CRIU's inventory image"),
            "no record": (self.images({"inventory.img": inventory()}, "norec"), f"it holds no {RECORD}"),
            "corrupt record": (self.images({"inventory.img": inventory(), RECORD: b'{"version": 1, "proc'},
                                           "badrec"), "is corrupt or truncated"),
            "bad gpus list": (self.images({"inventory.img": inventory(),
                                           RECORD: b'{"version":1,"processes":[],"gpus":[{"uuid":"x"}]}'},
                                          "badgpus"), "malformed list of GPUs"),
            "a device": ("/dev/null", "neither a directory nor a file"),
        }
        for what, (path, words) in cases.items():
            with self.subTest(what=what):
                r = self.inspect(path, rc=2)
                self.assertIsNone(r.obj.get("record"), r)
                self.assertFalse(r.obj["would_restore"])
                self.assertIn(words, r.obj["error"]["message"], r)
                h = self.cs("inspect", path)
                self.assertEqual((h.rc, h.out), (2, ""), h)
                self.assertIn(words, h.err)

    def test_usage(self):
        for args in ((), ("a", "b"), ("--nope", "a")):
            with self.subTest(args=args):
                r = self.cs("inspect", *args)
                self.assertEqual(r.rc, 2, r)
        r = self.cs("inspect", "--help")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("Usage: cudasnap inspect PATH [--json]", r.out)


class FromCriu(CriuCase):
    """Images that criu dump wrote with the plugin."""

    def inspect(self, path, rc, env=None):
        r = self.cs("inspect", path, "--json", env=dict({"CUDASNAP_CRIU_PLUGIN_DIR": self.plugins}, **(env or {})))
        self.assertEqual(r.rc, rc, r)
        self.assertEqual(r.obj["exit_status"], rc, r)
        return r

    def podman_layout(self, mode, name):
        if NO_LIBARCHIVE:
            self.skipTest(NO_LIBARCHIVE)
        path = os.path.join(self.tmp, name)
        with tarfile.open(path, mode) as t:
            t.add(self.images, arcname="checkpoint")
            data = json.dumps({"id": "feed", "name": "criu-tree"}).encode()
            ti = tarfile.TarInfo("config.dump")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        return path

    def test_images_of_criu_dump_as_directory_tar_and_tar_gz(self):
        pids = self.tree("--spawn", "2", "--mem", "8", expect=3)
        self.assertDumped(pids)
        r = self.inspect(self.images, 0)
        rec = r.obj["record"]
        self.assertEqual(rec["cudasnap_version"], VERSION)
        self.assertEqual([(g["uuid"], g["name"]) for g in rec["gpus"]], [(GPU0, "NVIDIA H200")])
        self.assertGreater(rec["gpus"][0]["memory_total"], 0)
        self.assertEqual(sorted(p["pid"] for p in rec["processes"]), pids)
        for p in rec["processes"]:
            self.assertEqual(p["gpus_seen"], [GPU0])
            self.assertEqual([u["uuid"] for u in p["gpus_used"]], [GPU0])
            self.assertGreaterEqual(p["bytes"], 8 * (1 << 20))
            self.assertEqual(p["restore"]["verdict"], "fits")
        self.assertIn("cudasnap", r.obj["criu_plugins"])
        for mode, name in (("w", "ckpt.tar"), ("w:gz", "ckpt.tar.gz")):
            with self.subTest(name=name):
                a = self.inspect(self.podman_layout(mode, name), 0)
                self.assertEqual((a.obj["images"], a.obj["container"]["name"]), ("checkpoint/", "criu-tree"))
                self.assertEqual(a.obj["record"], rec)
        # what inspect said holds: the images restore here
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids)

    def test_a_node_without_the_recorded_gpu_and_one_too_old_to_remap(self):
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2,
                         env={"FAKECUDA_GPUS": f"{GPU0},{GPU1}", "CUDA_VISIBLE_DEVICES": "0"})
        self.assertDumped(pids)
        r = self.inspect(self.images, 0, env={"FAKECUDA_GPUS": GPU1})
        self.assertEqual(r.obj["node"]["stand_ins"], [{"absent": GPU0, "onto": GPU1, "index": 0}], r)
        old = {"FAKECUDA_GPUS": GPU1, "FAKECUDA_DRIVER_VERSION": "12080"}
        r = self.inspect(self.images, 1, env=old)
        self.assertIn("driver-remap", [x["code"] for x in r.obj["reasons"] if x["blocks"]], r)
        r = self.restore(env={"FAKECUDA_GPUS": GPU1})
        self.assertEqual(r.rc, 0, r)
        self.assertStates(pids, "running")

    def test_a_gpu_without_room_agrees_with_criu_restore(self):
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        pids = self.tree("--spawn", "1", "--mem", "64", expect=2)
        self.assertDumped(pids)
        filler, = self.start("--mem", "900")
        r = self.inspect(self.images, 1)
        self.assertEqual({x["code"] for x in r.obj["reasons"] if x["blocks"]}, {"gpu-memory"}, r)
        c = self.restore()
        self.assertNotEqual(c.rc, 0, c)
        self.assertIn("REFUSED before CRIU created any process", c.log, c)
        os.kill(filler, signal.SIGKILL)
        for p in self.apps:
            if p.pid == filler:
                p.wait()
        self.inspect(self.images, 0)
        c = self.restore(log="restore2.log")
        self.assertEqual(c.rc, 0, c)
        self.assertRunningAndOk(pids)

    def test_images_of_a_criu_before_4_restore_beside_the_plugin(self):
        """Images whose inventory lists no plugins (CRIU before 4.0) and that
        hold no record have no GPU part: inspect says so, and the plugin
        stands aside at their restore."""
        pids = self.tree("--no-init", expect=1)
        self.assertDumped(pids)
        path = os.path.join(self.images, "inventory.img")
        with open(path, "rb") as f:
            old = without_plugins(f.read())
        with open(path, "wb") as f:
            f.write(old)
        r = self.inspect(self.images, 0)
        self.assertEqual((r.obj["gpu_part"], r.obj["criu_plugins"]), (False, None), r)
        c = self.restore()
        self.assertEqual(c.rc, 0, c)
        self.assertTrue(any("list no plugins" in line for line in c.cudasnap_lines()), c)
        for pid in pids:  # restored: alive again under its pid
            with open(f"/proc/{pid}/stat") as f:
                self.assertNotIn(f.read().rsplit(")", 1)[1].split()[0], "ZX")

    def test_criu_cuda_plugin_beside_it_agrees_with_criu_restore(self):
        """Two GPU plugins in CRIU's directory: images with a GPU part do not
        restore, as inspect says; images without one do."""
        if not CRIU_CUDA_PLUGIN:
            self.skipTest("CRIU's cuda_plugin.so is neither beside this criu (../plugins/) nor in /usr/lib/criu/")
        plain = self.tree("--no-init", expect=1)
        self.assertDumped(plain)
        shutil.copy(CRIU_CUDA_PLUGIN, self.plugins)
        self.inspect(self.images, 0)
        c = self.restore()
        self.assertEqual(c.rc, 0, c)
        os.unlink(os.path.join(self.plugins, "cuda_plugin.so"))
        self.fresh_images()
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        self.assertDumped(pids)
        shutil.copy(CRIU_CUDA_PLUGIN, self.plugins)
        r = self.inspect(self.images, 1)
        self.assertEqual([x["code"] for x in r.obj["reasons"] if x["blocks"]], ["criu-plugin-conflict"], r)
        c = self.restore()
        self.assertNotEqual(c.rc, 0, c)
        self.assertTrue(any("CRIU's CUDA plugin" in line for line in c.cudasnap_lines()), c)
        os.unlink(os.path.join(self.plugins, "cuda_plugin.so"))
        self.inspect(self.images, 0)
        c = self.restore(log="restore2.log")
        self.assertEqual(c.rc, 0, c)
        self.assertRunningAndOk(pids)

    def test_a_record_of_too_many_processes_is_refused_by_the_plugin_too(self):
        """The plugin parses the record as inspect does: one of 150,000
        processes is refused before it is parsed, and the restore fails at
        once, before CRIU creates a process."""
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        self.assertDumped(pids)
        with open(os.path.join(self.images, RECORD)) as f:
            rec = json.load(f)
        rec["processes"] = [{"pid": i + 1, "nspid": i + 1, "order": i, "start_time": 1, "comm": "a"}
                            for i in range(150000)]
        with open(os.path.join(self.images, RECORD), "w") as f:
            json.dump(rec, f, separators=(",", ":"))
        r = self.inspect(self.images, 2)
        self.assertIn("more than a record of 4096 processes has", r.obj["error"]["message"], r)
        c = self.restore()
        self.assertNotEqual(c.rc, 0, c)
        self.assertTrue(any("more than a record of 4096 processes has" in line for line in c.cudasnap_lines()), c)
        self.assertLess(c.wall, 20, c)

    def fresh_images(self):
        shutil.rmtree(self.images)
        os.makedirs(self.images)

    def test_images_of_a_tree_without_cuda(self):
        pids = self.tree("--no-init", expect=1)
        self.assertDumped(pids)
        r = self.inspect(self.images, 0)
        self.assertEqual((r.obj["gpu_part"], r.obj["record"]), (False, None), r)
        self.assertNotIn("cudasnap", r.obj["criu_plugins"] or [])


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    main()
