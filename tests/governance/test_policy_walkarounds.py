"""Walk-arounds of the permission policy: lines that once got past its deny rules or cost.

Each line below ran ``rm`` (or would have, on the shell or program it names) past a ``"rm *"``
deny rule, and was only escalated by ``PermissionPolicy.safe()`` instead of denied; or made a
single check cost seconds and hundreds of megabytes.

- ``env -S`` splits its string by its own rules, not the shell's: inside its single quotes
  ``\\'`` is an escape, and ``\\n`` outside them is a newline, which a shell given the word
  runs as a line break (checked against GNU coreutils' env).
- A newline ends a command, as ``;`` does; deny rules read it as a blank.
- Programs that run the program after their options (coreutils' ``runcon``, util-linux's
  ``choom``, ``uclampset``) or a string (bash's ``mapfile -C``, zsh's ``emulate -c``), and the
  keywords of other shells that do (zsh's ``noglob``, ``nocorrect``, ``-``, ``repeat N``;
  fish's ``not``, ``and``, ``or``), were not in the analysis' tables; zsh runs ``=rm`` as
  rm's full path.
- fish and csh quote otherwise than POSIX shells: their strings were read with sh's rules.
- Nested wrappers each read as a copy of the rest of the line, and ``eval`` chains that
  parse the rest of the line again, multiplied a 64 KiB line's cost by up to 32.
"""

from __future__ import annotations

import pytest

from lionexec.governance import PermissionPolicy

#: A deny list as the docs write one: everything allowed but rm.
DENY_RM = PermissionPolicy(
    mode="rules",
    allow={"bash": ["*"], "zsh": ["*"]},
    deny={"bash": ["rm", "rm *"], "zsh": ["rm", "rm *"]},
)


def assert_denied(command: str, tool: str = "bash") -> None:
    deny_list = DENY_RM.check(tool, command, {})
    safe = PermissionPolicy.safe().check("bash", command, {})
    assert (deny_list.behavior, safe.behavior) == ("deny", "deny"), (
        f"{command!r}: deny list -> {deny_list.behavior} ({deny_list.reason}); "
        f"safe() -> {safe.behavior} ({safe.reason})"
    )


def assert_allowed(command: str) -> None:
    decision = DENY_RM.check("bash", command, {})
    assert decision.behavior == "allow", f"{command!r}: {decision.reason}"


# -- env -S ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        # env: 'A=\' X ' is one word, the assignment A="' X ", so rm is the program; sh's
        # rules (shlex) read the words A=\, X and " rm -rf /  \".
        r"""env -S "'A=\' X ' rm -rf /  \'" """.strip(),
        r"""env -S "'A=\\' X ' rm -rf /  \'" """.strip(),
        # env makes \n a newline: sh -c runs "echo A" and then "rm -rf /"
        r"""env -S 'sh -c "echo A\nrm -rf /"'""",
        r"""env -S "sh -c 'echo A'\n'rm -rf /'" """.strip(),
        # \_ separates words outside double quotes; a word starting with # ends the string
        r"""env -S 'A=1\_rm -rf /'""",
        r"""env -S 'rm -rf / #x'""",
    ],
)
def test_env_split_strings_are_split_as_env_splits_them(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "env -S 'ls -l' /tmp",
        r"""env -S "A=1 'ls' \"-l\"" """.strip(),
        r"""env -S 'sh -c "ls\tx"'""",  # a tab inside sh's string: "ls x"
        "env -S 'ls #rm -rf /'",  # a comment
        r"env -S 'ls \c rm -rf /'",  # \c ends the string
    ],
)
def test_ordinary_env_split_strings_are_still_allowed(command: str) -> None:
    assert_allowed(command)


@pytest.mark.parametrize(
    "command",
    [
        "env -S 'ls \\q'",  # env refuses an unknown escape...
        'env -S "ls \'x"',  # ... and an unbalanced quote: the line is not read
    ],
)
def test_an_env_split_string_env_would_refuse_is_denied(command: str) -> None:
    decision = DENY_RM.check("bash", command, {})
    assert decision.behavior == "deny" and "env -S string" in decision.reason


# -- newlines -------------------------------------------------------------------------------


