# fish completion for cudasnap(1) and its cuda-checkpoint compatibility mode

set -l cudasnap_commands ps checkpoint restore lock unlock verify doctor inspect history run hook cuda-checkpoint

complete -c cudasnap -f
complete -c cudasnap -n "not __fish_seen_subcommand_from $cudasnap_commands" -a "$cudasnap_commands"
complete -c cudasnap -n "not __fish_seen_subcommand_from $cudasnap_commands" -s h -l help -d 'Show the help'
complete -c cudasnap -n "not __fish_seen_subcommand_from $cudasnap_commands" -s V -l version -d 'Show the version'

# One option a line: COMMANDS:SHORT:LONG:VALUE (pid, dir, file, a list of
# words, "value" for any other, empty for none). The same options as each
# command's --help, checked by the tests.
set -l txn 'checkpoint restore lock unlock'
for spec in \
    "$txn:p:pid:pid" "$txn::tree:pid" "$txn::cgroup:dir" "$txn::all:" \
    "$txn:t:timeout:value" "$txn::step-timeout:value" "$txn:j:jobs:value" "$txn::sequential:" \
    "$txn::dry-run:" "$txn::json:" \
    'checkpoint::strict:' 'checkpoint::ignore-memory:' 'checkpoint::allow-unrestorable:' \
    'checkpoint::no-park:' 'checkpoint::park-to:dir' \
    'restore:d:device-map:value' 'restore::no-init:' 'restore::ignore-manifest:' 'restore::wait-memory:value' \
    'restore::ignore-gpu-memory:' 'restore::keep:' 'restore::park-from:file' \
    'ps verify doctor inspect history hook::json:' \
    'inspect::timeout:value' 'inspect::max-bytes:value' 'inspect::max-ratio:value' \
    'history:n:count:value' 'history::mark-read:' \
    'hook::strict:' 'hook::no-strict:' 'hook:t:timeout:value' 'hook::deadline:value' 'hook::dry-run:' \
    'ps checkpoint restore lock unlock verify doctor inspect history run hook:h:help:' \
    'cuda-checkpoint::get-state:' 'cuda-checkpoint::get-restore-tid:' 'cuda-checkpoint::toggle:' \
    'cuda-checkpoint::action:lock checkpoint restore unlock' 'cuda-checkpoint:p:pid:pid' \
    'cuda-checkpoint:t:timeout:value' 'cuda-checkpoint:d:device-map:value' 'cuda-checkpoint:h:help:'
    set -l f (string split ':' -- $spec)
    set -l args -l $f[3]
    test -n "$f[2]"; and set -a args -s $f[2]
    switch "$f[4]"
        case pid
            set -a args -x -a '(__fish_complete_pids)'
        case dir
            set -a args -x -a '(__fish_complete_directories)'
        case file
            set -a args -r -F
        case value
            set -a args -x
        case ''
        case '*'
            set -a args -x -a "$f[4]"
    end
    complete -c cudasnap -n "__fish_seen_subcommand_from $f[1]" $args
    # the compatibility mode under its own name takes the same options
    test "$f[1]" = cuda-checkpoint; and complete -c cuda-checkpoint $args
end

# inspect takes a path, run a program and its arguments
complete -c cudasnap -n '__fish_seen_subcommand_from inspect' -F
complete -c cudasnap -n '__fish_seen_subcommand_from run' -a '(__fish_complete_subcommand --fcs-skip=2)'
complete -c cuda-checkpoint -f
