"""A process that looks like a parked process's interposer to cudasnap
(maps a file named libcudasnap-park.so, listens under the .cudasnap-park.
name) and answers every connection by dripping one byte every 0.5 s,
forever. argv[1]: a directory of its own; writes argv[1]/ready."""
import mmap
import os
import socket
import sys
import threading
import time

d = sys.argv[1]
lib = os.path.join(d, "libcudasnap-park.so")
with open(lib, "wb") as f:
    f.write(b"\0" * 4096)
f = open(lib, "rb")
m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(os.path.join(d, ".cudasnap-park.evil"))
s.listen(64)


def drip(c):
    try:
        while True:
            c.send(b"x")
            time.sleep(0.5)
    except OSError:
        pass


open(os.path.join(d, "ready"), "w").close()
while True:
    c, _ = s.accept()
    threading.Thread(target=drip, args=(c,), daemon=True).start()