def test_a_newline_ends_a_command_for_deny_rules_too() -> None:
    # Only an allow rule naming the line exactly admits a newline; a deny rule still wins.
    policy = PermissionPolicy(
        mode="rules", allow={"bash": ["ls\nrm -rf /tmp/x"]}, deny={"bash": ["rm *"]}
    )
    decision = policy.check("bash", "ls\nrm -rf /tmp/x", {})
    assert decision.behavior == "deny" and decision.matched_rule == "rm *"
    assert DENY_RM.check("bash", "sh -c 'ls\nrm -rf /'", {}).matched_rule == "rm *"
    ok = PermissionPolicy(mode="rules", allow={"bash": ["ls\nls -l"]}, deny={"bash": ["rm *"]})
    assert ok.check("bash", "ls\nls -l", {}).behavior == "allow"


# -- programs that run programs -------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "runcon -t unconfined_t rm -rf /",  # coreutils
        "runcon system_u:system_r:unconfined_t:s0 /bin/rm -rf /",
        "choom -n 0 rm -rf /",  # util-linux
        "choom -n 0 -- rm -rf /",
        "uclampset -m 0 -M 512 rm -rf /",
        'mapfile -C "rm -rf /tmp/x" -c 1 lines',  # bash runs the callback per line read
        "readarray -tC 'rm -rf /tmp/x' -c 1",
        "emulate sh -c 'rm -rf /'",  # zsh
        "emulate -L sh -c 'rm -rf /'",
    ],
)
def test_more_programs_that_run_a_program_or_a_string(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "gosu root rm -rf /",  # container entry points
        "su-exec root:root rm -rf /",
        "tini -- rm -rf /",
        "tini -s -p SIGKILL rm -rf /",
        "dumb-init -r 15:9 rm -rf /",
        "catatonit -- rm -rf /",
        "chpst -u root -/ /srv rm -rf /",  # runit
        "softlimit -m 100000 rm -rf /",  # daemontools and s6 chain-loaders
        "setuidgid root rm -rf /",
        "envuidgid root rm -rf /",
        "envdir ./env rm -rf /",
        "s6-setuidgid root rm -rf /",
        "s6-envdir -c x ./env rm -rf /",
        "setlock /tmp/lock rm -rf /",
        "pgrphack rm -rf /",
        "chronic rm -rf /",  # moreutils
        "ifne -n rm -rf /",
        "eatmydata rm -rf /",  # LD_PRELOAD shims
        "nocache rm -rf /",
        "torify rm -rf /",
        "tsocks rm -rf /",
        "faketime -f '2020-01-01 00:00:00' rm -rf /",
        "faketime 2020-01-01 rm -rf /",
        "trickle -d 10 -u 10 rm -rf /",
        "cpulimit -l 50 -- rm -rf /",
        "systemd-inhibit --why backup rm -rf /",
        "entr -r rm -rf /",
        "parallel rm ::: /a /b",  # GNU parallel (its options are not modelled)
        "parallel -j 4 --halt now,fail=1 rm -rf ::: /a",
        "sem -j 2 rm -rf /",
        "gdb -batch -ex run --args rm -rf /",  # debuggers run their program
        "lldb -o run -- rm -rf /",
        "rr record rm -rf /",
    ],
)
def test_supervisors_shims_and_debuggers_run_the_program_after_them(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "gosu app ls -l",
        "tini -- ls",
        "chpst -u app ls",
        "envdir ./env ls",
        "parallel echo ::: a b",
        "faketime 2020-01-01 date",
        "gdb -batch -ex bt ./a.out",
    ],
)
def test_ordinary_lines_of_supervisors_shims_and_debuggers_are_still_allowed(
    command: str,
) -> None:
    assert_allowed(command)


