"""The command lines that shell-text rules let through, run inside the sandbox: each runs, and
none changes anything outside its writable directory or reaches a server on 127.0.0.1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from lionexec.sandbox import Profile, run_command

from .conftest import Site


def profile(site: Site, bwrap: str, **options: object) -> Profile:
    return Profile(writable=[str(site.work)], bwrap=bwrap, **options)  # type: ignore[arg-type]


def git_repo(path: Path) -> None:
    """A repository of two commits at *path*, made outside the sandbox."""
    path.mkdir()
    identity = ["-c", "user.email=t@example.com", "-c", "user.name=t"]
    for args in (
        ["init", "-q"],
        [*identity, "commit", "-q", "--allow-empty", "-m", "one"],
        [*identity, "commit", "-q", "--allow-empty", "-m", "two"],
    ):
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)


def hostile_lines(site: Site) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, the file in the writable directory that shows the line really ran)."""
    o, w = site.outside, site.work
    return {
        "perl unlink": (
            ["perl", "-e", f"open(F, '>', '{w}/perl-ran'); unlink(@ARGV)"]
            + [str(path) for path in site.sentinels],
            "perl-ran",
        ),
        "tar checkpoint action": (
            [
                "tar",
                "-cf",
                "/dev/null",
                "--checkpoint=1",
                f"--checkpoint-action=exec=touch {w}/tar-ran; rm -rf {o}",
                str(w),
            ],
            "tar-ran",
        ),
        "git alias": (
            ["git", "-c", f"alias.boom=!touch {w}/git-ran; rm -rf {o}", "boom"],
            "git-ran",
        ),
        "git rebase --exec": (
            [
                "git",
                "-c",
                "user.email=t@example.com",
                "-c",
                "user.name=t",
                "-C",
                f"{w}/repo",
                "rebase",
                "-q",
                "--exec",
                f"touch {w}/rebase-ran; rm -rf {o}",
                "HEAD~1",
            ],
            "rebase-ran",
        ),
        "a copy of /bin/rm": (
            ["sh", "-c", f"cp /bin/rm {w}/remover && {w}/remover -rf {o}"],
            "remover",
        ),
        "sh -c rm -rf": (["sh", "-c", f"touch {w}/sh-ran; rm -rf {o}"], "sh-ran"),
        "eval -- rm": (["bash", "-c", f"touch {w}/eval-ran; eval -- rm -rf {o}"], "eval-ran"),
        "python shutil": (
            ["python3", "-c", f"import shutil; open('{w}/py-ran', 'w'); shutil.rmtree('{o}')"],
            "py-ran",
        ),
        "mv away": (["sh", "-c", f"touch {w}/mv-ran; mv {o} {w}/stolen"], "mv-ran"),
        "overwrite": (
            ["sh", "-c", f"touch {w}/echo-ran; echo gone > {site.sentinels[0]}"],
            "echo-ran",
        ),
    }


@pytest.mark.parametrize(
    "name",
    [
        "perl unlink",
        "tar checkpoint action",
        "git alias",
        "git rebase --exec",
        "a copy of /bin/rm",
        "sh -c rm -rf",
        "eval -- rm",
        "python shutil",
        "mv away",
        "overwrite",
    ],
)
async def test_a_hostile_line_runs_but_changes_nothing_outside(
    site: Site, bwrap: str, name: str
) -> None:
    git_repo(site.work / "repo")
    argv, witness = hostile_lines(site)[name]
    result = await run_command(argv, profile(site, bwrap))
    assert (site.work / witness).exists(), (name, result)  # it really ran, inside
    assert site.intact(), (name, result)
    assert result.confined


async def test_the_same_line_unconfined_does_the_damage(site: Site, bwrap: str) -> None:
    # The control: the test's line can delete the sentinels when nothing confines it.
    argv, _ = hostile_lines(site)["sh -c rm -rf"]
    result = await run_command(argv, profile(site, bwrap, confinement="none"))
    assert result.ok and not result.confined
    assert not site.outside.exists()


async def test_what_lies_under_the_real_tmp_is_not_even_visible(
    site: Site, bwrap: str, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    result = await run_command(["cat", str(secret)], profile(site, bwrap))
    assert result.exit_code != 0 and b"s3cret" not in result.stdout
    assert b"No such file" in result.stderr


async def test_hidden_paths_cannot_be_read(site: Site, bwrap: str) -> None:
    result = await run_command(
        ["sh", "-c", f"cat {site.sentinels[0]}; ls {site.outside / 'deep'}"],
        profile(site, bwrap, hidden=[str(site.sentinels[0]), str(site.outside / "deep")]),
    )
    assert result.stdout == b""  # the file reads empty, the directory lists nothing
    visible = await run_command(["cat", str(site.sentinels[0])], profile(site, bwrap))
    assert visible.stdout == b"sentinel"  # the control: readable when not hidden


# -- the network --------------------------------------------------------------------------


class Server:
    """An HTTP server on 127.0.0.1 that counts the connections it accepted."""

    def __init__(self) -> None:
        self.accepted = 0
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self.handle, listeners)

    async def handle(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        async with stream:
            with trio.move_on_after(5):
                await stream.receive_some(4096)
                await stream.send_all(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nreached")


def network_lines(port: int) -> dict[str, list[str]]:
    return {
        "curl": ["curl", "-sS", "--max-time", "5", f"http://127.0.0.1:{port}/"],
        "python socket": [
            "python3",
            "-c",
            "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), 5);"
            "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100).decode())",
            str(port),
        ],
        "bash /dev/tcp": [
            "bash",
            "-c",
            f"exec 3<>/dev/tcp/127.0.0.1/{port}; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3",
        ],
    }


@pytest.mark.parametrize("name", ["curl", "python socket", "bash /dev/tcp"])
async def test_no_network_unless_granted(site: Site, bwrap: str, name: str) -> None:
    server = Server()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        argv = network_lines(server.port)[name]
        denied = await run_command(argv, profile(site, bwrap))
        assert denied.exit_code != 0 and b"reached" not in denied.stdout
        assert server.accepted == 0
        granted = await run_command(
            argv, profile(site, bwrap, network=True)
        )  # the positive control
        assert granted.ok and b"reached" in granted.stdout, granted
        assert server.accepted == 1
        nursery.cancel_scope.cancel()


async def test_no_unix_socket_unless_granted(site: Site, bwrap: str) -> None:
    # A socket file on a read-only mount still accepts connections: the seccomp filter is
    # what keeps a command from asking a daemon (a container engine's, say) to act for it.
    path = str(site.outside / "daemon.sock")
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(path)
    listener.listen()
    argv = [
        "python3",
        "-c",
        "import socket, sys; c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]);"
        "print('connected')",
        path,
    ]
    with listener:
        denied = await run_command(argv, profile(site, bwrap))
        assert denied.exit_code == 1 and b"Operation not permitted" in denied.stderr
        granted = await run_command(argv, profile(site, bwrap, unix_sockets=True))  # the control
        assert granted.ok and granted.stdout == b"connected\n", granted
    paired = await run_command(
        ["python3", "-c", "import socket; socket.socketpair(); print('paired')"],
        profile(site, bwrap),
    )
    assert paired.ok and paired.stdout == b"paired\n"  # a private pair is still allowed
