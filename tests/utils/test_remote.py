"""``@remote_class``: local without Ray, a Ray actor through ``.remote``, Ray started on demand."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from twinkle.envs import EnvPool
from twinkle.errors import MissingExtraError
from twinkle.rollout.multi_turn import MultiTurnRollout
from twinkle.utils import remote_class


@remote_class(num_cpus=0)
class Counter:
    def __init__(self, start: int = 0) -> None:
        self.n = start

    def inc(self) -> int:
        self.n += 1
        return self.n


class SubCounter(Counter):
    pass


def test_the_class_is_unchanged_and_runs_locally():
    assert Counter(2).inc() == 3 and SubCounter().inc() == 1
    assert callable(Counter.remote) and callable(SubCounter.remote)
    # The seed's two remote classes.
    assert callable(MultiTurnRollout.remote) and callable(EnvPool.remote)


def test_remote_without_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(MissingExtraError, match=r"Counter\.remote .*pip install 'twinkle\[ray\]'"):
        Counter.remote(1)


def test_importing_the_decorated_modules_does_not_import_ray():
    code = (
        "import sys, twinkle.utils, twinkle.rollout.multi_turn, twinkle.envs.openenv_pool\n"
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_remote_actor_and_envpool_start_a_local_ray_when_none_runs(tmp_path):
    # A fresh interpreter: no ray.init() anywhere, as a user would write it.
    code = textwrap.dedent(
        """
        import ray
        from twinkle.envs import EnvPool
        from twinkle.utils import remote_class

        @remote_class(num_cpus=0)
        class Counter:
            def __init__(self, start):
                self.n = start
            def inc(self):
                self.n += 1
                return self.n

        assert not ray.is_initialized()
        pool = EnvPool(pool_size=2, env_kwargs={'env_name': 'number_guess'}, remote=True)
        assert ray.is_initialized()
        env = pool.get_adapters()[1]
        env.reset(target=3)
        print(env.step('guess', {'guess': 3}).info['episode_reward'])
        pool.close()
        print(ray.get(Counter.remote(1).inc.remote()))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=240
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1.0", "2"]