@pytest.mark.parametrize(
    "command",
    [
        "uv run rm -rf /",  # project runners
        "uv run --with httpx -- rm -rf /",
        "uvx --from coreutils rm -rf /",
        "poetry run rm -rf /",
        "pipenv run rm -rf /",
        "pdm run rm -rf /",
        "hatch run rm -rf /",
        "rye run rm -rf /",
        "pixi run rm -rf /",
        "tox exec -- rm -rf /",
        "conda run -n base rm -rf /",
        "mamba run -n base rm -rf /",
        "micromamba run -n base rm -rf /",
        "npx rm -rf /",
        "npm exec -- rm -rf /",
        "pnpm exec rm -rf /",
        "pnpx rm -rf /",
        "yarn exec rm -rf /",
        "bun x rm -rf /",
        "bunx rm -rf /",
        "bundle exec rm -rf /",
        "nix develop -c rm -rf /",
        "nix shell nixpkgs#coreutils -c rm -rf /",
        "direnv exec . rm -rf /",
        "dotenv run -- rm -rf /",
        "xvfb-run -a rm -rf /",  # launchers
        "dbus-launch rm -rf /",
        "mpirun -np 2 rm -rf /",
        "mpiexec -n 2 rm -rf /",
        "srun -N 1 rm -rf /",
        "prime-run rm -rf /",
        "optirun rm -rf /",
        "primusrun rm -rf /",
        "ccache rm -rf /",
        "distcc rm -rf /",
        "npx -c 'rm -rf /'",  # npx -c and npm exec -c run a string in a shell
        "npm exec -c 'rm -rf /'",
        "npx --package=x -c 'ls; rm -rf /'",
    ],
)
def test_project_runners_and_launchers_run_the_program_after_them(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "uv run pytest " + " ".join(f"tests/test_{i}.py" for i in range(100)),
        "npm install " + " ".join(f"package-{i}" for i in range(60)),
        "ccache gcc " + " ".join(f"-DFLAG_{i}=1" for i in range(80)) + " -c x.c -o x.o",
        "mpirun -np 4 ./app " + " ".join(f"--opt{i}" for i in range(50)),
    ],
)
def test_a_long_line_behind_a_runner_is_still_allowed(command: str) -> None:
    """The runners' options are modelled, so their arguments are not each tried as the
    program (each would cost a layer of the 32 a line may nest)."""
    assert_allowed(command)


@pytest.mark.parametrize(
    "command",
    [
        "uv run pytest -q",
        "poetry install --no-root",
        "npm test",
        "npx prettier --write .",
        "nix develop -c make",
        "conda install numpy",
        "bundle exec rake",
        "mpirun -np 4 ./app",
        "xvfb-run -a pytest",
        "ccache gcc -c x.c",
    ],
)
def test_ordinary_lines_of_project_runners_and_launchers_are_still_allowed(command: str) -> None:
    assert_allowed(command)


@pytest.mark.parametrize(
    "command",
    [
        "=rm -rf /",  # zsh: =rm is rm's full path
        "=env rm -rf /",
        "zsh -c '=rm -rf /'",
        "noglob rm -rf /",  # zsh's precommand modifiers
        "nocorrect rm -rf /",
        "- rm -rf /",
        "repeat 1 rm -rf /",  # zsh's short loop, csh's repeat
        "repeat 2 /bin/rm -rf /",
        "fish -c 'not rm -rf /'",  # fish's keywords
        "fish -c 'and rm -rf /'",
        "fish -c 'or rm -rf /'",
    ],
)
def test_other_shells_keywords_and_expansions(command: str) -> None:
    assert_denied(command)


def test_a_zsh_tool_is_read_with_zsh_expansions() -> None:
    # A tool named zsh takes a command; zsh runs =rm as /usr/bin/rm.
    assert DENY_RM.check("zsh", "=rm -rf /", {}).behavior == "deny"
    assert DENY_RM.check("zsh", "=ls -l", {}).behavior == "allow"


@pytest.mark.parametrize(
    "command",
    [
        r"fish -c 'r\x6d -rf /'",  # fish: \x6d outside quotes is "m"
        r"""fish -c "A='\\' x ' rm -rf / \\'" """.strip(),  # fish: \' inside '...'
        r"""tcsh -c 'env "A=\" rm -rf / "\"'""",  # csh: no escape inside "..."
        r"""csh -c 'env "A=\" rm -rf / "\"'""",
    ],
)
def test_strings_of_shells_that_quote_otherwise_are_not_read_as_sh(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "fish -c 'ls -l'",
        "tcsh -c 'ls -l'",
        "zsh -c 'ls -l'",
        "repeat 3 ls",
        "choom -n 5 ls -l",
        "runcon -t x ls",
        "mapfile -t lines",
        "=ls -l",
    ],
)
def test_ordinary_lines_of_those_programs_are_still_allowed(command: str) -> None:
    assert_allowed(command)


