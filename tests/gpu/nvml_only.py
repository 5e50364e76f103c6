"""A process that only uses NVML (nvidia-ml-py), like a monitoring sidecar."""
import os
import sys
import time

import pynvml

pynvml.nvmlInit()
print(pynvml.nvmlDeviceGetCount(), file=sys.stderr)
path = os.path.join(sys.argv[1], f"{os.getpid()}.ready")
with open(path + ".tmp", "w") as f:
    f.write("nvml\n")
os.rename(path + ".tmp", path)
while True:
    time.sleep(3600)
