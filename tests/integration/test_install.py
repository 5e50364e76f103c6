#!/usr/bin/env python3
"""What `meson install` puts on a machine, checked in a staging directory.

Runs `meson install --destdir TMP` on the build directory and checks that:
  - bin/cudasnap is there, and bin/cuda-checkpoint is a link that resolves to it
    (invoked under that name, cudasnap takes NVIDIA's cuda-checkpoint command
    line, whose help must name --action for CRIU's CUDA plugin);
  - the library (shared and static), cudasnap.h and cudasnap.pc are there, and a
    small C program builds against them with `pkg-config --cflags --libs`
    (and with --static against libcudasnap.a) and runs;
  - the man page cudasnap(1) is in man1 and renders, names cudasnap(7) in
    SEE ALSO, and cuda-checkpoint(1) points to it; cudasnap(7) is in man7 and
    renders;
  - the bash completion is in share/bash-completion/completions, for both
    names, and offers every command and every option the --help texts list;
  - the installed binary needs nothing but glibc at run time (see GLIBC) and
    runs with an empty environment.

Environment (tests/integration/meson.build sets it):
  MESON_BUILD_ROOT   the build directory to install from (required)
  MESON_SOURCE_ROOT  the source directory
  CUDASNAP_SANITIZE  the build's b_sanitize option. In a sanitizer build
                     (-Db_sanitize=address,undefined) the binary needs libasan
                     and libubsan, so the glibc-only check is skipped there,
                     and the C program is built with the same sanitizers.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

BUILD = os.environ.get("MESON_BUILD_ROOT", "")
SOURCE = os.environ.get("MESON_SOURCE_ROOT", "")
SANITIZE = os.environ.get("CUDASNAP_SANITIZE", "none") or "none"

# Libraries of the GNU C library itself (glibc 2.34+ keeps libdl, libpthread
# and librt as empty compatibility stubs). Anything else in the binary's
# DT_NEEDED list would have to be installed next to it: json-c must be linked
# in statically, and libcuda / libnvidia-ml are loaded with dlopen.
GLIBC = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libresolv.so.2",
}

COMMANDS = ["ps", "checkpoint", "restore", "lock", "unlock", "verify", "doctor", "inspect", "history", "hook",
            "cuda-checkpoint"]

PROGRAM = textwrap.dedent("""\
    #include <cudasnap.h>
    #include <stdio.h>
    #include <string.h>

    int main(void)
    {
        const char *name = cs_state_name(CS_STATE_CHECKPOINTED);
        if (!name || strcmp(name, "checkpointed") != 0)
            return 1;
        if (cs_state_parse("locked") != CS_STATE_LOCKED)
            return 2;
        printf("libcudasnap ok: %s\\n", name);
        return 0;
    }
    """)


def run(argv, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run(argv, **kw)


def meson_command():
    exe = shutil.which("meson")
    return [exe] if exe else [sys.executable, "-m", "mesonbuild.mesonmain"]


def under(destdir, prefix, sub):
    """The staged path of an install directory (sub may be absolute)."""
    path = sub if os.path.isabs(sub) else os.path.join(prefix, sub)
    return os.path.join(destdir, path.lstrip("/"))


def help_options(text):
    """Long options that a --help text defines: those that start a line."""
    return set(re.findall(r"^\s*(?:-\w, )?(--[a-z][a-z-]*)", text, re.M))


class Installed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BUILD or not os.path.isdir(BUILD):
            raise unittest.SkipTest("MESON_BUILD_ROOT is not set: run this through 'meson test'")
        cls.meson = meson_command()
        opts = json.loads(run(cls.meson + ["introspect", "--buildoptions", BUILD], check=True).stdout)
        cls.opt = {o["name"]: o["value"] for o in opts}
        info = json.loads(run(cls.meson + ["introspect", "--projectinfo", BUILD], check=True).stdout)
        cls.version = info["version"]
        plan = json.loads(run(cls.meson + ["introspect", "--installed", BUILD], check=True).stdout)
        cls.man_planned = any(src.endswith(os.sep + "cudasnap.1") for src in plan)
        cls.man7_planned = any(src.endswith(os.sep + "cudasnap.7") for src in plan)

        cls.tmp = tempfile.mkdtemp(prefix="cudasnap-install-")
        cls.destdir = os.path.join(cls.tmp, "root")
        # The rebuild step of 'meson install' (no --no-rebuild) makes sure that
        # targets no test depends on, such as the man page, are up to date.
        p = run(cls.meson + ["install", "-C", BUILD, "--destdir", cls.destdir], timeout=600)
        if p.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise AssertionError(f"meson install failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")

        prefix = cls.opt["prefix"]
        cls.bindir = under(cls.destdir, prefix, cls.opt["bindir"])
        cls.libdir = under(cls.destdir, prefix, cls.opt["libdir"])
        cls.includedir = under(cls.destdir, prefix, cls.opt["includedir"])
        cls.man1 = os.path.join(under(cls.destdir, prefix, cls.opt["mandir"]), "man1")
        cls.man7 = os.path.join(under(cls.destdir, prefix, cls.opt["mandir"]), "man7")
        cls.completions = os.path.join(under(cls.destdir, prefix, cls.opt["datadir"]),
                                       "bash-completion", "completions")
        share = under(cls.destdir, prefix, cls.opt["datadir"])
        cls.fish = os.path.join(share, "fish", "vendor_completions.d")
        zdir = cls.opt.get("zsh_completions_dir") or os.path.join(prefix, cls.opt["datadir"], "zsh", "site-functions")
        cls.zsh = under(cls.destdir, prefix, zdir)
        cls.exe = os.path.join(cls.bindir, "cudasnap")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assertFile(self, path):
        self.assertTrue(os.path.isfile(path), f"not installed: {os.path.relpath(path, self.destdir)}")

    def assertLinkTo(self, link, target):
        rel = os.path.relpath(link, self.destdir)
        self.assertTrue(os.path.islink(link), f"{rel} is not a symbolic link")
        self.assertEqual(os.path.realpath(link), os.path.realpath(target),
                         f"{rel} -> {os.readlink(link)} does not resolve to {os.path.basename(target)}")
        # Relative, so that the link stays right when the tree is moved
        # (DESTDIR staging, packages).
        self.assertFalse(os.path.isabs(os.readlink(link)), f"{rel} is an absolute link")

    # --- the binary and its second name ----------------------------------

    def test_binary(self):
        self.assertFile(self.exe)
        self.assertTrue(os.access(self.exe, os.X_OK))

    def test_cuda_checkpoint_link(self):
        link = os.path.join(self.bindir, "cuda-checkpoint")
        self.assertLinkTo(link, self.exe)
        # argv[0] is the link's name, as when runsc or CRIU run it from PATH.
        p = run(["env", "-i", link, "--help"])
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("--action", p.stdout + p.stderr,
                      "CRIU's CUDA plugin disables itself unless 'cuda-checkpoint -h' names --action")

    def test_runs_with_empty_environment(self):
        p = run(["env", "-i", self.exe, "--version"])
        self.assertEqual(p.returncode, 0, p)
        self.assertEqual(p.stdout.strip(), f"cudasnap {self.version}")

    def test_needs_only_glibc(self):
        if SANITIZE != "none":
            self.skipTest(f"sanitizer build (b_sanitize={SANITIZE}): the binary needs the sanitizer "
                          "runtimes, so the glibc-only check applies to normal builds only")
        readelf = shutil.which("readelf")
        if not readelf:
            self.skipTest("readelf (binutils) is not installed")
        p = run([readelf, "-d", self.exe], check=True)
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", p.stdout))
        self.assertTrue(needed, "no NEEDED entries: is the binary static?")
        self.assertFalse(needed - GLIBC, f"the binary needs libraries other than glibc's: "
                         f"{sorted(needed - GLIBC)} (all: {sorted(needed)})")
        for lib in ("libjson-c", "libcuda", "libnvidia-ml"):
            self.assertFalse(any(n.startswith(lib) for n in needed), lib)

    # --- the CRIU plugin --------------------------------------------------

    def plugin_path(self):
        return os.path.join(under(self.destdir, "/", self.opt.get("criu_plugin_dir", "/usr/lib/criu")),
                            "cudasnap_plugin.so")

    def test_criu_plugin(self):
        path = self.plugin_path()
        self.assertFile(path)
        nm = shutil.which("nm")
        if not nm:
            self.skipTest("nm (binutils) is not installed")
        p = run([nm, "-D", "--defined-only", path], check=True)
        # AddressSanitizer adds its own __odr_asan markers to exported data.
        exported = {line.split()[-1] for line in p.stdout.splitlines()
                    if len(line.split()) == 3 and not line.split()[-1].startswith("__odr_asan")}
        self.assertEqual(exported, {"CR_PLUGIN_DESC"}, "the plugin exports its descriptor and nothing else")

    def test_criu_plugin_needs_only_glibc(self):
        if SANITIZE != "none":
            self.skipTest(f"sanitizer build (b_sanitize={SANITIZE})")
        readelf = shutil.which("readelf")
        if not readelf:
            self.skipTest("readelf (binutils) is not installed")
        p = run([readelf, "-d", self.plugin_path()], check=True)
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", p.stdout))
        self.assertFalse(needed - GLIBC, f"the plugin needs libraries other than glibc's: {sorted(needed - GLIBC)}")
        # No thread of the plugin's runs in CRIU's process (criu/helper.h), so
        # CRIU may unload it.
        self.assertNotIn("NODELETE", p.stdout)

    # --- the library -----------------------------------------------------

    def test_library_files(self):
        v = self.version
        for name in (f"libcudasnap.so.{v}", "libcudasnap.a"):
            self.assertFile(os.path.join(self.libdir, name))
        self.assertLinkTo(os.path.join(self.libdir, "libcudasnap.so.0"),
                          os.path.join(self.libdir, f"libcudasnap.so.{v}"))
        self.assertLinkTo(os.path.join(self.libdir, "libcudasnap.so"),
                          os.path.join(self.libdir, f"libcudasnap.so.{v}"))
        self.assertFile(os.path.join(self.includedir, "cudasnap.h"))
        self.assertFile(os.path.join(self.libdir, "pkgconfig", "cudasnap.pc"))

    def pkg_config(self, *args):
        env = dict(os.environ,
                   PKG_CONFIG_PATH=os.path.join(self.libdir, "pkgconfig"),
                   PKG_CONFIG_SYSROOT_DIR=self.destdir)
        p = run(["pkg-config", *args, "cudasnap"], env=env)
        self.assertEqual(p.returncode, 0, f"pkg-config {' '.join(args)} cudasnap: {p.stderr}")
        return shlex.split(p.stdout)

    def compile(self, name, flags):
        cc = shlex.split(os.environ.get("CC", "cc"))
        if not shutil.which(cc[0]):
            self.skipTest(f"no C compiler ({cc[0]})")
        if SANITIZE != "none":
            # The library of a sanitizer build needs the sanitizer runtime
            # loaded first, so the program is built the same way.
            cc.append(f"-fsanitize={SANITIZE}")
        src = os.path.join(self.tmp, "prog.c")
        with open(src, "w") as f:
            f.write(PROGRAM)
        out = os.path.join(self.tmp, name)
        p = run(cc + ["-o", out, src] + flags)
        self.assertEqual(p.returncode, 0, f"{' '.join(cc + flags)}\n{p.stderr}")
        return out

    def test_pkg_config(self):
        if not shutil.which("pkg-config"):
            self.skipTest("pkg-config is not installed")
        self.assertEqual(self.pkg_config("--modversion"), [self.version])
        flags = self.pkg_config("--cflags", "--libs")
        self.assertIn("-lcudasnap", flags)
        prog = self.compile("prog-shared", flags)
        p = run([prog], env=dict(os.environ, LD_LIBRARY_PATH=self.libdir))
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("libcudasnap ok: checkpointed", p.stdout)
        ldd = shutil.which("ldd")
        if ldd:
            p = run([ldd, prog], env=dict(os.environ, LD_LIBRARY_PATH=self.libdir))
            self.assertIn(os.path.join(self.libdir, "libcudasnap.so.0"), p.stdout)

    def test_pkg_config_static(self):
        # libcudasnap.a does not contain json-c: the .pc file must bring it in
        # (Requires.private) for a static link.
        if not shutil.which("pkg-config"):
            self.skipTest("pkg-config is not installed")
        flags = self.pkg_config("--static", "--cflags", "--libs")
        self.assertIn("-ljson-c", flags, "Requires.private must name json-c for static links")
        flags = ["-l:libcudasnap.a" if f == "-lcudasnap" else f for f in flags]
        prog = self.compile("prog-static", flags)
        p = run([prog])
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("libcudasnap ok: checkpointed", p.stdout)

    # --- the man page ----------------------------------------------------

    def man_page(self):
        page = os.path.join(self.man1, "cudasnap.1")
        if not self.man_planned:
            self.skipTest("the build was configured without scdoc, so cudasnap(1) is not built "
                          "(scripts/deps.sh installs scdoc; then reconfigure)")
        self.assertFile(page)
        return page

    def test_man_page_roff(self):
        with open(self.man_page()) as f:
            roff = f.read()
        self.assertRegex(roff, r'(?im)^\.TH "?cudasnap"? "?1"?')
        for section in ("NAME", "SYNOPSIS", "COMMANDS", "OPTIONS", "ENVIRONMENT", "FILES",
                        "EXIT STATUS", "EXAMPLES"):
            self.assertRegex(roff, rf'(?m)^\.SH "?{section}"?$')
        for var in ("CUDASNAP_LIBCUDA", "CUDASNAP_LIBNVML", "CUDASNAP_DEV_DIR", "CUDASNAP_STATE_DIR",
                    "CUDASNAP_HOOK_STRICT", "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"):
            self.assertIn(var, roff.replace("\\_", "_"))

    def render(self, page):
        man = shutil.which("man")
        if not man:
            self.skipTest("man is not installed (the roff is checked by test_man_page_roff)")
        p = run([man, "-l", page], env=dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="80",
                                              LC_ALL="C.UTF-8"))
        self.assertEqual(p.returncode, 0, p)
        return p.stdout

    def test_man_page_renders(self):
        text = self.render(self.man_page())
        self.assertIn("cudasnap(1)", text)
        self.assertIn("EXIT STATUS", text)
        for cmd in COMMANDS:
            self.assertRegex(text, rf"(?m)^\s+{re.escape(cmd)}\b", f"no entry for {cmd}")
        see_also = text.rsplit("SEE ALSO", 1)[-1]
        self.assertIn("cudasnap(7)", see_also, "cudasnap(1)'s SEE ALSO does not name cudasnap(7)")

    def man7_page(self):
        page = os.path.join(self.man7, "cudasnap.7")
        if not self.man7_planned:
            self.skipTest("the build was configured without scdoc, so cudasnap(7) is not built "
                          "(scripts/deps.sh installs scdoc; then reconfigure)")
        self.assertFile(page)
        return page

    def test_man7_page_roff(self):
        with open(self.man7_page()) as f:
            roff = f.read()
        self.assertRegex(roff, r'(?im)^\.TH "?cudasnap"? "?7"?')
        for section in ("NAME", "COMMANDS IN DETAIL", "BEFORE ANYTHING CHANGES", "FILES", "SEE ALSO"):
            self.assertRegex(roff, rf'(?m)^\.SH "?{section}"?$')

    def test_man7_page_renders(self):
        text = self.render(self.man7_page())
        self.assertIn("cudasnap(7)", text)
        self.assertIn("BEFORE ANYTHING CHANGES", text)
        self.assertIn("cudasnap(1)", text.rsplit("SEE ALSO", 1)[-1])

    def test_man_link(self):
        self.man_page()
        self.assertLinkTo(os.path.join(self.man1, "cuda-checkpoint.1"), os.path.join(self.man1, "cudasnap.1"))

    # --- bash completion -------------------------------------------------

    def complete(self, words):
        """What the installed completion offers after the given words."""
        script = os.path.join(self.completions, "cudasnap")
        quoted = " ".join(shlex.quote(w) for w in words)
        prog = textwrap.dedent(f"""\
            source {shlex.quote(script)} || exit 3
            COMP_WORDS=({quoted} '')
            COMP_CWORD={len(words)}
            fn=$(complete -p {shlex.quote(words[0])} | sed -n 's/.*-F \\([^ ]*\\) .*/\\1/p')
            [ -n "$fn" ] || exit 4
            "$fn"
            printf '%s\\n' "${{COMPREPLY[@]}}"
            """)
        p = run(["bash", "--norc", "--noprofile", "-c", prog])
        self.assertEqual(p.returncode, 0, p)
        return set(p.stdout.split())

    def test_completion_files(self):
        self.assertFile(os.path.join(self.completions, "cudasnap"))
        self.assertLinkTo(os.path.join(self.completions, "cuda-checkpoint"),
                          os.path.join(self.completions, "cudasnap"))

    def test_completion_commands(self):
        if not shutil.which("bash"):
            self.skipTest("bash is not installed")
        listed = self.help_commands()
        self.assertTrue(set(COMMANDS) <= listed, f"--help lists {sorted(listed)}")
        self.assertEqual(self.complete(["cudasnap"]), listed)

    def test_completion_options(self):
        """Every option a command's --help defines is completed, and no other."""
        if not shutil.which("bash"):
            self.skipTest("bash is not installed")
        for cmd in COMMANDS:
            with self.subTest(command=cmd):
                p = run([self.exe, cmd, "--help"])
                self.assertEqual(p.returncode, 0, p)
                documented = help_options(p.stdout)
                self.assertIn("--help", documented)
                offered = {w for w in self.complete(["cudasnap", cmd, "--"]) if w.startswith("--")}
                self.assertEqual(offered, documented, f"cudasnap {cmd}: completion vs --help")
        p = run([os.path.join(self.bindir, "cuda-checkpoint"), "--help"])
        offered = {w for w in self.complete(["cuda-checkpoint", "--"]) if w.startswith("--")}
        self.assertEqual(offered, help_options(p.stdout), "cuda-checkpoint: completion vs --help")
        self.assertEqual(self.complete(["cuda-checkpoint", "--action"]),
                         {"lock", "checkpoint", "restore", "unlock"})

    # --- fish and zsh completion ------------------------------------------

    def documented(self, cmd):
        p = run([self.exe, cmd, "--help"] if cmd != "cuda-checkpoint" else
                [os.path.join(self.bindir, "cuda-checkpoint"), "--help"])
        self.assertEqual(p.returncode, 0, p)
        return help_options(p.stdout)

    def help_commands(self):
        p = run([self.exe, "--help"], check=True)
        return set(re.findall(r"(?m)^  ([a-z][a-z-]+)  ", p.stdout.split("Commands:")[1].split("Options:")[0]))

    def test_fish_and_zsh_completion_files(self):
        self.assertFile(os.path.join(self.fish, "cudasnap.fish"))
        self.assertLinkTo(os.path.join(self.fish, "cuda-checkpoint.fish"), os.path.join(self.fish, "cudasnap.fish"))
        self.assertFile(os.path.join(self.zsh, "_cudasnap"))

    def fish_complete(self, line):
        prog = f"source {shlex.quote(os.path.join(self.fish, 'cudasnap.fish'))}; complete -C {shlex.quote(line)}"
        p = run(["fish", "--no-config", "-c", prog])
        self.assertEqual(p.returncode, 0, p)
        return {ln.split("\t")[0] for ln in p.stdout.splitlines()}

    def test_fish_completion(self):
        """fish offers the commands --help lists, and for each command
        every option its --help defines, and no other."""
        if not shutil.which("fish"):
            self.skipTest("fish is not installed")
        self.assertEqual(self.fish_complete("cudasnap "), self.help_commands())
        for cmd in COMMANDS:
            with self.subTest(command=cmd):
                offered = {w for w in self.fish_complete(f"cudasnap {cmd} --") if w.startswith("--")}
                self.assertEqual(offered, self.documented(cmd), f"cudasnap {cmd}: fish vs --help")
        offered = {w for w in self.fish_complete("cuda-checkpoint --") if w.startswith("--")}
        self.assertEqual(offered, self.documented("cuda-checkpoint"))
        self.assertEqual(self.fish_complete("cuda-checkpoint --action "), {"lock", "checkpoint", "restore", "unlock"})

    def zsh_specs(self, *words, service="cudasnap"):
        """The option specs the zsh completion hands _arguments for the
        command words (zsh's own _arguments stood in for by one that prints
        them, the top level's left out), or the commands it offers."""
        script = os.path.join(self.zsh, "_cudasnap")
        prog = textwrap.dedent(f"""\
            _arguments() {{ if [[ $1 == -C ]]; then (( $#words )) && state=argument || state=command; return; fi
                print -rl -- "$@" }}
            _describe() {{ print -rl -- ${{(P)${{@[-1]}}}} }}
            service={shlex.quote(service)}
            words=({" ".join(shlex.quote(w) for w in words)})
            source {shlex.quote(script)}
            """)
        p = run(["zsh", "-f", "-c", prog])
        self.assertEqual(p.returncode, 0, p)
        return p.stdout

    def test_zsh_completion(self):
        """zsh offers the commands --help lists, and for each command
        every option its --help defines, and no other."""
        if not shutil.which("zsh"):
            self.skipTest("zsh is not installed")
        out = self.zsh_specs()
        listed = set(re.findall(r"(?m)^([a-z][a-z-]+):", out))
        self.assertEqual(listed, self.help_commands())
        spec = re.compile(r"(?m)^(?:\([^)]*\))?\*?(--[a-z][a-z-]*)\[")
        for cmd in COMMANDS:
            with self.subTest(command=cmd):
                out = self.zsh_specs(cmd) if cmd != "cuda-checkpoint" else self.zsh_specs(service=cmd)
                self.assertEqual(set(spec.findall(out)), self.documented(cmd), f"cudasnap {cmd}: zsh vs --help")


if __name__ == "__main__":
    unittest.main(verbosity=2)