# -- bounded cost ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_nested_wrappers_cannot_multiply_the_copies_deny_rules_read() -> None:
    # 31 wrappers with 120 options each: every option word is read as a possible program,
    # with the rest of the line, 64 KiB. It cost ~1.3 s and ~470 MB; now it is denied.
    head = ("nohup " + "-x " * 120) * 31
    command = head + "ls " + "y" * (65_530 - len(head))
    decision = DENY_RM.check("bash", command, {})
    assert decision.behavior == "deny" and "too costly to analyse" in decision.reason
    assert PermissionPolicy.safe().check("bash", command, {}).behavior == "deny"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("word", ["eval", "watch"])
def test_nested_strings_cannot_multiply_the_parsing(word: str) -> None:
    # Each eval (watch) parses the rest of the line again: up to 32 times 64 KiB.
    head = f"{word} " * 10
    command = head + "ls " + "y" * (65_530 - len(head))
    decision = DENY_RM.check("bash", command, {})
    assert decision.behavior == "deny" and "too costly to analyse" in decision.reason


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "command",
    [
        "sudo -u root nice -n 5 ionice -c3 timeout 5 ls " + "y" * 60_000,
        "sh -c 'ls " + "y" * 60_000 + "'",
        "eval ls " + "y" * 60_000,
        "nohup " + "-x " * 12 + "ls " + "y" * 60_000,
    ],
)
def test_a_long_line_with_a_few_layers_is_still_read(command: str) -> None:
    assert_allowed(command)


@pytest.mark.parametrize(
    ("subject", "behavior"),
    [
        ("/home/u/.ssh/id_rsa", "deny"),  # absolute: was admitted by the allow rule "**"
        ("home/u/.ssh/id_rsa", "deny"),
        ("/.ssh/config", "deny"),
        (".ssh/config", "deny"),
        ("/home/u/notes.txt", "allow"),
        ("/home/u/.sshx/a", "allow"),
    ],
)
def test_a_deny_pattern_starting_with_globstar_holds_for_absolute_paths(
    subject: str, behavior: str
) -> None:
    policy = PermissionPolicy(mode="rules", allow={"read": ["**"]}, deny={"read": ["**/.ssh/**"]})
    assert policy.check("read", subject, {}, kind="path").behavior == behavior


def test_other_relative_patterns_still_name_relative_paths_only() -> None:
    policy = PermissionPolicy(mode="rules", allow={"read": ["data/**", "/srv/**"]})
    assert policy.check("read", "data/a", {}, kind="path").behavior == "allow"
    assert policy.check("read", "/data/a", {}, kind="path").behavior == "deny"
    assert policy.check("read", "/srv/a", {}, kind="path").behavior == "allow"
    assert policy.check("read", "srv/a", {}, kind="path").behavior == "deny"


@pytest.mark.parametrize("command", ["env -S '\\rm -rf /'", "env -S 'r\\tm -rf /'", "$'\\r'm x"])
def test_a_program_named_with_a_control_character_is_denied(command: str) -> None:
    # env -S makes "\r" a carriage return in the word: no program is named so, and a line
    # that names one is not one to guess about
    assert_denied(command)


@pytest.mark.parametrize(
    ("parameter", "kind"),
    [
        ("filePath", "path"),
        ("FILE_PATH", "path"),
        ("file-name", "path"),
        ("dir_path", "path"),
        ("folder", "path"),
        ("Command", "command"),
        ("command_line", "command"),
        ("commandLine", "command"),
        ("query", "text"),
        ("profile", "text"),
    ],
)
def test_subject_kinds_are_inferred_whatever_the_names_case_and_separators(
    parameter: str, kind: str
) -> None:
    from lionexec.governance import subject_kind_of
    from lionexec.tools import Tool
    from lionexec.tools._schema import openai_schema

    def tool(**kwargs: str) -> str:  # pragma: no cover - never called
        return ""

    parameters = {"type": "object", "properties": {parameter: {"type": "string"}}}
    schema = openai_schema("reader", "", parameters)
    made = Tool(func_callable=tool, name="reader", schema=schema, subject=parameter)
    assert subject_kind_of(made) == kind


def test_a_camel_case_path_parameter_cannot_climb_out_of_an_allowed_directory() -> None:
    # read as text, "/data/*" matched "/data/../etc/passwd" (a glob's * spans anything)
    from lionexec.governance import subject_kind_of
    from lionexec.tools import Tool

    def read(filePath: str) -> str:  # (the name a model-facing schema may use)
        return filePath  # pragma: no cover - never called

    tool = Tool.from_function(read, subject="filePath")
    policy = PermissionPolicy(mode="rules", allow={"read": ["/data/*"]})
    kind = subject_kind_of(tool)
    assert policy.check("read", "/data/../etc/passwd", {}, kind=kind).behavior == "deny"
    assert policy.check("read", "/data/notes", {}, kind=kind).behavior == "allow"


