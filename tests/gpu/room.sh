#!/bin/bash
# tests/gpu/room.py on a GPU machine, after what the machine is:
#
#   tests/gpu/room.sh TOOLS OUT [room.py options...]
#
# as tests/gpu/safety.sh, whose TOOLS it takes; OUT receives room.json.
CHECKS=room exec "$(dirname "$0")/safety.sh" "$@"
