"""The programs the command analysis knows, as data: the wrappers that run the program
after their options, the programs that run a string as a command line, the variables and git
keys whose values programs run, and the syntax of ``env -S`` strings.

Nothing here decides anything: :mod:`._command` reads these tables. Each program is looked up
by its basename, case folded (see ``_program`` there).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal, TypeAlias

#: Which words before a wrapper's program are assignments: ``"shell"``, those the shell reads
#: as one (``NAME=`` or ``NAME+=`` written bare), or ``"env"``, any word holding ``=`` (as env
#: and sudo read them, after ``--`` too).
_Assignments: TypeAlias = Literal["shell", "env"]
#: How a wrapper reads its arguments: the options that take a value (in the next word unless
#: attached; ``None``: not modelled, so every word after it may be the program), how many
#: positional arguments precede the program (options may follow each), and which words
#: before the program are assignments, if any.
_Wrapper: TypeAlias = tuple[frozenset[str] | None, int, _Assignments | None]


def _wrapper(
    values: str | None = "", positional: int = 0, assignment: _Assignments | None = None
) -> _Wrapper:
    return (None if values is None else frozenset(values.split()), positional, assignment)


#: env's options that take a value (a cluster of short options ends at one of them).
_ENV_VALUES: Final = frozenset(
    {"-a", "-u", "-C", "-S", "--argv0", "--unset", "--chdir", "--split-string"}
)
#: uv's options that take a value (uv run, and uv tool run as uvx).
_UV_VALUES: Final = (
    "-p -f -C -P --python --with --with-editable --with-requirements --directory --project"
    " --env-file --extra --group --only-group --no-group --index --index-url --extra-index-url"
    " --default-index --find-links --package --config-file --cache-dir --color --config-setting"
    " --upgrade-package --reinstall-package --refresh-package --no-binary-package"
    " --no-build-package --index-strategy --keyring-provider --resolution --prerelease"
    " --exclude-newer --link-mode --python-platform --allow-insecure-host"
)
_SETARCH_ALIASES: Final = ("linux32", "linux64", "uname26", "i386", "x86_64", "aarch64")
#: Commands that run another command given after their options (each is looked up by its
#: basename, case folded; see ``_program`` in ``_command.py``). Options are listed as the
#: programs' manuals give them (coreutils, util-linux, procps, strace, sudo...); a wrapper
#: whose options are too many or too irregular to list is not modelled (``None``).
_WRAPPERS: Final[Mapping[str, _Wrapper]] = {
    # bash keywords: the simple command after them may start with NAME=value words
    "!": _wrapper(assignment="shell"),
    "coproc": _wrapper(assignment="shell"),
    "time": _wrapper("-f -o --format --output", assignment="shell"),
    # zsh's precommand modifiers and short loop, csh's repeat, fish's keywords
    "-": _wrapper(),
    "noglob": _wrapper(),
    "nocorrect": _wrapper(),
    "repeat": _wrapper("", 1),
    "not": _wrapper(assignment="shell"),
    "and": _wrapper(assignment="shell"),
    "or": _wrapper(assignment="shell"),
    "builtin": _wrapper(),
    "command": _wrapper(),
    "exec": _wrapper("-a"),
    "nohup": _wrapper(),
    "setsid": _wrapper(),
    "unbuffer": _wrapper(),
    "catchsegv": _wrapper(),
    "valgrind": _wrapper(),  # its options take values as --name=value only
    "busybox": _wrapper(),
    "toybox": _wrapper(),
    "nice": _wrapper("-n --adjustment"),
    "ionice": _wrapper("-c -n -p -P -u --class --classdata --pid --pgid --uid"),
    "stdbuf": _wrapper("-i -o -e --input --output --error"),
    "timeout": _wrapper("-s -k --signal --kill-after", 1),
    "chroot": _wrapper("--userspec --groups", 1),
    "runcon": _wrapper("-u -r -t -l --user --role --type --range", 1),
    "chrt": _wrapper("-T -P -D --sched-runtime --sched-period --sched-deadline", 1),
    "taskset": _wrapper("", 1),
    "setarch": _wrapper("", 1),
    **dict.fromkeys(_SETARCH_ALIASES, _wrapper()),
    "prlimit": _wrapper("-p -o --pid --output"),  # its limits take attached values only
    "choom": _wrapper("-n -p --adjust --pid"),
    "uclampset": _wrapper("-m -M -p --pid"),
    # -d/--differences takes an optional value, attached only
    "watch": _wrapper("-n -q -s --interval --equexit --shotsdir"),
    "doas": _wrapper("-u -C"),
    "env": (_ENV_VALUES, 0, "env"),
    "sudo": _wrapper(
        "-a -c -u -g -C -D -h -p -r -t -U -T -R --auth-type --login-class --user --group"
        " --close-from --chdir --host --prompt --role --type --other-user --command-timeout"
        " --chroot",
        assignment="env",
    ),
    "pkexec": _wrapper("--user"),
    "run0": _wrapper(
        "-u -g -D --user --group --chdir --unit --property --description --slice --nice"
        " --setenv --background --machine --shell-prompt-prefix --lightweight --area",
        assignment="env",
    ),
    "runuser": _wrapper(
        "-u -g -G -s -w -c --user --group --supp-group --shell --command --session-command"
        " --whitelist-environment"
    ),
    "su": _wrapper(
        "-c -s -g -G -w --command --session-command --shell --group --supp-group"
        " --whitelist-environment"
    ),
    "setpriv": _wrapper(
        "--ruid --euid --rgid --egid --reuid --regid --groups --inh-caps --ambient-caps"
        " --bounding-set --securebits --pdeathsig --selinux-label --apparmor-profile"
        " --landlock-access --landlock-rule --seccomp-filter"
    ),
    # the namespace options take optional values, attached only
    "unshare": _wrapper(
        "-R -w -S -G --root --wd --setuid --setgid --map-user --map-group --map-users"
        " --map-groups --propagation --setgroups --monotonic --boottime"
    ),
    "nsenter": _wrapper("-t -S -G -W --target --setuid --setgid --wdns"),
    "flock": _wrapper("-w -E -c --wait --timeout --conflict-exit-code --command", 1),
    "strace": _wrapper(
        "-a -b -e -E -I -o -O -p -P -s -S -u -U -X --columns --detach-on --trace --trace-fds"
        " --signal --status --quiet --abbrev --verbose --raw --read --write --fault --inject"
        " --kvm --trace-path --output --env --interruptible --attach --string-limit --user"
        " --summary-sort-by --summary-columns --const-print-style --summary-syscall-overhead"
        " --argv0 --decode-pids --decode-fds"
    ),
    "ltrace": _wrapper(
        "-a -A -D -e -F -l -n -o -p -s -u -w -x --align --debug --config --library --indent"
        " --output --where"
    ),
    "xargs": _wrapper(
        "-I -L -n -P -s -d -E -a -J -R -S --arg-file --delimiter --max-args --max-procs"
        " --max-chars --process-slot-var"
    ),
    "fakeroot": _wrapper("-l -i -s -b --lib --faked --fd-base"),
    "ssh-agent": _wrapper("-a -E -O -P -t"),
    "dbus-run-session": _wrapper("--config-file --dbus-daemon"),
    "ld.so": _wrapper(
        "--library-path --inhibit-rpath --audit --preload --argv0 --glibc-hwcaps-prefix"
        " --glibc-hwcaps-mask"
    ),
    "proxychains": _wrapper("-f"),
    "proxychains4": _wrapper("-f"),
    "torsocks": _wrapper("-u -p -a -P --user --pass --address --port"),
    "caffeinate": _wrapper("-t -w"),
    "daemonize": _wrapper("-c -e -o -p -l -u -E"),
    # container entry points and process supervisors (gosu, su-exec, tini, dumb-init,
    # catatonit; runit's chpst and the daemontools/s6 chain-loaders)
    "gosu": _wrapper("", 1),
    "su-exec": _wrapper("", 1),
    "tini": _wrapper("-p -e"),
    "dumb-init": _wrapper("-r --rewrite"),
    "catatonit": _wrapper(),
    "chpst": _wrapper("-u -U -b -e -/ -C -n -l -L -m -d -o -p -f -c"),
    "softlimit": _wrapper("-m -a -d -s -l -f -c -o -p -t -r"),
    "pgrphack": _wrapper(),
    **dict.fromkeys(("setuidgid", "envuidgid", "envdir", "s6-setuidgid"), _wrapper("", 1)),
    "s6-envdir": _wrapper("-c", 1),
    "setlock": _wrapper("", 1),
    # project and environment runners: their global options, the subcommand ("run",
    # "exec", "develop"...), its options, then the program. The options listed are the ones
    # that take a value; one missed is caught as a misread (see _suspects).
    "uv": _wrapper(_UV_VALUES, 1),
    "uvx": _wrapper(_UV_VALUES + " --from"),
    "poetry": _wrapper("-C --directory -P --project", 1),
    "pipenv": _wrapper("--python", 1),
    "pdm": _wrapper("-p --project", 1),
    "hatch": _wrapper("-e --env", 1),
    "rye": _wrapper("", 1),
    "pixi": _wrapper("-e --environment --manifest-path", 1),
    "tox": _wrapper("-e -c -x --conf --root --workdir --override", 1),
    **dict.fromkeys(("conda", "mamba", "micromamba"), _wrapper("-n -p --name --prefix --cwd", 1)),
    "npx": _wrapper("-p -c --package --call"),
    "npm": _wrapper("-p -c -w --package --call --workspace --prefix", 1),
    "pnpm": _wrapper("-C -F --dir --filter", 1),
    "pnpx": _wrapper(),
    "yarn": _wrapper("--cwd", 1),
    "bun": _wrapper("--cwd", 1),
    "bunx": _wrapper("-p --package"),
    "bundle": _wrapper("--gemfile", 1),
    "nix": _wrapper("-I --include --option --override-input --extra-experimental-features", 1),
    "direnv": _wrapper("", 2),  # direnv exec DIR PROGRAM
    "dotenv": _wrapper("-f -q -e --file --quote --export", 1),
    # launchers: X and D-Bus sessions, MPI and Slurm, GPU offload, compiler caches
    "xvfb-run": _wrapper(
        "-n -e -f -p -s -w --server-num --error-file --auth-file --xauth-protocol --server-args"
        " --wait"
    ),
    "dbus-launch": _wrapper("--config-file --autolaunch"),
    **dict.fromkeys(
        ("mpirun", "mpiexec"),
        _wrapper(
            "-n -c -N -H -f -x -np -ppn -wdir -hosts -hostfile -machinefile -mca --host"
            " --hostfile --machinefile --map-by --rank-by --bind-to --wdir --mca"
        ),
    ),
    "srun": _wrapper(
        "-N -n -c -p -t -J -A -q -w -x -o -e -D -C --nodes --ntasks --cpus-per-task --partition"
        " --time --job-name --account --qos --nodelist --exclude --output --error --chdir --mem"
        " --gres --constraint"
    ),
    **dict.fromkeys(("prime-run", "optirun", "primusrun", "ccache", "distcc"), _wrapper()),
    # moreutils, LD_PRELOAD shims, throttles
    "chronic": _wrapper(),
    "ifne": _wrapper(),
    "eatmydata": _wrapper(),
    "nocache": _wrapper(),
    "torify": _wrapper(),
    "tsocks": _wrapper(),
    "faketime": _wrapper("-p --date-prog", 1),
    "trickle": _wrapper("-d -u -w -t -l -n"),
    "cpulimit": _wrapper("-l -p -e --limit --pid --exe"),
    "systemd-inhibit": _wrapper("--what --who --why --mode"),
    "entr": _wrapper(),
    **dict.fromkeys(
        (
            "perf",
            "ip",
            "bwrap",
            "firejail",
            "proot",
            "numactl",
            "cgexec",
            "systemd-run",
            "start-stop-daemon",
            "parallel",  # GNU parallel, and sem (parallel --semaphore)
            "sem",
            "gdb",  # gdb -ex run --args PROGRAM
            "lldb",
            "rr",
        ),
        _wrapper(None),
    ),
}
#: Programs that run a string as a command line: name → the short option that says so (its
#: value, or an operand, is the string; ``""``: every operand may be one).
_STRING_RUNNERS: Final[Mapping[str, str]] = {
    **dict.fromkeys(
        ("sh", "bash", "rbash", "dash", "zsh", "ksh", "ksh93", "mksh", "oksh", "ash", "yash"),
        "c",
    ),
    **dict.fromkeys(("posh", "fish", "csh", "tcsh", "su", "runuser", "flock", "script"), "c"),
    "compgen": "C",  # bash builtins: compgen runs the string now, complete when completing
    "complete": "C",
    "mapfile": "C",  # and mapfile (readarray) for every few lines it reads
    "readarray": "C",
    "emulate": "c",  # zsh: emulate sh -c STRING
    "npx": "c",  # npx -c STRING, npm exec -c STRING: run in a shell
    "npm": "c",
    "sg": "",  # sg GROUP [-c] STRING
}
#: Shells that quote otherwise than POSIX shells (a backslash is an escape inside fish's single
#: quotes, ``\\x6d`` is ``m`` outside them; it is no escape inside csh's double quotes): a
#: string of theirs holding a backslash is not read (the line is denied).
_OTHER_QUOTING: Final = frozenset({"fish", "csh", "tcsh"})
#: The dynamic loader run as a program (``/lib64/ld-linux-x86-64.so.2 PROGRAM``).
_LOADER: Final = re.compile(r"ld(?:64)?(?:-[\w.-]+)?\.so(?:\.[\d.]+)?")

#: Variables whose value a program runs as a command line (pagers, editors, git's ssh and
#: askpass, less's preprocessor...): in ``NAME=value`` words, deny rules read the value too.
_COMMAND_VARIABLES: Final = frozenset(
    {
        "PAGER",
        "MANPAGER",
        "SYSTEMD_PAGER",
        "GIT_PAGER",
        "EDITOR",
        "VISUAL",
        "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "GIT_EXTERNAL_DIFF",
        "LESSOPEN",
        "LESSCLOSE",
        "BROWSER",
    }
)
#: git's global options that take a value in the next word (``-c`` aside).
_GIT_VALUES: Final = frozenset(
    {"-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)
#: git configuration keys whose value git runs (compared case folded): by prefix (any
#: alias, ``pager.<command>``) or by the end of the key (``core.pager``, ``core.editor``,
#: ``core.sshCommand``, ``credential.helper``, ``diff.external``, ``gpg.program``,
#: ``diff.<driver>.textconv``, ``filter.<driver>.smudge``, ``mergetool.<tool>.cmd``,
#: ``sendemail.toCmd``, ``uploadpack.packObjectsHook``...).
_GIT_COMMAND_PREFIXES: Final = ("alias.", "pager.")
_GIT_COMMAND_SUFFIXES: Final = (
    "pager",
    "editor",
    "command",
    "cmd",
    "program",
    "helper",
    "external",
    "textconv",
    "driver",
    "clean",
    "smudge",
    "process",
    "askpass",
    "fsmonitor",
    "gitproxy",
    "difffilter",
    "hook",
    "pack",
    "smtpserver",
)


#: Long options whose value is a command line: su's and runuser's ``--command`` and
#: ``--session-command``, and npm's and npx's ``--call`` (``npm exec --call='rm x'``).
_COMMAND_OPTIONS: Final = ("--command", "--session-command", "--call")

#: What ``env -S`` splits at, outside quotes.
_ENV_BLANKS: Final = " \t\n\v\f\r"
#: ``env -S``'s escapes: the character each stands for (``None``: ``\\_``, see
#: ``_env_split`` in ``_command.py``).
_ENV_ESCAPES: Final[Mapping[str, str | None]] = {
    **{c: c for c in "\"#$'\\"},
    **{"f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "_": None},
}