@pytest.mark.parametrize(
    ("kind", "subject"),
    [
        ("command", "rm " + "x" * 60_000),
        ("command", "ls " + "y" * 60_000 + "; rm"),
        ("path", "../" + "z" * 60_000),
        ("text", "$(" + "w" * 60_000),
        ("text", ["v" * 60_000]),
    ],
)
def test_a_denial_quotes_a_huge_subject_cut_short(kind: str, subject: object) -> None:
    policy = PermissionPolicy(mode="rules", deny={"t": ["rm *"]}, allow={"t": ["ls *"]})
    decision = policy.check("t", subject, {}, kind=kind)  # type: ignore[arg-type]
    assert decision.behavior == "deny"
    assert len(decision.reason) < 400, decision.reason[:500]
    if isinstance(subject, str):
        assert decision.action == subject  # the decision still holds the whole subject


@pytest.mark.parametrize("subject", ["/etc/secrets.txt", "/root/.bashrc", "/x/notes.txt"])
def test_a_relative_allow_pattern_starting_with_globstar_admits_no_absolute_path(
    subject: str,
) -> None:
    # (only deny patterns so written reach under the root: allow "**/*" is "in the workspace")
    policy = PermissionPolicy(mode="rules", allow={"write": ["**/*", "**/*.txt"]})
    assert policy.check("write", subject, {}, kind="path").behavior == "deny"
    assert policy.check("write", subject.lstrip("/"), {}, kind="path").behavior == "allow"


@pytest.mark.parametrize(
    "command", ["systemd-run --description 'a\tb' true", "ip netns exec ns1 printf 'x\ty'"]
)
def test_a_control_character_in_an_argument_only_guessed_as_a_program_is_not_refused(
    command: str,
) -> None:
    # behind a wrapper whose options are not modelled, every word is tried as the program:
    # one that is only an argument may hold a tab
    decision = DENY_RM.check("bash", command, {})
    assert decision.behavior == "allow", decision.reason


# -- commands held in configuration and the environment ----------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "git -c alias.x='!rm -rf /' x",  # a git alias starting with ! runs in a shell
        "git -c 'alias.x=!rm -rf /' x",
        "git -calias.x='!rm -rf /' x",
        "git -c core.pager='rm -rf /' log",
        "git -c core.editor='rm -rf /' commit",
        "git -c core.sshCommand='rm -rf /' fetch",
        "git -c CORE.PAGER='rm -rf /' log",  # keys are case-insensitive
        "git -c credential.helper='!rm -rf /' fetch",
        "git -c diff.external='rm -rf /' diff",
        "git -c diff.pdf.textconv='rm -rf /' diff",
        "git -c mergetool.x.cmd='rm -rf /' mergetool -t x",
        "git -c pager.log='rm -rf /' log",
        "git -C /repo -c core.fsmonitor='rm -rf /' status",
        "GIT_PAGER='rm -rf /' git log",  # variables that hold a command
        "PAGER='rm -rf /' man ls",
        "EDITOR='rm -rf /' crontab -e",
        "VISUAL='rm -rf /' git commit",
        "GIT_SSH_COMMAND='rm -rf /' git fetch",
        "GIT_EDITOR='rm -rf /' git rebase -i",
        "LESSOPEN='|rm -rf / %s' less x",
        "MANPAGER='rm -rf /' man ls",
        "env GIT_PAGER='rm -rf /' git log",
        "sudo GIT_PAGER='rm -rf /' git log",
    ],
)
def test_commands_held_in_configuration_or_the_environment(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "git -c user.name=bot commit -m 'rm old files'",
        'git -c user.name="O\'Brien" commit -m x',  # not a command: not parsed
        "git -c core.pager=less log",
        "git -c alias.st=status st",
        "GIT_PAGER=cat git log",
        "EDITOR=vim git commit",
        "PAGER='less -R' man ls",
    ],
)
def test_ordinary_configuration_and_environment_are_still_allowed(command: str) -> None:
    assert_allowed(command)
