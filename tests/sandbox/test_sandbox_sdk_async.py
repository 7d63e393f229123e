"""The unmodified asynchronous e2b SDK (AsyncSandbox) against the local server."""

from __future__ import annotations

import asyncio

import pytest
from e2b import AsyncSandbox, CommandExitException

pytestmark = pytest.mark.slow


async def test_async_create_run_files_kill(sdk):
    sbx = await AsyncSandbox.create(timeout=60, **sdk)
    try:
        result = await sbx.commands.run('python -c "print(1+1)"')
        assert result.stdout == "2\n"
        await sbx.files.write("/home/user/async.txt", "async content")
        assert await sbx.files.read("/home/user/async.txt") == "async content"
        with pytest.raises(CommandExitException) as info:
            await sbx.commands.run("echo nope >&2; exit 7")
        assert (info.value.exit_code, info.value.stderr) == (7, "nope\n")
        handle = await sbx.commands.run("sleep 600", background=True)
        assert await handle.kill()
    finally:
        assert await sbx.kill()
    assert not await sbx.is_running()


async def test_async_sandboxes_run_concurrently(sdk):
    sandboxes = await asyncio.gather(*(AsyncSandbox.create(timeout=60, **sdk) for _ in range(8)))
    try:
        results = await asyncio.gather(
            *(s.commands.run(f"echo {i}") for i, s in enumerate(sandboxes))
        )
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
        assert len({s.sandbox_id for s in sandboxes}) == 8
    finally:
        await asyncio.gather(*(s.kill() for s in sandboxes))
