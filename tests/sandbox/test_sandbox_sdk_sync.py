"""The unmodified synchronous e2b SDK against the local server."""

from __future__ import annotations

import io
import time

import pytest
from e2b import CommandExitException, NotFoundException, Sandbox, SandboxException, TimeoutException
from e2b.sandbox.filesystem.filesystem import FileType

from .conftest import sandbox_pids, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture()
def sbx(sdk):
    sandbox = Sandbox.create(timeout=60, **sdk)
    yield sandbox
    sandbox.kill()


def test_python_command_prints_two(sbx):
    result = sbx.commands.run('python -c "print(1+1)"')
    assert (result.stdout, result.stderr, result.exit_code) == ("2\n", "", 0)


def test_stderr_and_exit_code_raise_command_exit(sbx):
    with pytest.raises(CommandExitException) as info:
        sbx.commands.run("echo out; echo err >&2; exit 3")
    assert (info.value.stdout, info.value.stderr, info.value.exit_code) == ("out\n", "err\n", 3)


def test_envs_cwd_and_identity(sbx, sdk):
    sbx.files.make_dir("/home/user/work")
    result = sbx.commands.run(
        'echo "$GREETING $PWD $HOME $(hostname)"', envs={"GREETING": "hi"}, cwd="/home/user/work"
    )
    assert result.stdout == "hi /home/user/work /home/user sandbox\n"
    with_envs = Sandbox.create(envs={"SBX_VAR": "create-time"}, timeout=30, **sdk)
    try:
        assert with_envs.commands.run("echo $SBX_VAR").stdout == "create-time\n"
    finally:
        with_envs.kill()


def test_streamed_output_arrives_in_order(sbx):
    chunks: list[str] = []
    sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.05; done", on_stdout=chunks.append)
    assert "".join(chunks) == "line1\nline2\nline3\n"


def test_stdin_send_and_close(sbx):
    handle = sbx.commands.run("cat", background=True, stdin=True)
    handle.send_stdin("hello ")
    handle.send_stdin("world")
    sbx.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "hello world"


def test_background_command_listed_then_killed(sbx):
    handle = sbx.commands.run("sleep 600", background=True)
    assert handle.pid in [p.pid for p in sbx.commands.list()]
    assert handle.kill()
    with pytest.raises(CommandExitException):
        handle.wait()
    assert wait_until(lambda: handle.pid not in [p.pid for p in sbx.commands.list()])


def test_command_timeout_kills_the_process(sbx):
    start = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 600", timeout=1)
    assert time.monotonic() - start < 30
    assert wait_until(lambda: sbx.commands.list() == [])


def test_files_round_trip(sbx):
    sbx.files.write("/home/user/dir/a.txt", "alpha")
    sbx.files.write("/tmp/b.bin", b"\x00\x01")
    assert sbx.files.read("/home/user/dir/a.txt") == "alpha"
    assert sbx.files.read("/tmp/b.bin", format="bytes") == b"\x00\x01"
    assert sbx.commands.run("cat /home/user/dir/a.txt").stdout == "alpha"
    names = {e.name: e.type for e in sbx.files.list("/home/user/dir")}
    assert names == {"a.txt": FileType.FILE}
    info = sbx.files.get_info("/home/user/dir/a.txt")
    assert (info.size, info.type) == (5, FileType.FILE)
    assert sbx.files.exists("/home/user/dir/a.txt") and not sbx.files.exists("/home/user/none")
    assert sbx.files.make_dir("/home/user/new") is True
    assert sbx.files.make_dir("/home/user/new") is False
    sbx.files.rename("/home/user/dir/a.txt", "/home/user/new/c.txt")
    assert sbx.files.read("/home/user/new/c.txt") == "alpha"
    sbx.files.remove("/home/user/new")
    assert not sbx.files.exists("/home/user/new/c.txt")
    with pytest.raises(NotFoundException):
        sbx.files.read("/home/user/missing.txt")
    # every upload encoding the SDK uses: multipart (above), several files, octet-stream, gzip
    sbx.files.write_files(
        [{"path": "/home/user/m/1.txt", "data": "one"}, {"path": "/tmp/2.txt", "data": b"two"}]
    )
    sbx.files.write("/home/user/o.bin", io.BytesIO(b"streamed"), use_octet_stream=True)
    sbx.files.write("/home/user/g.txt", "zipped " * 100, gzip=True)
    assert sbx.commands.run("cat m/1.txt /tmp/2.txt o.bin").stdout == "onetwostreamed"
    assert sbx.files.read("/home/user/g.txt") == "zipped " * 100
    # the read-only host view is readable, as in a VM
    assert "root" in sbx.files.read("/etc/passwd")


def test_file_written_by_a_command_is_readable_through_the_api(sbx):
    sbx.commands.run("mkdir -p out && printf 'from-cmd' > out/r.txt")
    assert sbx.files.read("out/r.txt") == "from-cmd"
    sbx.commands.run("ln -s /home/user/out/r.txt /home/user/link")
    assert sbx.files.read("/home/user/link") == "from-cmd"


def test_control_plane_connect_info_timeout_list_kill(sdk):
    sbx = Sandbox.create(timeout=60, metadata={"who": "test"}, **sdk)
    again = Sandbox.connect(sbx.sandbox_id, **sdk)
    assert again.commands.run("echo same").stdout == "same\n"
    info = sbx.get_info()
    assert (info.sandbox_id, info.template_id, info.metadata) == (
        sbx.sandbox_id,
        "base",
        {"who": "test"},
    )
    sbx.set_timeout(900)  # longer than the 300 s that connect() extended it to
    assert sbx.get_info().end_at > info.end_at
    listed = [s.sandbox_id for s in Sandbox.list(**sdk).next_items()]
    assert sbx.sandbox_id in listed
    assert sbx.is_running()
    assert sbx.kill() is True
    assert not sbx.is_running()
    assert Sandbox.kill(sbx.sandbox_id, **sdk) is False
    with pytest.raises(SandboxException):
        sbx.commands.run("true")


def test_sandbox_expires_at_its_timeout(sdk):
    sbx = Sandbox.create(timeout=1, **sdk)
    handle = sbx.commands.run("sleep 600", background=True)
    assert wait_until(lambda: not sbx.is_running(), timeout=10)
    assert wait_until(lambda: sandbox_pids(sbx.sandbox_id) == [])
    with pytest.raises(Exception):
        handle.wait()


def test_unknown_template_is_a_clear_error(sdk):
    with pytest.raises(Exception, match="template 'no-such-template' not found"):
        Sandbox.create(template="no-such-template", **sdk)


def test_template_env_and_setup(sdk):
    sbx = Sandbox.create(template="with-env", timeout=30, **sdk)
    try:
        assert (
            sbx.commands.run("echo $TEMPLATE_VAR; cat setup.txt").stdout == "from-template\nready\n"
        )
    finally:
        sbx.kill()
